package main

import (
	"fmt"
	"io"
)

// leaseTables print BenchmarkLease: the fleet's throughput, leasing beside
// plain Redis and one memory store, and its two seconds at twice the limit.
func leaseTables(w io.Writer, r *results) {
	rows, cols, cell := collect(r, "Lease/throughput/", true)
	if len(rows) > 0 {
		fmt.Fprintln(w, "### A fleet of 16 nodes on one Redis, leasing or not: decisions/s; Redis calls per decision; p50 / p99 decision latency")
		fmt.Fprintln(w)
		cellTable(w, rows, cols, cell, func(i id) string {
			rate, ok := r.get(i, "decisions/s")
			if !ok {
				return "—"
			}
			text := formatRate(rate) + "/s"
			if c, ok := r.get(i, "calls/op"); ok {
				text += fmt.Sprintf("; %.4g calls", c)
			}
			p50, _ := r.get(i, "p50-ns")
			p99, _ := r.get(i, "p99-ns")
			text += fmt.Sprintf("; %.1f / %.1f µs", p50/1e3, p99/1e3)
			if v, ok := r.get(i, "errors/op"); ok && v > 0 {
				text += fmt.Sprintf(" (%.2g errors/op)", v)
			}
			return text
		})
	}
	rows, cols, cell = collect(r, "Lease/steady/", true)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "### Two seconds at twice the limit (20,000/s, burst 10,000) on one hot key: over-admitted; under-admitted, whole run / second second; calls per decision")
	fmt.Fprintln(w)
	cellTable(w, rows, cols, cell, func(i id) string {
		over, ok := r.get(i, "over-admitted")
		if !ok {
			return "—"
		}
		under, _ := r.get(i, "under-%")
		steady, _ := r.get(i, "steady-under-%")
		text := fmt.Sprintf("%.0f; %.2f%% / %.2f%%", over, under, steady)
		if c, ok := r.get(i, "calls/op"); ok {
			text += fmt.Sprintf("; %.3g calls", c)
		}
		return text
	})
}
