// Command fleet measures a fleet of `funnel serve` processes sharing one
// hot key through one redis-server, as an operator would run them: plain
// (every decision a script in Redis), leasing in units (--lease) and
// leasing in rate shares (--lease --lease-shares), one after the other on
// a fresh Redis each.
//
//	go build -o /tmp/funnel ./cmd/funnel
//	cd bench && go run ./cmd/fleet -funnel /tmp/funnel -nodes 3 -factor 1.6
//
// Each run starts the nodes on free ports of 127.0.0.1 and offers
// CL.THROTTLE hot BURST RATE 1 at factor times the rate, paced, spread
// evenly over the nodes (-conns connections each), for -seconds. It prints
// the decisions per second, the share admitted against the rate, and,
// from the Redis server's own counters, its script calls per decision and
// its CPU (utime+stime from /proc) per decision.
//
// Every process it starts is stopped when the run ends, and (on Linux)
// when it dies.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/redistest"
)

type options struct {
	funnel, redisServer string
	nodes, conns        int
	rate, burst         int64
	factor              float64
	seconds             float64
	lease               time.Duration
	modes               string
}

func main() {
	var o options
	flag.StringVar(&o.funnel, "funnel", "", "the funnel binary (go build -o … ./cmd/funnel)")
	flag.StringVar(&o.redisServer, "redis-server", "redis-server", "the redis-server binary")
	flag.IntVar(&o.nodes, "nodes", 3, "funnel serve processes")
	flag.IntVar(&o.conns, "conns", 8, "connections per node")
	flag.Int64Var(&o.rate, "rate", 20000, "the limit's rate per second")
	flag.Int64Var(&o.burst, "burst", 500, "the limit's max_burst")
	flag.Float64Var(&o.factor, "factor", 1.6, "demand as a multiple of the rate")
	flag.Float64Var(&o.seconds, "seconds", 5, "how long each run offers its demand")
	flag.DurationVar(&o.lease, "lease", 200*time.Millisecond, "the lifetime of the leasing runs")
	flag.StringVar(&o.modes, "modes", "plain,units,shares", "the runs, in order")
	flag.Parse()
	if o.funnel == "" {
		fmt.Fprintln(os.Stderr, "fleet: -funnel is required")
		os.Exit(2)
	}
	fmt.Printf("%d nodes, CL.THROTTLE hot %d %d 1 at %.2f× the rate, %.0f s each, lease %v\n", o.nodes, o.burst, o.rate, o.factor, o.seconds, o.lease)
	fmt.Printf("%-7s %12s %10s %14s %16s\n", "mode", "decisions/s", "admitted", "calls/decision", "redis µs/decision")
	for _, mode := range strings.Split(o.modes, ",") {
		if err := run(o, mode); err != nil {
			fmt.Fprintf(os.Stderr, "fleet: %s: %v\n", mode, err)
			os.Exit(1)
		}
	}
}

// run measures one mode on a fresh Redis and fresh nodes.
func run(o options, mode string) error {
	var stop []func()
	defer func() {
		for i := len(stop) - 1; i >= 0; i-- {
			stop[i]()
		}
	}()
	rport, err := redistest.FreePort()
	if err != nil {
		return err
	}
	rs := exec.Command(o.redisServer, "--port", strconv.Itoa(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	rs.SysProcAttr = dieWithParent()
	if err := rs.Start(); err != nil {
		return err
	}
	stop = append(stop, func() { rs.Process.Kill(); rs.Wait() })
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(rport)})
	stop = append(stop, func() { rc.Close() })
	if err := ready(rc); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	var clients []*redis.Client
	for range o.nodes {
		port, err := redistest.FreePort()
		if err != nil {
			return err
		}
		args := []string{"serve", "--store", "redis://127.0.0.1:" + strconv.Itoa(rport) + "/0",
			"--resp", "127.0.0.1:" + strconv.Itoa(port), "--http", "", "--grpc", "", "--log-level", "warn"}
		switch mode {
		case "units":
			args = append(args, "--lease", o.lease.String())
		case "shares":
			args = append(args, "--lease", o.lease.String(), "--lease-shares")
		case "plain":
		default:
			return fmt.Errorf("unknown mode %q (plain, units, shares)", mode)
		}
		cmd := exec.Command(o.funnel, args...)
		cmd.SysProcAttr = dieWithParent()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		stop = append(stop, func() { cmd.Process.Kill(); cmd.Wait() })
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), PoolSize: o.conns})
		stop = append(stop, func() { c.Close() })
		if err := ready(c); err != nil {
			return fmt.Errorf("funnel serve: %w", err)
		}
		clients = append(clients, c)
	}
	ctx := context.Background()
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	cpu0, err := cpuTime(rs.Process.Pid)
	if err != nil {
		return err
	}
	// Paced: worker w sends its i-th request at start + (i·W + w)·gap.
	workers := o.nodes * o.conns
	gap := time.Duration(float64(time.Second) / (o.factor * float64(o.rate)))
	total := int64(o.seconds * o.factor * float64(o.rate))
	var allowed, sent, failed atomic.Int64
	start := time.Now().Add(50 * time.Millisecond)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w%o.nodes]
			for i := int64(0); ; i++ {
				n := i*int64(workers) + int64(w)
				if n >= total {
					return
				}
				if d := time.Until(start.Add(time.Duration(n) * gap)); d > 0 {
					time.Sleep(d)
				}
				v, err := c.Do(ctx, "CL.THROTTLE", "hot", o.burst, o.rate, 1).Slice()
				sent.Add(1)
				if err != nil || len(v) != 5 {
					failed.Add(1)
					continue
				}
				if x, _ := v[0].(int64); x == 0 {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := cpuTime(rs.Process.Pid)
	if err != nil {
		return err
	}
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return err
	}
	d := float64(sent.Load())
	fmt.Printf("%-7s %12.0f %9.3f× %14.5f %16.3f", mode, d/elapsed.Seconds(),
		float64(allowed.Load())/elapsed.Seconds()/float64(o.rate), float64(redistest.ScriptCalls(info))/d,
		float64((cpu1-cpu0).Microseconds())/d)
	if n := failed.Load(); n > 0 {
		fmt.Printf("  (%d errors)", n)
	}
	fmt.Println()
	return nil
}

// ready waits up to 10 s for c to answer PING.
func ready(c *redis.Client) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
