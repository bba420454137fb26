package auth

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// checkMethod is the health service's unary method.
const checkMethod = "/grpc.health.v1.Health/Check"

// startGRPC serves the health service on 127.0.0.1:0 behind the
// interceptors, and records the user each call saw.
func startGRPC(t *testing.T, c *Credentials, opts GRPCOptions) (healthpb.HealthClient, <-chan string) {
	t.Helper()
	users := make(chan string, 16)
	record := func(ctx context.Context) {
		u, ok := UserFrom(ctx)
		if !ok {
			u = "-"
		}
		users <- u
	}
	srvOpts := append(c.ServerOptions(opts),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			record(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			record(ss.Context())
			return h(srv, ss)
		}))
	gs := grpc.NewServer(srvOpts...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc), users
}

func withAuthorization(ctx context.Context, values ...string) context.Context {
	for _, v := range values {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v)
	}
	return ctx
}

type grpcCase struct {
	name           string
	authorization  []string
	code           codes.Code
	user, errorMsg string
}

var grpcCases = []grpcCase{
	{"bearer", []string{"Bearer " + defaultPass}, codes.OK, DefaultUser, ""},
	{"basic default", []string{basic("", defaultPass)}, codes.OK, DefaultUser, ""},
	{"basic named", []string{basic("alice", alicePass)}, codes.OK, "alice", ""},
	{"missing", nil, codes.Unauthenticated, "", ErrMissing.Error()},
	{"wrong bearer", []string{"Bearer wrong-pass"}, codes.Unauthenticated, "", ErrInvalid.Error()},
	{"wrong basic", []string{basic("bob", "wrong-pass")}, codes.Unauthenticated, "", ErrInvalid.Error()},
	{"unknown user", []string{basic("typed-as-user", defaultPass)}, codes.Unauthenticated, "", ErrInvalid.Error()},
	{"malformed", []string{"Token " + defaultPass}, codes.Unauthenticated, "", ErrMalformed.Error()},
	{"twice", []string{"Bearer " + defaultPass, "Bearer " + defaultPass}, codes.Unauthenticated, "", ErrMalformed.Error()},
}

func TestUnaryInterceptor(t *testing.T) {
	t.Parallel()
	log, logs := captureLog()
	client, users := startGRPC(t, testCreds(), GRPCOptions{Logger: log})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range grpcCases {
		_, err := client.Check(withAuthorization(ctx, tc.authorization...), &healthpb.HealthCheckRequest{})
		checkStatus(t, tc, err, users)
	}
	noSecrets(t, "the log", logs.String())
}

func TestStreamInterceptor(t *testing.T) {
	t.Parallel()
	client, users := startGRPC(t, testCreds(), GRPCOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range grpcCases {
		sctx, stop := context.WithCancel(withAuthorization(ctx, tc.authorization...))
		var err error
		stream, err := client.Watch(sctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv() // the first status, or the refusal
		}
		stop()
		checkStatus(t, tc, err, users)
	}
}

func checkStatus(t *testing.T, tc grpcCase, err error, users <-chan string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != tc.code {
		t.Errorf("%s: code %v, want %v (%v)", tc.name, st.Code(), tc.code, err)
		return
	}
	noSecrets(t, tc.name+": the status", st.Message())
	if tc.code != codes.OK {
		if st.Message() != tc.errorMsg {
			t.Errorf("%s: message %q, want %q", tc.name, st.Message(), tc.errorMsg)
		}
		return
	}
	if u := <-users; u != tc.user {
		t.Errorf("%s: user %q, want %q", tc.name, u, tc.user)
	}
}

// The health service's methods can be exempt, for probes that send no
// metadata; the others still are not.
func TestGRPCExempt(t *testing.T) {
	t.Parallel()
	client, users := startGRPC(t, testCreds(), GRPCOptions{Exempt: []string{checkMethod}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("exempt Check: %v", err)
	}
	if u := <-users; u != "-" {
		t.Errorf("exempt Check saw user %q", u)
	}
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Watch, not exempt: %v", err)
	}
}

// An empty set lets every call through, with no user.
func TestGRPCOff(t *testing.T) {
	t.Parallel()
	client, users := startGRPC(t, New("", nil), GRPCOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range [][]string{nil, {"Bearer anything"}} {
		if _, err := client.Check(withAuthorization(ctx, a...), &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("%q: %v", a, err)
		}
		if u := <-users; u != "-" {
			t.Errorf("%q: user %q", a, u)
		}
	}
}
