package main

import (
	"io"
	"testing"
)

func TestServeNoConsoleFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"--no-console"}, true}} {
		got, err := serveConfig(tc.args, io.Discard)
		if err != nil || got.NoConsole != tc.want {
			t.Errorf("serveConfig(%q): NoConsole %v, %v; want %v", tc.args, got.NoConsole, err, tc.want)
		}
	}
}
