package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseSnapshot(t *testing.T) {
	in := "snapshot: /var/lib/funnel/snapshot\nsnapshot_interval: 5s\nsnapshot_ignore_corrupt: true\n"
	got, err := Parse(strings.NewReader(in), "funnel.yaml", Default())
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Snapshot, want.SnapshotInterval, want.SnapshotIgnoreCorrupt = "/var/lib/funnel/snapshot", 5*time.Second, true
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	if Default().SnapshotInterval != 30*time.Second {
		t.Errorf("default snapshot_interval %v, want 30s", Default().SnapshotInterval)
	}
}

func TestValidateSnapshot(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.SnapshotInterval = -time.Second }, "snapshot_interval -1s is negative"},
		{func(c *Config) { c.Snapshot, c.Store = "snap", "redis://u:pw@127.0.0.1:6379/0" },
			`snapshot "snap": snapshots keep the memory store; the store is redis://u:xxxxx@127.0.0.1:6379/0`},
		{func(c *Config) { c.Snapshot, c.SnapshotInterval = "snap", 0 }, ""},
	} {
		cfg := Default()
		c.mod(&cfg)
		err := cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", cfg, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}
