package config

import (
	"bufio"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestREADMEFlagTable checks the README's table of flags against Flags, the
// one declaration: every flag has a row, every row's flags exist, a row's
// keys are its flags' names with '_' for '-', and its default is the
// flag's, or, for a flag whose default is its zero value, what that zero
// means as the flag's own help says it ("(0: 100ms)").
func TestREADMEFlagTable(t *testing.T) {
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fs := flag.NewFlagSet("funnel serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := Default()
	Flags(fs, &c)

	code := regexp.MustCompile("`([^`]*)`")
	rows := map[string]bool{}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| flag | config file key | default |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 4 {
			t.Fatalf("README row %q", line)
		}
		var names, keys []string
		for _, m := range code.FindAllStringSubmatch(cells[0], -1) {
			name, _, _ := strings.Cut(strings.TrimPrefix(m[1], "--"), " ")
			names = append(names, name)
		}
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			keys = append(keys, m[1])
		}
		if len(names) == 1 && names[0] == "config" {
			continue // the file itself: no key, no default
		}
		if len(keys) != len(names) {
			t.Errorf("README row of %v: keys %v", names, keys)
			continue
		}
		def := strings.TrimSpace(cells[2])
		defs := strings.Split(def, ", ")
		if len(defs) != len(names) || !strings.HasPrefix(def, "`") {
			defs = nil // one default for every flag of the row
		}
		for i, name := range names {
			if defs != nil {
				def = defs[i]
			}
			fl := fs.Lookup(name)
			switch {
			case fl == nil:
				t.Errorf("README: --%s is no flag", name)
				continue
			case rows[name]:
				t.Errorf("README: --%s has two rows", name)
			case keys[i] != Key(name):
				t.Errorf("README: --%s's key is %q, want %q", name, keys[i], Key(name))
			}
			rows[name] = true
			if msg := checkDefault(fl, def); msg != "" {
				t.Errorf("README: --%s: default %q: %s", name, def, msg)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	fs.VisitAll(func(fl *flag.Flag) {
		if !rows[fl.Name] {
			t.Errorf("README: --%s has no row in the table of flags", fl.Name)
		}
	})
}

// checkDefault returns why def, a README default ("`30s`", "false",
// "none", "0 (never)", "half the descriptors…"), does not say flag fl's
// default, or "".
func checkDefault(fl *flag.Flag, def string) string {
	text := def
	if m := regexp.MustCompile("^`([^`]*)`").FindStringSubmatch(def); m != nil {
		text = m[1]
	}
	v := fl.Value.(flag.Getter).Get()
	zero := zeroText(fl)
	isZero := fl.DefValue == zero || fl.DefValue == "0" && zero == "0s"
	switch {
	case strings.HasPrefix(text, "none") || strings.HasPrefix(text, "0 (") || text == "0" || text == "false":
		if !isZero {
			return "the flag's default is " + fl.DefValue
		}
		return ""
	}
	if d, ok := v.(time.Duration); ok {
		if want, err := time.ParseDuration(text); err == nil && want == d {
			return ""
		}
	} else if text == fl.DefValue {
		return ""
	}
	// What the zero value means, as the flag's help says it.
	if isZero && strings.Contains(fl.Usage, text) {
		return ""
	}
	if isZero && !strings.HasPrefix(def, "`") {
		return "" // a description of what the zero value means ("half the descriptors")
	}
	return "the flag's default is " + fl.DefValue + " and its help does not say " + text
}
