package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// With -redis-cpu, benchserver measures what a decision costs Redis when
// `funnel serve --store redis://` decides CL.THROTTLE there:
//
//	redis-benchmark -c 50 -P 16 -r 100000 -n N CL.THROTTLE key:__rand_int__ 100 10 60 1
//
// against funnel serve in front of a fresh redis-server (--save ""
// --appendonly no) for each run, and reads the redis-server process's CPU
// time (user and system, from /proc) before and after: Redis's CPU per
// decision, its network I/O and its sleeps between batches included. The
// variants, in alternating order, -rounds times:
//
//   - script: a Redis without Funnel's module (gcra.lua decides);
//   - module: a Redis that has loaded Funnel's module (-module), which
//     decides through FUNNEL.GCRA;
//   - module raw: the same, loaded with "encoding raw";
//   - redis-cell (with -cell, the path of its libredis_cell.so): the same
//     redis-benchmark sent straight to a Redis that has loaded redis-cell,
//     whose CL.THROTTLE Funnel's reproduces.
//
// It prints each run, then the medians and their ratio to redis-cell's.
// After each Funnel run it checks, with INFO commandstats, that Redis's
// decisions took the variant's path.

// cpuVariant is one way of serving the runs.
type cpuVariant struct {
	name   string
	load   []string // redis-server's --loadmodule arguments
	direct bool     // redis-benchmark talks to Redis, not to funnel serve
	module bool     // FUNNEL.GCRA must have decided
}

func runRedisCPU(ctx context.Context, o options) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		return 1
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return fail(fmt.Errorf("-redis-cpu reads a process's CPU time from /proc: %w", err))
	}
	variants := []cpuVariant{{name: "script"}}
	if o.module != "" {
		variants = append(variants,
			cpuVariant{name: "module", load: []string{"--loadmodule", o.module}, module: true},
			cpuVariant{name: "module raw", load: []string{"--loadmodule", o.module, "encoding", "raw"}, module: true})
	}
	if o.cell != "" {
		variants = append(variants, cpuVariant{name: "redis-cell", load: []string{"--loadmodule", o.cell}, direct: true})
	}
	throttle := []string{"CL.THROTTLE", "key:__rand_int__", "100", "10", "60", "1"}
	us := map[string][]float64{}
	rps := map[string][]float64{}
	fmt.Printf("Redis's CPU per CL.THROTTLE decision: redis-benchmark -c %d -P 16 -r %d -n %d, %d rounds\n\n", o.clients, o.keys, o.cpuN, o.rounds)
	for round := range o.rounds {
		order := slices.Clone(variants)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			cpu, res, err := cpuRun(ctx, o, v, throttle)
			if err != nil {
				return fail(fmt.Errorf("%s: %w", v.name, err))
			}
			per := cpu * 1e6 / float64(o.cpuN)
			us[v.name] = append(us[v.name], per)
			rps[v.name] = append(rps[v.name], res.rps)
			fmt.Fprintf(os.Stderr, "round %d, %s: %.3f µs of Redis CPU a decision, %.0f rps\n", round+1, v.name, per, res.rps)
		}
	}
	fmt.Println("| Redis | CPU µs a decision, median (runs) | rps, median | ÷ redis-cell |")
	fmt.Println("|---|---:|---:|---:|")
	cell := 0.0
	if o.cell != "" {
		cell = median(us["redis-cell"])
	}
	for _, v := range variants {
		runs := make([]string, len(us[v.name]))
		for i, x := range us[v.name] {
			runs[i] = fmt.Sprintf("%.2f", x)
		}
		ratio := "—"
		if cell > 0 {
			ratio = fmt.Sprintf("%.2f×", median(us[v.name])/cell)
		}
		fmt.Printf("| %s | %.2f (%s) | %.0f | %s |\n", v.name, median(us[v.name]), strings.Join(runs, ", "), median(rps[v.name]), ratio)
	}
	return 0
}

// cpuRun serves one run of v and returns the seconds of CPU the
// redis-server spent in it, and the benchmark's result.
func cpuRun(ctx context.Context, o options, v cpuVariant, throttle []string) (float64, result, error) {
	redisPort, err := freePort()
	if err != nil {
		return 0, result{}, err
	}
	args := append([]string{"--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"}, v.load...)
	redisSrv, err := startServer(ctx, "redis-server", redisPort, o.redisServer, args...)
	if err != nil {
		return 0, result{}, err
	}
	defer redisSrv.stop()
	port := redisPort
	if !v.direct {
		if port, err = freePort(); err != nil {
			return 0, result{}, err
		}
		funnelSrv, err := startServer(ctx, "funnel", port, o.funnel,
			"serve", "--resp", "127.0.0.1:"+strconv.Itoa(port), "--http", "", "--grpc", "", "--log-level", "warn",
			"--store-timeout", "5s", "--store", "redis://127.0.0.1:"+strconv.Itoa(redisPort))
		if err != nil {
			return 0, result{}, err
		}
		defer funnelSrv.stop()
	}
	pid := redisSrv.cmd.Process.Pid
	before, err := processCPU(pid)
	if err != nil {
		return 0, result{}, err
	}
	res, err := benchmark(ctx, o, port, 16, o.cpuN, throttle)
	if err != nil {
		return 0, result{}, err
	}
	after, err := processCPU(pid)
	if err != nil {
		return 0, result{}, err
	}
	if !v.direct {
		calls, err := infoField(redisPort, "commandstats", "cmdstat_funnel.gcra")
		if used := err == nil && calls != ""; used != v.module {
			return 0, result{}, fmt.Errorf("FUNNEL.GCRA decided: %v (%s), want %v", used, calls, v.module)
		}
	}
	return after - before, res, nil
}

// processCPU returns the user and system CPU seconds of process pid.
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The fields after the command's name, which is in parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	// Linux counts them in clock ticks, USER_HZ, which is 100 on every
	// architecture it supports.
	return (utime + stime) / 100, nil
}

// median returns the median of xs (not empty).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
