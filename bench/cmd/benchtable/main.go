// Command benchtable reads the output of the bench module's benchmarks
// (go test -bench ... -benchmem) on standard input and prints markdown
// tables: one of throughput, with a row per scenario and GOMAXPROCS, and one
// of memory per key.
//
//	go test -run '^$' -bench . -benchmem -cpu 1,2 -count 1 | tee bench.txt
//	go run ./cmd/benchtable < bench.txt
//
// In the throughput table each cell is the median ns/op, allocs/op and B/op
// of a limiter, and the last columns give each Funnel variant's ns/op divided by
// that of the fastest other keyed limiter of the row (below 1 means Funnel
// is faster). The x/time/rate rows are references and are not counted among
// the keyed limiters: a single *rate.Limiter keeps no per-key state, and the
// map of limiters behind a mutex is the benchmark's own naive construction,
// which never forgets a key.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	runs, cpu, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(runs.order) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark results on standard input")
		os.Exit(1)
	}
	render(os.Stdout, runs, cpu)
	if runs.failed {
		// The tables above may lack rows: say so, even behind a pipe.
		fmt.Fprintln(os.Stderr, "benchtable: the benchmark run reported a failure")
		os.Exit(1)
	}
}

// id names one benchmark at one GOMAXPROCS.
type id struct {
	name  string // without "Benchmark" and without the -N suffix
	procs int
}

// results holds every metric of every benchmark, in the order first seen.
type results struct {
	order   []id
	metrics map[id]map[string][]float64 // unit -> one value per run
	failed  bool                        // a FAIL line was seen
}

// get returns the median of the values of unit for i, and whether there are
// any.
func (r *results) get(i id, unit string) (float64, bool) {
	v := r.metrics[i][unit]
	if len(v) == 0 {
		return 0, false
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2, true
	}
	return s[len(s)/2], true
}

// parse reads benchmark result lines ("BenchmarkX-2  100  12.3 ns/op ...")
// and returns them with the "cpu:" header, if any, noting whether a FAIL line
// was seen. Other lines are skipped.
func parse(in io.Reader) (*results, string, error) {
	r := &results{metrics: make(map[id]map[string][]float64)}
	cpu := ""
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if c, ok := strings.CutPrefix(line, "cpu: "); ok {
			cpu = strings.TrimSpace(c)
			continue
		}
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "FAIL" || len(f) > 1 && f[0] == "---" && f[1] == "FAIL:" {
			r.failed = true
			continue
		}
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue // not a result line, e.g. a benchmark's log output
		}
		i := splitName(strings.TrimPrefix(f[0], "Benchmark"))
		m := r.metrics[i]
		if m == nil {
			m = make(map[string][]float64)
			r.metrics[i] = m
			r.order = append(r.order, i)
		}
		for k := 2; k+1 < len(f); k += 2 {
			v, err := strconv.ParseFloat(f[k], 64)
			if err != nil {
				return nil, "", fmt.Errorf("%s: bad value %q", f[0], f[k])
			}
			m[f[k+1]] = append(m[f[k+1]], v)
		}
	}
	return r, cpu, sc.Err()
}

// splitName splits the -N GOMAXPROCS suffix off a benchmark name; without
// one, GOMAXPROCS was 1. (The bench module's names never end in digits.)
func splitName(name string) id {
	if k := strings.LastIndexByte(name, '-'); k >= 0 {
		if n, err := strconv.Atoi(name[k+1:]); err == nil && n > 0 {
			return id{name[:k], n}
		}
	}
	return id{name, 1}
}

// known are the limiters of the bench module with their column titles, in
// column order. Others follow, in the order first seen.
var known = []struct{ name, label string }{
	{"funnel-memstore", "Funnel AllowChecked"},
	{"funnel-limiter", "Funnel Limiter.Allow"},
	{"sethvargo", "sethvargo/go-limiter"},
	{"throttled", "throttled GCRA"},
	{"ulule", "ulule/limiter"},
	{"xrate-single", "x/time/rate single (ref)"},
	{"floor-memstore", "floor: memstore lookup + clock (ref)"},
	{"xrate-map", "x/time/rate map+mutex (naive)"},
	{"funnel-redis", "Funnel redisstore (go-redis)"},
	{"funnel-redis-rueidis", "Funnel redisstore (rueidis)"},
	{"funnel-redis-module", "Funnel redisstore, Funnel's module (go-redis)"},
	{"redis_rate", "go-redis/redis_rate"},
}

// rank is the position of limiter in known, or len(known).
func rank(limiter string) int {
	for k, l := range known {
		if l.name == limiter {
			return k
		}
	}
	return len(known)
}

