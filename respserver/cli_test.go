package respserver_test

import (
	"encoding/csv"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/respserver"
)

// run runs a Redis tool against the server with stdin, and returns what it
// printed (stdout then stderr) and its exit code.
func (ts *testServer) run(t *testing.T, tool, stdin string, args ...string) (string, int) {
	t.Helper()
	host, port, _ := net.SplitHostPort(ts.addr)
	return redistest.RunTool(t, tool, stdin, time.Minute, nil, append([]string{"-h", host, "-p", port}, args...)...)
}

func TestRedisCLI(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"Ping", "", []string{"PING"}, "PONG\n"},
		// The README of redis-cell, in redis-cli's raw output (stdout is not
		// a terminal) and its formatted output.
		{"Throttle", "", []string{"CL.THROTTLE", "user123", "15", "30", "60"}, "0\n16\n15\n-1\n2\n"},
		{"ThrottleNoRaw", "", []string{"--no-raw", "cl.throttle", "user123", "15", "30", "60", "1"},
			"1) (integer) 0\n2) (integer) 16\n3) (integer) 14\n4) (integer) -1\n5) (integer) 4\n"},
		{"UsageError", "", []string{"--no-raw", "CL.THROTTLE", "k", "1"},
			"(error) Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]\n"},
		{"Unknown", "", []string{"--no-raw", "GET", "k"}, "(error) ERR unknown command 'GET', with args beginning with: 'k' \n"},
		{"Echo", "", []string{"--no-raw", "ECHO", "hi there"}, "\"hi there\"\n"},
		{"Hello3", "", []string{"-3", "--no-raw", "CLIENT", "GETNAME"}, "(nil)\n"},
		{"ConfigGet", "", []string{"--no-raw", "CONFIG", "GET", "maxclients"}, "1) \"maxclients\"\n2) \"10000\"\n"},
		{"SelectDB0", "", []string{"-n", "0", "PING"}, "PONG\n"},
		{"SelectDB1", "", []string{"-n", "1", "PING"}, "SELECT 1 failed: ERR DB index is out of range\nPONG\n"},
		// Commands read from standard input, one per line, quoting as in
		// redis-cli's prompt. redis-cli asks COMMAND DOCS first (for its
		// help) and must understand the answer.
		{"Stdin", "PING\nCL.THROTTLE \"a key\" 0 1 60\nCL.THROTTLE \"a key\" 0 1 60\nfoo bar\nDEL \"a key\"\nEXISTS \"a key\"\n", nil,
			"PONG\n0\n1\n0\n-1\n60\n1\n1\n0\n60\n60\nERR unknown command 'foo', with args beginning with: 'bar' \n\n1\n0\n"},
		{"StdinNoRaw", "CL.THROTTLE k2 1 1 1\nSELECT 1\nPING\n", []string{"--no-raw"},
			"1) (integer) 0\n2) (integer) 2\n3) (integer) 1\n4) (integer) -1\n5) (integer) 1\n(error) ERR DB index is out of range\nPONG\n"},
		{"StdinHello3", "HELLO 3 SETNAME cli\nCLIENT GETNAME\n", []string{"--no-raw"},
			"1# \"server\" => \"funnel\"\n2# \"version\" => \"%VERSION%\"\n3# \"proto\" => (integer) 3\n4# \"id\" => (integer) %ID%\n" +
				"5# \"mode\" => \"standalone\"\n6# \"role\" => \"master\"\n7# \"modules\" => (empty array)\n\"cli\"\n"},
		// The last argument from standard input.
		{"StdinArg", "binary\x00key", []string{"-x", "--no-raw", "ECHO"}, "\"binary\\x00key\"\n"},
		// --pipe sends its input as it is: inline commands, here, then an
		// ECHO of its own to know when all replies are in.
		{"PipeInline", "PING\r\nCL.THROTTLE piped 1 1 1\r\nSET a b\r\n", []string{"--pipe"},
			"All data transferred. Waiting for the last reply...\n" +
				"ERR unknown command 'SET', with args beginning with: 'a' 'b' \n" +
				"Last reply received from server.\nerrors: 1, replies: 3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := ts.run(t, "redis-cli", tc.stdin, tc.args...)
			want := tc.want
			if strings.Contains(want, "%VERSION%") {
				// The build's version and the connection's id vary.
				v, id := "", ""
				for _, l := range strings.Split(got, "\n") {
					if s, ok := strings.CutPrefix(l, "2# \"version\" => \""); ok {
						v = strings.TrimSuffix(s, "\"")
					}
					if s, ok := strings.CutPrefix(l, "4# \"id\" => (integer) "); ok {
						id = s
					}
				}
				want = strings.NewReplacer("%VERSION%", v, "%ID%", id).Replace(want)
			}
			wantCode := 0
			if tc.name == "PipeInline" {
				wantCode = 1 // redis-cli --pipe exits 1 when a reply was an error
			}
			// redis-cli's own order of stdout and stderr is kept apart here:
			// compare the lines as a multiset only where both are used.
			if tc.name == "PipeInline" || tc.name == "SelectDB1" {
				if sortLines(got) != sortLines(want) || code != wantCode {
					t.Fatalf("redis-cli %q: exit %d\n%s\nwant exit %d\n%s", tc.args, code, got, wantCode, want)
				}
				return
			}
			if got != want || code != wantCode {
				t.Fatalf("redis-cli %q < %q: exit %d\n got %q\nwant %q", tc.args, tc.stdin, code, got, want)
			}
		})
	}
}

