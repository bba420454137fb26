package respserver_test

import (
	"strings"
	"testing"

	"github.com/funnelrl/funnel/respserver"
)

// INFO shows the Persistence section that Config.Persistence fills, and
// none without it.
func TestInfoPersistence(t *testing.T) {
	ts := startServer(t, respserver.Config{Persistence: func() []string {
		return []string{"rdb_last_save_time:1700000000", "rdb_last_bgsave_status:ok"}
	}})
	c := ts.dial(t)
	info := c.do("INFO", "persistence")
	if field(info, "rdb_last_save_time") != "1700000000" || field(info, "rdb_last_bgsave_status") != "ok" || strings.Contains(info, "# Stats") {
		t.Fatalf("INFO persistence: %q", info)
	}
	if all := c.do("INFO"); !strings.Contains(all, "# Persistence\r\nrdb_last_save_time:1700000000\r\n") {
		t.Fatalf("INFO lacks the Persistence section: %q", all)
	}
	plain := startServer(t, respserver.Config{}).dial(t)
	if info := plain.do("INFO"); strings.Contains(info, "Persistence") {
		t.Fatalf("INFO without Config.Persistence: %q", info)
	}
}