func label(limiter string) string {
	if k := rank(limiter); k < len(known) {
		return known[k].label
	}
	return limiter
}

func isFunnel(limiter string) bool { return strings.HasPrefix(limiter, "funnel-") }
func isReference(limiter string) bool {
	return strings.HasPrefix(limiter, "xrate-") || strings.HasPrefix(limiter, "floor-")
}

// floor is the column of the floor row: the least a decision can cost, a
// lookup of the key in the memory store's table and one clock read.
const floor = "floor-memstore"

// row is one line of a table: a scenario (or limiter) at one GOMAXPROCS.
type row struct {
	key   string
	procs int
}

// collect groups the benchmarks named prefix+"<key>/<limiter>" (or
// prefix+"<limiter>" when nested is false) into rows and columns, in the
// order first seen (known limiters first, in their order), with rows of the
// same key sorted by GOMAXPROCS.
func collect(r *results, prefix string, nested bool) (rows []row, cols []string, cell map[row]map[string]id) {
	cell = make(map[row]map[string]id)
	for _, i := range r.order {
		rest, ok := strings.CutPrefix(i.name, prefix)
		if !ok {
			continue
		}
		key, limiter := rest, rest
		if nested {
			k := strings.LastIndexByte(rest, '/')
			if k < 0 {
				continue
			}
			key, limiter = rest[:k], rest[k+1:]
		}
		rw := row{key, i.procs}
		if cell[rw] == nil {
			cell[rw] = make(map[string]id)
			rows = append(rows, rw)
		}
		cell[rw][limiter] = i
		if !slices.Contains(cols, limiter) {
			cols = append(cols, limiter)
		}
	}
	slices.SortStableFunc(cols, func(a, b string) int { return rank(a) - rank(b) })
	keyOrder := make(map[string]int)
	for _, rw := range rows {
		if _, ok := keyOrder[rw.key]; !ok {
			keyOrder[rw.key] = len(keyOrder)
		}
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		if d := keyOrder[a.key] - keyOrder[b.key]; d != 0 {
			return d
		}
		return a.procs - b.procs
	})
	return rows, cols, cell
}

// render prints the throughput and memory tables.
func render(w io.Writer, r *results, cpu string) {
	if cpu != "" {
		fmt.Fprintf(w, "CPU: %s\n\n", cpu)
	}
	throughputTable(w, r)
	memoryTable(w, r)
	redisTable(w, r)
	familyTable(w, r)
	familyRedisTable(w, r)
	rlsTable(w, r)
	snapshotTable(w, r)
	leaseTables(w, r)
}

// familyTable prints the family on the memory store: per scenario and
// algorithm, ns/op (allocs/op).
func familyTable(w io.Writer, r *results) {
	rows, cols, cell := collect(r, "Family/", true)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "### The family in memory: ns/op (allocs/op), lower is better")
	fmt.Fprintln(w)
	cellTable(w, rows, cols, cell, func(i id) string {
		ns, ok := r.get(i, "ns/op")
		if !ok {
			return "—"
		}
		text := formatNs(ns) + " (" + metric(r, i, "allocs/op") + ")"
		if v, ok := r.get(i, "denied/op"); ok && v > 0 {
			text += fmt.Sprintf(" %.0f%% refused", 100*v)
		}
		return text
	})
}

// familyRedisTable prints the family on Redis: per scenario and algorithm,
// the CPU Redis spent per decision, in the scripts and in all, in µs.
func familyRedisTable(w io.Writer, r *results) {
	rows, cols, cell := collect(r, "FamilyRedis/", true)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "### The family on Redis, one decision per call (par32 rows: 32 callers per CPU, batched where the store batches): Redis CPU per decision, script (commandstats) / whole process, in µs")
	fmt.Fprintln(w)
	cellTable(w, rows, cols, cell, func(i id) string {
		script, ok := r.get(i, "redis-µs/op")
		if !ok {
			return "—"
		}
		text := fmt.Sprintf("%.2f / %s", script, metric(r, i, "redis-cpu-µs/op"))
		if v, ok := r.get(i, "denied/op"); ok && v > 0 {
			text += fmt.Sprintf(" (%.0f%% refused)", 100*v)
		}
		return text
	})
}

