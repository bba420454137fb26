package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain runs the command itself when FUNNEL_RUN_MAIN is 1 (so that
// tests can run this binary as `funnel`), and otherwise the tests, then
// removes the binary that the snapshot tests built.
func TestMain(m *testing.M) {
	if os.Getenv("FUNNEL_RUN_MAIN") == "1" {
		main()
		return
	}
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
