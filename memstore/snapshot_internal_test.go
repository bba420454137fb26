package memstore

import (
	"bytes"
	"context"
	"testing"
	"time"
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