// rlsTable prints Envoy's rate-limit service beside the no-op gRPC server.
func rlsTable(w io.Writer, r *results) {
	rows, _, cell := collect(r, "RLS/", false)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "### Envoy's rate-limit service: ShouldRateLimit decisions/s over gRPC")
	fmt.Fprintln(w)
	writeRow(w, []string{"server", "cpu", "decisions/s", "allocs/op", "÷ no-op gRPC server"})
	writeRule(w, 5)
	for _, rw := range rows {
		i := cell[rw][rw.key]
		rate, ok := r.get(i, "decisions/s")
		if !ok {
			continue
		}
		ratio := "—"
		if base, ok := r.get(id{"RLS/noop-grpc", rw.procs}, "decisions/s"); ok && base > 0 {
			ratio = fmt.Sprintf("%.2f×", rate/base)
		}
		writeRow(w, []string{rw.key, strconv.Itoa(rw.procs), formatRate(rate) + "/s", metric(r, i, "allocs/op"), ratio})
	}
	fmt.Fprintln(w)
}

// cellTable prints rows of scenarios (and GOMAXPROCS) by columns, each cell
// formatted by format.
func cellTable(w io.Writer, rows []row, cols []string, cell map[row]map[string]id, format func(id) string) {
	head := []string{"scenario", "cpu"}
	for _, c := range cols {
		head = append(head, label(c))
	}
	writeRow(w, head)
	writeRule(w, len(head))
	for _, rw := range rows {
		line := []string{rw.key, strconv.Itoa(rw.procs)}
		for _, c := range cols {
			if i, ok := cell[rw][c]; ok {
				line = append(line, format(i))
			} else {
				line = append(line, "—")
			}
		}
		writeRow(w, line)
	}
	fmt.Fprintln(w)
}

func throughputTable(w io.Writer, r *results) {
	rows, cols, cell := collect(r, "Allow/", true)
	if len(rows) == 0 {
		return
	}
	var funnels []string
	for _, c := range cols {
		if isFunnel(c) {
			funnels = append(funnels, c)
		}
	}
	fmt.Fprintln(w, "### Throughput: ns/op (allocs/op; B/op), lower is better")
	fmt.Fprintln(w)
	head := []string{"scenario", "cpu"}
	for _, c := range cols {
		head = append(head, label(c))
	}
	for _, f := range funnels {
		head = append(head, label(f)+" ÷ fastest other keyed")
	}
	withFloor := slices.Contains(cols, floor)
	if withFloor {
		for _, f := range funnels {
			head = append(head, label(f)+" ÷ floor")
		}
	}
	writeRow(w, head)
	writeRule(w, len(head))
	var notes []string
	for _, rw := range rows {
		line := []string{rw.key, strconv.Itoa(rw.procs)}
		best, bestName := 0.0, ""
		for _, c := range cols {
			i, ok := cell[rw][c]
			ns, okNs := r.get(i, "ns/op")
			if !ok || !okNs {
				line = append(line, "—")
				continue
			}
			text := formatNs(ns)
			allocs, okA := r.get(i, "allocs/op")
			bytes, okB := r.get(i, "B/op")
			if okA && okB {
				text += " (" + formatNum(allocs) + "; " + formatNum(bytes) + " B)"
			}
			for _, m := range []struct{ unit, what, mark string }{
				{"denied/op", "refused", "†"},
				{"errors/op", "returned an error", "‡"},
			} {
				if v, ok := r.get(i, m.unit); ok && v > 0 {
					text += " " + m.mark
					notes = append(notes, fmt.Sprintf("%s %s, %s, cpu %d: %.2f%% of requests %s.",
						m.mark, label(c), rw.key, rw.procs, 100*v, m.what))
				}
			}
			line = append(line, text)
			if !isFunnel(c) && !isReference(c) && (bestName == "" || ns < best) {
				best, bestName = ns, c
			}
		}
		for _, f := range funnels {
			ns, ok := r.get(cell[rw][f], "ns/op")
			if _, in := cell[rw][f]; !in || !ok || bestName == "" {
				line = append(line, "—")
				continue
			}
			line = append(line, fmt.Sprintf("%.2f× (vs %s)", ns/best, label(bestName)))
		}
		if withFloor {
			base, okBase := r.get(cell[rw][floor], "ns/op")
			for _, f := range funnels {
				ns, ok := r.get(cell[rw][f], "ns/op")
				_, in := cell[rw][f]
				_, inBase := cell[rw][floor]
				if !in || !inBase || !ok || !okBase || base == 0 {
					line = append(line, "—")
					continue
				}
				line = append(line, fmt.Sprintf("%.2f×", ns/base))
			}
		}
		writeRow(w, line)
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
	}
}

// target is the memory budget per key that the memory table checks, beside
// the key's own length.
const target = 64

