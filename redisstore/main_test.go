package redisstore_test

import (
	"log/slog"
	"os"
	"testing"

	"github.com/funnelrl/funnel/redisstore"
)

// TestMain keeps go-redis from writing a line for every connection attempt
// that the outage tests make fail on purpose.
func TestMain(m *testing.M) {
	redisstore.SetGoRedisLogger(slog.Default())
	os.Exit(m.Run())
}
