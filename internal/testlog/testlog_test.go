package testlog_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/funnelrl/funnel/internal/testlog"
)

// Records logged from many goroutines all reach the buffer, read while
// they are written, in slog's text format and at the level asked.
func TestNew(t *testing.T) {
	log, logs := testlog.New(slog.LevelInfo)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				log.Info("hello", "from", fmt.Sprintf("%d.%d", i, j))
				log.Debug("hidden")
				_ = logs.String()
			}
		})
	}
	wg.Wait()
	out := logs.String()
	if n := strings.Count(out, "level=INFO msg=hello from="); n != 8*50 {
		t.Errorf("%d records, want %d:\n%s", n, 8*50, out)
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("a record under the level was written:\n%s", out)
	}
	if !strings.Contains(out, "from=7.49\n") {
		t.Errorf("a record is missing:\n%s", out)
	}

	debug, debugLogs := testlog.New(slog.LevelDebug)
	debug.Debug("shown")
	if out := debugLogs.String(); !strings.Contains(out, "level=DEBUG msg=shown") {
		t.Errorf("at the debug level: %q", out)
	}
}

// A Buffer's zero value takes writes.
func TestBuffer(t *testing.T) {
	var b testlog.Buffer
	if n, err := b.Write([]byte("one ")); n != 4 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	fmt.Fprint(&b, "two")
	if got := b.String(); got != "one two" {
		t.Errorf("String() = %q", got)
	}
}