func memoryTable(w io.Writer, r *results) {
	rows, _, cell := collect(r, "MemoryPerKey/", false)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "### Memory per key (1,000,000 keys)")
	fmt.Fprintln(w)
	head := []string{"limiter", "cpu", "B/key", "key length (B)", "B/key − key length",
		fmt.Sprintf("≤ %d B + key?", target), "allocs/key", "ns/key (insert)"}
	writeRow(w, head)
	writeRule(w, len(head))
	for _, rw := range rows {
		i := cell[rw][rw.key]
		line := []string{label(rw.key), strconv.Itoa(rw.procs)}
		perKey, okPer := r.get(i, "B/key")
		keyLen, okLen := r.get(i, "key-B")
		line = append(line, metric(r, i, "B/key"), metric(r, i, "key-B"))
		if okPer && okLen {
			over := perKey - keyLen
			verdict := "yes"
			if over > target {
				verdict = "no"
			}
			line = append(line, fmt.Sprintf("%.1f", over), verdict)
		} else {
			line = append(line, "—", "—")
		}
		line = append(line, metric(r, i, "allocs/key"), metric(r, i, "ns/key"))
		writeRow(w, line)
	}
	fmt.Fprintln(w)
}

// metric formats the median of unit for i, or a dash.
func metric(r *results, i id, unit string) string {
	v, ok := r.get(i, unit)
	if !ok {
		return "—"
	}
	return formatNum(v)
}

// formatNs formats a duration in ns with at least three significant digits.
func formatNs(ns float64) string {
	switch {
	case ns >= 1000:
		return strconv.FormatFloat(ns, 'f', 0, 64)
	case ns >= 10:
		return strconv.FormatFloat(ns, 'f', 1, 64)
	default:
		return strconv.FormatFloat(ns, 'f', 2, 64)
	}
}

// formatNum formats v as an integer when it is one, else with one or two
// decimals.
func formatNum(v float64) string {
	switch {
	case v == float64(int64(v)):
		return strconv.FormatInt(int64(v), 10)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func writeRow(w io.Writer, cells []string) {
	fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
}

func writeRule(w io.Writer, n int) {
	fmt.Fprintln(w, "|"+strings.Repeat(" --- |", n))
}

// redisBaseline is the limiter the Redis table compares Funnel's stores with.
const redisBaseline = "redis_rate"

// redisTable prints the Redis benchmarks: per scenario and limiter, the
// decisions per second and allocations, and the CPU Redis spent per decision
// in the script (commandstats) and in all (the process), with each Funnel
// store's ratios to redis_rate.
func redisTable(w io.Writer, r *results) {
	rows, cols, cell := collect(r, "Redis/", true)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "### Redis: decisions/s (allocs/op), and Redis CPU per decision: script (commandstats) / whole process, in µs")
	fmt.Fprintln(w)
	head := []string{"scenario", "cpu"}
	for _, c := range cols {
		head = append(head, label(c))
	}
	var funnels []string
	for _, c := range cols {
		if isFunnel(c) {
			funnels = append(funnels, c)
			head = append(head, label(c)+" ÷ "+label(redisBaseline)+": decisions/s, script µs")
		}
	}
	writeRow(w, head)
	writeRule(w, len(head))
	for _, rw := range rows {
		line := []string{rw.key, strconv.Itoa(rw.procs)}
		for _, c := range cols {
			i, ok := cell[rw][c]
			rate, okR := r.get(i, "decisions/s")
			if !ok || !okR {
				line = append(line, "—")
				continue
			}
			text := fmt.Sprintf("%s/s (%s)", formatRate(rate), metric(r, i, "allocs/op"))
			if script, ok := r.get(i, "redis-µs/op"); ok {
				text += fmt.Sprintf("; %.2f / %s", script, metric(r, i, "redis-cpu-µs/op"))
			}
			if v, ok := r.get(i, "errors/op"); ok && v > 0 {
				text += fmt.Sprintf(" ‡ %.2f%% errors", 100*v)
			}
			line = append(line, text)
		}
		base, inBase := cell[rw][redisBaseline]
		baseRate, okRate := r.get(base, "decisions/s")
		baseScript, okScript := r.get(base, "redis-µs/op")
		for _, f := range funnels {
			i, in := cell[rw][f]
			rate, ok1 := r.get(i, "decisions/s")
			script, ok2 := r.get(i, "redis-µs/op")
			if !in || !inBase || !ok1 || !ok2 || !okRate || !okScript {
				line = append(line, "—")
				continue
			}
			line = append(line, fmt.Sprintf("%.2f×, %.2f×", rate/baseRate, script/baseScript))
		}
		writeRow(w, line)
	}
	fmt.Fprintln(w)
}

// formatRate formats a rate with a k suffix from 10,000 on.
func formatRate(v float64) string {
	if v >= 10000 {
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
