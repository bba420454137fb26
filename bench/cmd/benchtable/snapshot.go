package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Targets of the snapshots: write and restore of 1M keys each under a
// second, at most 40 bytes per funnel key plus the key.
const (
	snapshotTargetMs  = 1000
	snapshotTargetKey = 40
)

// snapshotTable prints BenchmarkSnapshot: per store, the time to write a
// snapshot to a file (fsync included) and to restore it, and the file's
// bytes per key.
func snapshotTable(w io.Writer, r *results) {
	type cells struct{ write, restore id }
	var order []row
	byRow := map[row]*cells{}
	for _, i := range r.order {
		rest, ok := strings.CutPrefix(i.name, "Snapshot/")
		if !ok {
			continue
		}
		store, op, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		rw := row{store, i.procs}
		if byRow[rw] == nil {
			byRow[rw] = &cells{}
			order = append(order, rw)
		}
		switch op {
		case "write":
			byRow[rw].write = i
		case "restore":
			byRow[rw].restore = i
		}
	}
	if len(order) == 0 {
		return
	}
	fmt.Fprintln(w, "### Snapshots of the memory store: written to a file (fsync included) and restored")
	fmt.Fprintln(w)
	head := []string{"store", "cpu", "write (ms)", "restore (ms)", fmt.Sprintf("both < %d ms?", snapshotTargetMs),
		"file B/key", "key length (B)", fmt.Sprintf("≤ %d B + key?", snapshotTargetKey)}
	writeRow(w, head)
	writeRule(w, len(head))
	for _, rw := range order {
		c := byRow[rw]
		line := []string{rw.key, strconv.Itoa(rw.procs), metric(r, c.write, "ms/op"), metric(r, c.restore, "ms/op")}
		wms, okW := r.get(c.write, "ms/op")
		rms, okR := r.get(c.restore, "ms/op")
		line = append(line, verdict(okW && okR, wms < snapshotTargetMs && rms < snapshotTargetMs))
		perKey, okP := r.get(c.write, "B/key")
		keyLen, okK := r.get(c.write, "key-B")
		line = append(line, metric(r, c.write, "B/key"), metric(r, c.write, "key-B"),
			verdict(okP && okK, perKey-keyLen <= snapshotTargetKey))
		writeRow(w, line)
	}
	fmt.Fprintln(w)
}

// verdict is "yes" or "no" when known, else a dash.
func verdict(known, yes bool) string {
	switch {
	case !known:
		return "—"
	case yes:
		return "yes"
	}
	return "no"
}
