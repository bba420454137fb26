package main

import (
	"flag"

	"github.com/funnelrl/funnel/config"
)

// connFlags defines the flags of config.Conns on fs, bound to c's fields.
func connFlags(fs *flag.FlagSet, c *config.Config) {
	fs.IntVar(&c.MaxConns, "max-conns", c.MaxConns, "bound on the connections of all listeners together (0: the descriptors the process may open, less a tenth)")
	fs.IntVar(&c.HTTPMaxConns, "http-max-conns", c.HTTPMaxConns, "bound on the HTTP listener's connections (0: a quarter of the descriptors the process may open, at most 10000)")
	fs.IntVar(&c.GRPCMaxConns, "grpc-max-conns", c.GRPCMaxConns, "bound on the gRPC listener's connections (0: a quarter of the descriptors the process may open, at most 10000)")
	fs.DurationVar(&c.HandshakeTimeout, "handshake-timeout", c.HandshakeTimeout, "bound on a new connection's handshake: TLS on RESP; TLS and HTTP/2 preface on gRPC; TLS and request headers on HTTP (0: 5s)")
	fs.DurationVar(&c.AuthTimeout, "auth-timeout", c.AuthTimeout, "close RESP clients that have not authenticated this long after they connected, when credentials are required (0: 10s)")
	fs.DurationVar(&c.GRPCIdleTimeout, "grpc-idle-timeout", c.GRPCIdleTimeout, "close gRPC connections without a call under way for this long (0: 2m)")
}
