package auth

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/funnelrl/funnel/internal/lograte"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// HealthMethods are the methods of the gRPC health service, which probes
// (Kubernetes' gRPC probe among them, which cannot send metadata) reach
// without credentials.
var HealthMethods = []string{
	"/grpc.health.v1.Health/Check",
	"/grpc.health.v1.Health/List",
	"/grpc.health.v1.Health/Watch",
}

// GRPCOptions configure the interceptors. The zero value exempts no
// method.
type GRPCOptions struct {
	// Exempt lists the full names of the methods called without
	// credentials, such as "/grpc.health.v1.Health/Check".
	Exempt []string
	// Logger receives a warning when a call is refused, at most once a
	// second; nil means slog.Default().
	Logger *slog.Logger
}

// grpcAuth checks the credentials of gRPC calls.
type grpcAuth struct {
	c      *Credentials
	exempt []string
	log    *slog.Logger
	warned *lograte.Sometimes // a client that keeps failing logs once a second
}

func (c *Credentials) grpcAuth(opts GRPCOptions) *grpcAuth {
	a := &grpcAuth{c: c, exempt: slices.Clone(opts.Exempt), log: opts.Logger, warned: lograte.New(time.Second)}
	if a.log == nil {
		a.log = slog.Default()
	}
	return a
}

// check returns ctx with the authenticated user, or the status error that
// refuses the call.
func (a *grpcAuth) check(ctx context.Context, method string) (context.Context, error) {
	if !a.c.Enabled() || slices.Contains(a.exempt, method) {
		return ctx, nil
	}
	var value string
	md, _ := metadata.FromIncomingContext(ctx)
	switch v := md.Get("authorization"); len(v) {
	case 0:
	case 1:
		value = v[0]
	default:
		value = "several" // neither Bearer nor Basic: malformed
	}
	user, err := a.c.authenticate(value)
	if err == nil {
		return withUser(ctx, user), nil
	}
	if !errors.Is(err, ErrMissing) {
		a.warned.Do(func(held int64) {
			addr := ""
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				addr = p.Addr.String()
			}
			a.log.Warn("auth: call refused (logged once a second at most)",
				"addr", addr, "method", method, "user", a.c.loggedUser(user), "err", err, "held_back", held)
		})
	}
	return nil, status.Error(codes.Unauthenticated, err.Error())
}

// UnaryInterceptor returns a unary server interceptor that lets a call
// through when its "authorization" metadata holds credentials of c (one
// value, Bearer or Basic as for HTTP), with the user in its context
// (UserFrom), or when its method is exempt, and refuses any other call
// with codes.Unauthenticated. When c is empty, every call goes through.
func (c *Credentials) UnaryInterceptor(opts GRPCOptions) grpc.UnaryServerInterceptor {
	a := c.grpcAuth(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.check(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor returns a stream server interceptor that checks a
// streaming call as UnaryInterceptor checks a unary one, before the
// handler runs.
func (c *Credentials) StreamInterceptor(opts GRPCOptions) grpc.StreamServerInterceptor {
	a := c.grpcAuth(opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.check(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &userStream{ServerStream: ss, ctx: ctx})
	}
}

// ServerOptions returns the options that install both interceptors on a
// grpc.Server, or none when c is empty. Interceptors chained by options
// given before these run before them; give these first, so that the others
// see the user.
func (c *Credentials) ServerOptions(opts GRPCOptions) []grpc.ServerOption {
	if !c.Enabled() {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(c.UnaryInterceptor(opts)),
		grpc.ChainStreamInterceptor(c.StreamInterceptor(opts)),
	}
}

// userStream is a server stream whose context carries the user.
type userStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *userStream) Context() context.Context { return s.ctx }