func sortLines(s string) string {
	l := strings.Split(s, "\n")
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j] < l[j-1]; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
	return strings.Join(l, "\n")
}

func TestRedisCLIAuth(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{Password: "sekret", Users: map[string]string{"alice": "wonder"}})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-raw", "PING"}, "(error) NOAUTH Authentication required.\n"},
		{[]string{"-a", "sekret", "--no-auth-warning", "PING"}, "PONG\n"},
		{[]string{"--user", "alice", "--pass", "wonder", "--no-auth-warning", "CL.THROTTLE", "k", "0", "1", "1"}, "0\n1\n0\n-1\n1\n"},
		{[]string{"-a", "wrong", "--no-auth-warning", "PING"}, "AUTH failed: WRONGPASS invalid username-password pair or user is disabled.\nNOAUTH Authentication required.\n\n"},
		{[]string{"-3", "--user", "alice", "--pass", "wonder", "--no-auth-warning", "--no-raw", "CLIENT", "GETNAME"}, "(nil)\n"},
	} {
		got, _ := ts.run(t, "redis-cli", "", tc.args...)
		if sortLines(got) != sortLines(tc.want) {
			t.Errorf("redis-cli %q:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
}

// TestRedisBenchmark runs redis-benchmark briefly, without and with
// pipelining: every request gets a decision, counted in INFO, and the server
// stays healthy.
func TestRedisBenchmark(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	const n = 5000
	total := 0
	for _, pipeline := range []string{"1", "16"} {
		out, code := ts.run(t, "redis-benchmark", "", "-c", "10", "-n", strconv.Itoa(n), "-P", pipeline, "-r", "1000", "--csv",
			"CL.THROTTLE", "key:__rand_int__", "15", "30", "60")
		total += n
		if code != 0 {
			t.Fatalf("redis-benchmark -P %s: exit %d\n%s", pipeline, code, out)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(recs) != 2 || recs[0][0] != "test" || recs[0][1] != "rps" {
			t.Fatalf("redis-benchmark -P %s: unexpected output (%v):\n%s", pipeline, err, out)
		}
		if rps, err := strconv.ParseFloat(recs[1][1], 64); err != nil || rps <= 0 {
			t.Fatalf("redis-benchmark -P %s: rps %q", pipeline, recs[1][1])
		}
	}
	c := ts.dial(t)
	if got := c.do("PING"); got != simple("PONG") {
		t.Fatalf("PING after the benchmark: %q", got)
	}
	// redis-benchmark's clients have all gone; their counts are final.
	poll(t, "the benchmark's clients to leave", func() bool { return ts.srv.Stats().Clients == 1 })
	info := c.do("INFO", "stats")
	allowed, _ := strconv.Atoi(field(info, "throttle_allowed"))
	limited, _ := strconv.Atoi(field(info, "throttle_limited"))
	// With -P, redis-benchmark may send up to a pipeline more per client
	// than -n.
	if allowed+limited < total || allowed+limited > total+10*16 || allowed == 0 || limited == 0 {
		t.Fatalf("INFO counted %d allowed + %d limited decisions, want %d to %d in all, some of each:\n%s",
			allowed, limited, total, total+10*16, info)
	}
	if st := ts.srv.Stats(); st.Allowed != int64(allowed) || st.Limited != int64(limited) {
		t.Fatalf("Stats %+v disagree with INFO %d/%d", st, allowed, limited)
	}
}
