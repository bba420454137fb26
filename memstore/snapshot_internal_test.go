package memstore

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/funnelrl/funnel/algo"
)

// A key that a snapshot holds twice (dropped and added again while the
// snapshot was written) is restored with its later record.
func TestSnapshotLaterRecordWins(t *testing.T) {
	const now = int64(1e18)
	clock := func() int64 { return now }
	s := New(Options{Now: clock, SweepInterval: -1})
	defer s.Close()
	// The header of an empty store's snapshot, then records by hand.
	var empty bytes.Buffer
	if _, err := s.WriteSnapshot(&empty); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	sw := &snapWriter{w: &b, s: now, sms: now / 1e6, wms: now / 1e6}
	sw.buf = append(sw.buf, empty.Bytes()[:headerSize]...)
	sw.startBlock()
	sw.tat("k", now+int64(time.Second))
	sw.tat("k", now+int64(time.Minute))
	sw.fam("f", &fstate{kind: kindFixed, expires: now + int64(time.Hour), a: now / 1e6, b: 3})
	sw.tat("f", now+int64(time.Second))
	sw.ban("b", now+int64(time.Hour))
	sw.ban("b", now+int64(time.Minute))
	sw.buf = append(sw.buf, recEnd, recVersions[recEnd], byte(sw.keys), byte(sw.bans))
	sw.closeBlock()
	sw.flush()
	r := New(Options{Now: clock, SweepInterval: -1})
	defer r.Close()
	st, err := r.ReadSnapshot(&b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Keys != 2 || st.Bans != 1 || r.Len() != 2 {
		t.Fatalf("restored %+v, holding %d keys; want 2 keys and a ban", st, r.Len())
	}
	if tat, _ := r.TAT("k"); tat != now+int64(time.Minute) {
		t.Errorf("k's TAT %d, want the later record's", tat-now)
	}
	if tat, _ := r.TAT("f"); tat != now+int64(time.Second) {
		t.Errorf("f's TAT %d, want the later record's (a funnel key)", tat-now)
	}
	if bans, _ := r.Bans(context.Background()); len(bans) != 1 || bans[0].Until.UnixNano() != now+int64(time.Hour) {
		t.Errorf("bans %v, want b's longer one", bans)
	}
}

// A concurrency record keeps the key's unit delay since version 2; a
// version 1 record (no unit delay) still reads, as a key without one.
func TestSnapshotConcUnitDelay(t *testing.T) {
	const now = int64(1e18)
	clock := func() int64 { return now }
	s := New(Options{Now: clock, SweepInterval: -1})
	defer s.Close()
	var empty bytes.Buffer
	if _, err := s.WriteSnapshot(&empty); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	sw := &snapWriter{w: &b, s: now, sms: now / 1e6, wms: now / 1e6}
	sw.buf = append(sw.buf, empty.Bytes()[:headerSize]...)
	sw.startBlock()
	leases := func() []algo.Lease { return []algo.Lease{{ID: "a", Expires: now/1e6 + 1000}} }
	sw.fam("v2", &fstate{kind: kindConc, expires: now + int64(time.Second), a: int64(150 * time.Millisecond), leases: leases()})
	at := len(sw.buf)
	sw.fam("v1", &fstate{kind: kindConc, expires: now + int64(time.Second), leases: leases()})
	if sw.buf[at] != recConc || sw.buf[at+1] != 2 || sw.buf[len(sw.buf)-1] != 0 {
		t.Fatalf("record % x: want a concurrency record of version 2 ending in a zero unit delay", sw.buf[at:])
	}
	sw.buf[at+1] = 1                // version 1 ...
	sw.buf = sw.buf[:len(sw.buf)-1] // ... which has no unit delay
	sw.buf = append(sw.buf, recEnd, recVersions[recEnd], byte(sw.keys), byte(sw.bans))
	sw.closeBlock()
	sw.flush()
	r := New(Options{Now: clock, SweepInterval: -1})
	defer r.Close()
	if st, err := r.ReadSnapshot(&b); err != nil || st.Keys != 2 {
		t.Fatalf("restored %+v, %v; want 2 keys", st, err)
	}
	for key, want := range map[string]int64{"v2": int64(150 * time.Millisecond), "v1": 0} {
		_, sh := r.hash(key)
		fs := sh.fam[key]
		if fs == nil || fs.a != want || len(fs.leases) != 1 {
			t.Errorf("%s restored as %+v; want unit delay %d and one lease", key, fs, want)
		}
	}
}
