package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/rules"
)

// TopReply is the answer of GET /ui/api/top.
type TopReply struct {
	// Window is the window asked for: "1m" or "15m".
	Window string `json:"window"`
	// Entries are the keys refused most, most first (at most TopN).
	Entries []Entry `json:"entries"`
	// Refusals counts the refusals the sketch counted since start, and
	// Skipped those it left out because another refusal held it at that
	// instant.
	Refusals uint64 `json:"refusals"`
	Skipped  uint64 `json:"skipped"`
	// Sampling reports that the current 15 seconds have seen more than
	// SampleAfter refusals: one in SampleRate is counted, as SampleRate.
	Sampling bool `json:"sampling"`
}

func (s *Server) topJSON(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	win := WindowMinute
	name := q.Get("window")
	switch name {
	case "", "1m":
		name = "1m"
	case "15m":
		win = WindowQuarter
	default:
		s.problem(w, http.StatusBadRequest, `console: window is "1m" or "15m"`)
		return
	}
	rep := TopReply{Window: name, Entries: s.opts.Top.Top(win, Filter{Edge: q.Get("edge"), Rule: q.Get("rule")})}
	if rep.Entries == nil {
		rep.Entries = []Entry{}
	}
	rep.Refusals, rep.Skipped, rep.Sampling = s.opts.Top.Counts()
	writeJSON(w, rep)
}

// BanReply is one active ban.
type BanReply struct {
	Key string `json:"key"`
	// UntilMS is when the ban ends (Unix milliseconds), LeftMS the time
	// left.
	UntilMS int64 `json:"until_ms"`
	LeftMS  int64 `json:"left_ms"`
}

// BansReply is the answer of GET /ui/api/bans.
type BansReply struct {
	Bans []BanReply `json:"bans"`
}

func (s *Server) bansJSON(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	bans, err := s.opts.Store.Bans(ctx)
	if err != nil {
		s.storeError(w, err)
		return
	}
	now := s.now()
	rep := BansReply{Bans: make([]BanReply, 0, len(bans))}
	for _, b := range bans {
		rep.Bans = append(rep.Bans, BanReply{Key: b.Key, UntilMS: b.Until.UnixMilli(), LeftMS: max(0, b.Until.Sub(now).Milliseconds())})
	}
	slices.SortFunc(rep.Bans, func(a, b BanReply) int { return strings.Compare(a.Key, b.Key) })
	writeJSON(w, rep)
}

// peekError answers a failed peek: 400 for a limit the store does not peek
// at (a concurrency limit), 409 for a key of another algorithm, else a
// store error.
func (s *Server) peekError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, funnel.ErrInvalidLimit), errors.Is(err, funnel.ErrInvalidQuantity):
		s.problem(w, http.StatusBadRequest, "console: "+err.Error())
	case errors.Is(err, funnel.ErrWrongType):
		s.problem(w, http.StatusConflict, "console: the key holds another algorithm's state")
	default:
		s.storeError(w, err)
	}
}

// storeError answers a failed store call: 503, the detail logged.
func (s *Server) storeError(w http.ResponseWriter, err error) {
	s.log.Warn("console: store call failed", "err", err)
	s.problem(w, http.StatusServiceUnavailable, "console: the store did not answer")
}

