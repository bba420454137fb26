package config

import (
	"strings"
	"testing"
)

func TestParseNoConsole(t *testing.T) {
	got, err := Parse(strings.NewReader("no_console: true\n"), "funnel.yaml", Default())
	if err != nil {
		t.Fatal(err)
	}
	if !got.NoConsole || Default().NoConsole {
		t.Fatalf("no_console: got %v, default %v", got.NoConsole, Default().NoConsole)
	}
}
