package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseConns(t *testing.T) {
	in := "max_conns: 900\nhttp_max_conns: 100\ngrpc_max_conns: 50\nhandshake_timeout: 2s\nauth_timeout: 3s\ngrpc_idle_timeout: 1m\n"
	got, err := Parse(strings.NewReader(in), "funnel.yaml", Default())
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.MaxConns, want.HTTPMaxConns, want.GRPCMaxConns = 900, 100, 50
	want.HandshakeTimeout, want.AuthTimeout, want.GRPCIdleTimeout = 2*time.Second, 3*time.Second, time.Minute
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct {
		f    func(*Config)
		want string
	}{
		{func(c *Config) { c.MaxConns = -1 }, "max_conns -1 is negative"},
		{func(c *Config) { c.HTTPMaxConns = -1 }, "http_max_conns -1 is negative"},
		{func(c *Config) { c.GRPCMaxConns = -1 }, "grpc_max_conns -1 is negative"},
		{func(c *Config) { c.HandshakeTimeout = -1 }, "handshake_timeout -1ns is negative"},
		{func(c *Config) { c.AuthTimeout = -1 }, "auth_timeout -1ns is negative"},
		{func(c *Config) { c.GRPCIdleTimeout = -1 }, "grpc_idle_timeout -1ns is negative"},
	} {
		c := Default()
		tc.f(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
}

// TestConnLimits checks the bounds derived from the descriptors the process
// may open: a tenth (at least 64) kept, the rest shared so that the
// listeners' bounds together stay within the process's.
func TestConnLimits(t *testing.T) {
	def := ConnLimits{Handshake: 5 * time.Second, Auth: 10 * time.Second, GRPCIdle: 2 * time.Minute}
	with := func(l ConnLimits) ConnLimits {
		l.Handshake, l.Auth, l.GRPCIdle = def.Handshake, def.Auth, def.GRPCIdle
		return l
	}
	for _, tc := range []struct {
		nofile uint64
		set    func(*Config)
		want   ConnLimits
	}{
		{nofile: 1024, want: with(ConnLimits{Process: 922, RESP: 461, HTTP: 230, GRPC: 230})},
		{nofile: 20000, want: with(ConnLimits{Process: 18000, RESP: 9000, HTTP: 4500, GRPC: 4500})},
		{nofile: 1 << 20, want: with(ConnLimits{Process: 943719, RESP: 10000, HTTP: 10000, GRPC: 10000})},
		{nofile: 1<<64 - 1, want: with(ConnLimits{Process: 966367642, RESP: 10000, HTTP: 10000, GRPC: 10000})},
		{nofile: 100, want: with(ConnLimits{Process: 36, RESP: 18, HTTP: 9, GRPC: 9})},
		{nofile: 10, want: with(ConnLimits{Process: 16, RESP: 8, HTTP: 4, GRPC: 4})},
		{nofile: 20000, set: func(c *Config) {
			c.MaxConns, c.MaxClients, c.HTTPMaxConns, c.GRPCMaxConns = 5, 6, 7, 8
			c.HandshakeTimeout, c.AuthTimeout, c.GRPCIdleTimeout = 1, 2, 3
		}, want: ConnLimits{Process: 5, RESP: 6, HTTP: 7, GRPC: 8, Handshake: 1, Auth: 2, GRPCIdle: 3}},
	} {
		c := Default()
		if tc.set != nil {
			tc.set(&c)
		}
		if got := c.ConnLimits(tc.nofile); got != tc.want {
			t.Errorf("ConnLimits(%d) = %+v, want %+v", tc.nofile, got, tc.want)
		}
	}
}