// KeyReply is the answer of GET /ui/api/key: a key's state under a limit,
// read by a peek that charges nothing.
type KeyReply struct {
	Key   string `json:"key"`
	Limit string `json:"limit"`
	// Rule is the rule's full key when the limit came from the rules.
	Rule         string `json:"rule,omitempty"`
	Held         bool   `json:"held"`
	TTLMS        int64  `json:"ttl_ms"`
	Remaining    int64  `json:"remaining"`
	Capacity     int64  `json:"capacity"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	Banned       bool   `json:"banned"`
	BanLeftMS    int64  `json:"ban_left_ms"`
	Fallback     bool   `json:"fallback"`
}

// limitOf parses a limit from the query: algorithm (gcra by default),
// count, period (a Go duration), burst and ban.
func limitOf(r *http.Request) (funnel.Limit, error) {
	q := r.URL.Query()
	var l funnel.Limit
	var err error
	if a := q.Get("algorithm"); a != "" {
		if l.Algorithm, err = funnel.ParseAlgorithm(a); err != nil {
			return l, err
		}
	}
	if l.Count, err = strconv.ParseInt(q.Get("count"), 10, 64); err != nil {
		return l, errors.New("console: count is a whole number")
	}
	if l.Period, err = time.ParseDuration(q.Get("period")); err != nil {
		return l, errors.New("console: period is a duration such as 1m or 10s")
	}
	if b := q.Get("burst"); b != "" {
		if l.Burst, err = strconv.ParseInt(b, 10, 64); err != nil {
			return l, errors.New("console: burst is a whole number")
		}
	} else if l.Algorithm == funnel.GCRA || l.Algorithm == funnel.LeakyBucket {
		l.Burst = max(0, l.Count-1)
	}
	if b := q.Get("ban"); b != "" {
		if l.Ban, err = time.ParseDuration(b); err != nil {
			return l, errors.New("console: ban is a duration such as 1h")
		}
	}
	return l, l.Validate()
}

// entriesOf parses a descriptor's entries: each entry parameter is
// "key=value" (or one line of them per entry in the entries parameter).
func entriesOf(r *http.Request) ([]rules.Entry, error) {
	q := r.URL.Query()
	lines := q["entry"]
	if e := q.Get("entries"); e != "" {
		lines = append(lines, strings.Split(e, "\n")...)
	}
	var out []rules.Entry
	for _, ln := range lines {
		ln = strings.TrimSpace(ln)
		if ln == "" {
			continue
		}
		k, v, ok := strings.Cut(ln, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("console: entry %q is not key=value", ln)
		}
		out = append(out, rules.Entry{Key: k, Value: v})
	}
	if len(out) == 0 {
		return nil, errors.New("console: a descriptor needs at least one entry key=value")
	}
	return out, nil
}

func (s *Server) keyJSON(w http.ResponseWriter, r *http.Request) {
	var rep KeyReply
	var limit funnel.Limit
	if d := r.URL.Query().Get("domain"); d != "" {
		m, ok, err := s.match(r, d)
		if err != nil {
			s.problem(w, http.StatusBadRequest, err.Error())
			return
		}
		if !ok || m.Rule.Limit.IsZero() {
			s.problem(w, http.StatusNotFound, "console: no limited rule matches this descriptor")
			return
		}
		limit, rep.Key, rep.Rule = m.Rule.Limit, s.opts.KeyPrefix+funnel.BoundKey(m.Key), m.Rule.FullKey
	} else {
		k, ok := keyOf(r)
		if !ok {
			s.problem(w, http.StatusBadRequest, "console: a key is required")
			return
		}
		l, err := limitOf(r)
		if err != nil {
			s.problem(w, http.StatusBadRequest, err.Error())
			return
		}
		limit, rep.Key = l, k
	}
	rep.Limit = limit.String()
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	res, err := s.opts.Limiter.Peek(ctx, rep.Key, limit)
	if err != nil {
		s.peekError(w, err)
		return
	}
	ttl, held, err := s.opts.Store.TTL(ctx, rep.Key)
	if err != nil {
		s.storeError(w, err)
		return
	}
	bans, err := s.opts.Store.Bans(ctx)
	if err != nil {
		s.storeError(w, err)
		return
	}
	for _, b := range bans {
		if b.Key == rep.Key {
			rep.Banned, rep.BanLeftMS = true, max(0, b.Until.Sub(s.now()).Milliseconds())
		}
	}
	rep.Held, rep.TTLMS = held, ttl.Milliseconds()
	rep.Remaining, rep.Capacity, rep.Fallback = res.Remaining, res.Limit, res.Fallback
	rep.RetryAfterMS, rep.ResetAfterMS = res.RetryAfter.Milliseconds(), res.ResetAfter.Milliseconds()
	rep.Banned = rep.Banned || res.Banned
	writeJSON(w, rep)
}

// match finds the rule of a descriptor of domain given in r.
func (s *Server) match(r *http.Request, domain string) (rules.Match, bool, error) {
	entries, err := entriesOf(r)
	if err != nil {
		return rules.Match{}, false, err
	}
	m, ok := s.set().Match(domain, entries)
	return m, ok, nil
}

// set returns the rules in force (nil: none).
func (s *Server) set() *rules.Set {
	if s.opts.Rules == nil {
		return nil
	}
	return s.opts.Rules()
}

// ActionReply is the answer of an action.
type ActionReply struct {
	Key string `json:"key"`
	// Done reports whether the action changed something: the key held
	// state (reset) or was banned (unban).
	Done bool `json:"done"`
}

func (s *Server) resetKey(w http.ResponseWriter, r *http.Request, user string) {
	s.act(w, r, user, "reset", s.opts.Store.Reset)
}

func (s *Server) unban(w http.ResponseWriter, r *http.Request, user string) {
	s.act(w, r, user, "unban", s.opts.Store.Unban)
}

// act applies f to the form's key and writes the audit log line.
func (s *Server) act(w http.ResponseWriter, r *http.Request, user, what string, f func(context.Context, string) (bool, error)) {
	key, ok := keyOf(r)
	if !ok {
		s.problem(w, http.StatusBadRequest, "console: a key is required")
		return
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	done, err := f(ctx, key)
	if err != nil {
		s.log.Warn("console: audit", "user", user, "action", what, "key", key, "addr", r.RemoteAddr, "err", err)
		s.storeError(w, err)
		return
	}
	s.log.Info("console: audit", "user", user, "action", what, "key", key, "done", done, "addr", r.RemoteAddr)
	writeJSON(w, ActionReply{Key: key, Done: done})
}

// RuleReply is one rule of RulesReply.
type RuleReply struct {
	FullKey string `json:"full_key"`
	Name    string `json:"name,omitempty"`
	// Limit describes the limit with its algorithm ("gcra 10 per 1m0s,
	// burst 9"), or says "unlimited" or "refuses every request"; Algorithm
	// and Rate are its two parts (Algorithm empty for the last two).
	Limit     string `json:"limit"`
	Algorithm string `json:"algorithm,omitempty"`
	Rate      string `json:"rate"`
	Unlimited bool   `json:"unlimited,omitempty"`
	Deny      bool   `json:"deny,omitempty"`
	Shadow    bool   `json:"shadow_mode,omitempty"`
	Quota     bool   `json:"quota_mode,omitempty"`
	// ChargeOverLimit is the rule's charge_over_limit: hits that overflow
	// are charged anyway (see rules.Rule.ChargeOverLimit).
	ChargeOverLimit bool   `json:"charge_over_limit,omitempty"`
	Where           string `json:"where,omitempty"`
}

// DomainReply is one domain of RulesReply.
type DomainReply struct {
	Domain string `json:"domain"`
	// Rules are the domain's rules by their full keys.
	Rules []RuleReply `json:"rules"`
	// Tree is the domain's descriptors as the rules nest them, in the
	// order of the files.
	Tree []*RuleNode `json:"tree"`
}

// RuleNode is one descriptor of a domain's tree: its key and value, its
// rule when it has one, and the descriptors nested in it.
type RuleNode struct {
	Key string `json:"key"`
	// Value is the descriptor's value; empty, it matches any value of
	// Key.
	Value       string      `json:"value,omitempty"`
	Rule        *RuleReply  `json:"rule,omitempty"`
	Descriptors []*RuleNode `json:"descriptors,omitempty"`
}

// insert places r in the tree nodes at path, and returns the tree.
func insert(nodes []*RuleNode, path []rules.Entry, r *RuleReply) []*RuleNode {
	if len(path) == 0 {
		return nodes
	}
	var n *RuleNode
	for _, c := range nodes {
		if c.Key == path[0].Key && c.Value == path[0].Value {
			n = c
			break
		}
	}
	if n == nil {
		n = &RuleNode{Key: path[0].Key, Value: path[0].Value}
		nodes = append(nodes, n)
	}
	if len(path) == 1 {
		n.Rule = r
	} else {
		n.Descriptors = insert(n.Descriptors, path[1:], r)
	}
	return nodes
}

// RulesReply is the answer of GET /ui/api/rules.
type RulesReply struct {
	// Version is a digest of the rules in force (the first 12 hex digits
	// of a SHA-256 of their keys and limits), "none" without rules.
	Version string        `json:"version"`
	Domains []DomainReply `json:"domains"`
	// LastReload is the last load's result: when (Unix ms), and its error.
	LastReloadMS    int64  `json:"last_reload_ms,omitempty"`
	LastReloadError string `json:"last_reload_error,omitempty"`
	Reloads         int64  `json:"reloads"`
	Failures        int64  `json:"failures"`
}

// reloadState is the last load of the rules.
type reloadState struct {
	at       time.Time
	err      string
	reloads  int64
	failures int64
}

// RulesReloaded records a load of the rules: err nil for a success.
func (s *Server) RulesReloaded(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reload.at = s.now()
	s.reload.reloads++
	s.reload.err = ""
	if err != nil {
		s.reload.failures++
		s.reload.err = err.Error()
	}
}

// rulesReply describes the rules in force.
func (s *Server) rulesReply() RulesReply {
	var rep RulesReply
	set := s.set()
	h := sha256.New()
	for _, d := range set.Domains() {
		dr := DomainReply{Domain: d}
		for _, ru := range set.All() {
			if ru.Domain != d {
				continue
			}
			rr := RuleReply{FullKey: ru.FullKey, Name: ru.Name, Unlimited: ru.Unlimited, Deny: ru.Deny(),
				Shadow: ru.ShadowMode, Quota: ru.QuotaMode, ChargeOverLimit: ru.ChargeOverLimit}
			switch {
			case ru.Unlimited:
				rr.Limit, rr.Rate = "unlimited", "unlimited"
			case ru.Deny():
				rr.Limit, rr.Rate = "refuses every request", "refuses every request"
			default:
				rr.Limit = ruleString(ru.Limit) // with its algorithm, gcra too
				rr.Algorithm = ru.Limit.Algorithm.String()
				rr.Rate = strings.TrimPrefix(rr.Limit, rr.Algorithm+" ")
			}
			if ru.File != "" {
				rr.Where = fmt.Sprintf("%s:%d", ru.File, ru.Line)
			}
			fmt.Fprintf(h, "%s\x00%s\x00%t%t%t\n", rr.FullKey, rr.Limit, rr.Shadow, rr.Quota, rr.ChargeOverLimit)
			dr.Rules = append(dr.Rules, rr)
			dr.Tree = insert(dr.Tree, ru.Path, &rr)
		}
		slices.SortFunc(dr.Rules, func(a, b RuleReply) int { return strings.Compare(a.FullKey, b.FullKey) })
		rep.Domains = append(rep.Domains, dr)
	}
	rep.Version = "none"
	if len(rep.Domains) > 0 {
		rep.Version = hex.EncodeToString(h.Sum(nil))[:12]
	}
	s.mu.Lock()
	if !s.reload.at.IsZero() {
		rep.LastReloadMS = s.reload.at.UnixMilli()
	}
	rep.LastReloadError, rep.Reloads, rep.Failures = s.reload.err, s.reload.reloads, s.reload.failures
	s.mu.Unlock()
	return rep
}

func (s *Server) rulesJSON(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.rulesReply()) }

// DryRunReply is the answer of GET /ui/api/dryrun: the rule a descriptor
// hits and what it would answer now, read by a peek that charges nothing.
type DryRunReply struct {
	Matched bool   `json:"matched"`
	Rule    string `json:"rule,omitempty"`
	Limit   string `json:"limit,omitempty"`
	Key     string `json:"key,omitempty"`
	// Answer is "OK" or "OVER_LIMIT", as the rate-limit service would
	// answer for this descriptor alone; with a rule in shadow mode, the
	// service answers OK whatever this says.
	Answer    string `json:"answer"`
	Shadow    bool   `json:"shadow_mode,omitempty"`
	Quota     bool   `json:"quota_mode,omitempty"`
	Remaining int64  `json:"remaining"`
	// ResetAfterMS is the time until the key is full again.
	ResetAfterMS int64 `json:"reset_after_ms"`
	Banned       bool  `json:"banned,omitempty"`
}

func (s *Server) dryRunJSON(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	hits := int64(1)
	if h := q.Get("hits"); h != "" {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil || n < 0 {
			s.problem(w, http.StatusBadRequest, "console: hits is a whole number, at least 0")
			return
		}
		hits = n
	}
	domain := q.Get("domain")
	if domain == "" {
		s.problem(w, http.StatusBadRequest, "console: a domain is required")
		return
	}
	m, ok, err := s.match(r, domain)
	if err != nil {
		s.problem(w, http.StatusBadRequest, err.Error())
		return
	}
	rep := DryRunReply{Answer: "OK"}
	if !ok {
		writeJSON(w, rep)
		return
	}
	ru := m.Rule
	rep.Matched, rep.Rule, rep.Shadow, rep.Quota = true, ru.FullKey, ru.ShadowMode, ru.QuotaMode
	switch {
	case ru.Unlimited:
		rep.Limit = "unlimited"
		writeJSON(w, rep)
		return
	case ru.Deny():
		rep.Limit, rep.Answer = "refuses every request", "OVER_LIMIT"
		writeJSON(w, rep)
		return
	}
	rep.Limit, rep.Key = ru.Limit.String(), s.opts.KeyPrefix+funnel.BoundKey(m.Key)
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	res, err := s.opts.Limiter.Peek(ctx, rep.Key, ru.Limit)
	if err != nil {
		s.peekError(w, err)
		return
	}
	rep.Remaining, rep.Banned, rep.ResetAfterMS = res.Remaining, res.Banned, res.ResetAfter.Milliseconds()
	if res.Banned || res.Remaining < hits {
		rep.Answer = "OVER_LIMIT"
	}
	writeJSON(w, rep)
}
