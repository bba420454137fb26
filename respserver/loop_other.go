//go:build !linux

package respserver

import "net"

// loopGroup is a server's event loops, which only Linux has: elsewhere
// every connection is served by a goroutine of its own.
type loopGroup struct{}

// loopsFor returns nil: ln's connections are served by goroutines.
func (s *Server) loopsFor(ln net.Listener) *loopGroup { return nil }

func (g *loopGroup) accept(nc net.Conn) {}
func (g *loopGroup) wake()              {}
func (g *loopGroup) stop()              {}
