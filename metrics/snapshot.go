package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Causes of a failed snapshot, the values of snapshot_failures_total's
// cause label.
const (
	// SnapshotNoSpace: the disk is full (or over quota).
	SnapshotNoSpace = "no_space"
	// SnapshotPermission: the file or its directory may not be written.
	SnapshotPermission = "permission"
	// SnapshotIO: any other error of the file system.
	SnapshotIO = "io"
	// SnapshotCorrupt: the snapshot found at start was bad, and was moved
	// aside.
	SnapshotCorrupt = "corrupt"
)

var snapshotCauses = []string{SnapshotNoSpace, SnapshotPermission, SnapshotIO, SnapshotCorrupt}

// Snapshots are the metrics of the memory store's snapshots. Build them
// with Metrics.Snapshots; a nil *Snapshots does nothing.
type Snapshots struct {
	last     prometheus.Gauge
	duration prometheus.Gauge
	bytes    prometheus.Gauge
	keys     prometheus.Gauge
	restored prometheus.Gauge
	failures *prometheus.CounterVec
}

// Snapshots registers the metrics of snapshots in m's registry and returns
// them; call it once, when the store takes snapshots. A nil *Metrics
// returns nil.
func (m *Metrics) Snapshots() (*Snapshots, error) {
	if m == nil {
		return nil, nil
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: m.namespace, Name: name, Help: help})
	}
	s := &Snapshots{
		last:     gauge("snapshot_last_success_timestamp_seconds", "Unix time at which the last snapshot that succeeded was written."),
		duration: gauge("snapshot_last_duration_seconds", "Time the last snapshot that succeeded took to write, fsync and rename."),
		bytes:    gauge("snapshot_last_bytes", "Size of the last snapshot that succeeded."),
		keys:     gauge("snapshot_last_keys", "Keys in the last snapshot that succeeded."),
		restored: gauge("snapshot_restored_keys", "Keys restored from the snapshot at start."),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: m.namespace,
			Name:      "snapshot_failures_total",
			Help:      "Snapshots that could not be written, by cause (no_space, permission, io), and bad snapshots moved aside at start (corrupt).",
		}, []string{"cause"}),
	}
	for _, c := range snapshotCauses {
		s.failures.WithLabelValues(c)
	}
	for _, c := range []prometheus.Collector{s.last, s.duration, s.bytes, s.keys, s.restored, s.failures} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Written records a snapshot that succeeded: written at, in d, of bytes
// holding keys.
func (s *Snapshots) Written(at time.Time, d time.Duration, bytes, keys int64) {
	if s == nil {
		return
	}
	s.last.Set(float64(at.UnixNano()) / 1e9)
	s.duration.Set(d.Seconds())
	s.bytes.Set(float64(bytes))
	s.keys.Set(float64(keys))
}

// Restored records the number of keys restored at start.
func (s *Snapshots) Restored(keys int64) {
	if s == nil {
		return
	}
	s.restored.Set(float64(keys))
}

// Failed counts a failure of the given cause (one of the Snapshot*
// constants).
func (s *Snapshots) Failed(cause string) {
	if s == nil {
		return
	}
	s.failures.WithLabelValues(cause).Inc()
}
