package metrics_test

import (
	"testing"
	"time"

	"github.com/funnelrl/funnel/metrics"
)

func TestSnapshots(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	sn, err := m.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	s := scrape(t, m)
	want(t, s, `funnel_snapshot_failures_total{cause="no_space"}`, "0")
	want(t, s, `funnel_snapshot_failures_total{cause="corrupt"}`, "0")
	want(t, s, `funnel_snapshot_last_success_timestamp_seconds`, "0")

	sn.Written(time.Unix(1700000000, 500000000), 250*time.Millisecond, 4096, 100)
	sn.Restored(42)
	sn.Failed(metrics.SnapshotNoSpace)
	sn.Failed(metrics.SnapshotNoSpace)
	s = scrape(t, m)
	want(t, s, `funnel_snapshot_last_success_timestamp_seconds`, "1.7000000005e+09")
	want(t, s, `funnel_snapshot_last_duration_seconds`, "0.25")
	want(t, s, `funnel_snapshot_last_bytes`, "4096")
	want(t, s, `funnel_snapshot_last_keys`, "100")
	want(t, s, `funnel_snapshot_restored_keys`, "42")
	want(t, s, `funnel_snapshot_failures_total{cause="no_space"}`, "2")

	if _, err := m.Snapshots(); err == nil {
		t.Error("the snapshot metrics registered twice")
	}
	var nilM *metrics.Metrics
	nilS, err := nilM.Snapshots()
	if err != nil || nilS != nil {
		t.Fatalf("nil Metrics: %v, %v", nilS, err)
	}
	nilS.Written(time.Now(), 0, 0, 0)
	nilS.Failed(metrics.SnapshotIO)
	nilS.Restored(1)
}
