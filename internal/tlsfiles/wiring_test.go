package tlsfiles

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

// net/http serves HTTP/2 over a Watcher's Config once NextProtos says so,
// and rotated certificates without a restart.
func TestHTTPServer(t *testing.T) {
	t.Parallel()
	w, f, ca, clientCA := newMutualTLS(t)
	cfg := w.Config()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
		}),
		TLSConfig:         cfg,
		ReadHeaderTimeout: 10 * time.Second,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()

	cert := clientCA.Client(t, "client").TLS(t)
	get := func(t *testing.T, proto string) (server string) {
		t.Helper()
		tr := &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{cert}},
			ForceAttemptHTTP2: true,
		}
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if res.Proto != proto || string(body) != "client" {
			t.Fatalf("%s, %q; want %s, %q", res.Proto, body, proto, "client")
		}
		return res.TLS.PeerCertificates[0].Subject.CommonName
	}
	if got := get(t, "HTTP/2.0"); got != "server-1" {
		t.Fatalf("server %q", got)
	}
	f.write(t, ca.Server(t, "server-2"), nil)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, "HTTP/2.0"); got != "server-2" {
		t.Fatalf("after the rotation, server %q", got)
	}
}

// grpc's credentials.NewTLS serves over a Watcher's Config as it is (it adds
// "h2" itself), with the client's certificate verified.
func TestGRPCServer(t *testing.T) {
	t.Parallel()
	w, f, ca, clientCA := newMutualTLS(t)
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(w.Config())))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()

	check := func(cert *tls.Certificate) (server string, err error) {
		cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var p peer.Peer
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
			return "", err
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok {
			return "", errors.New("not TLS")
		}
		return info.State.PeerCertificates[0].Subject.CommonName, nil
	}
	cert := clientCA.Client(t, "client").TLS(t)
	if got, err := check(&cert); err != nil || got != "server-1" {
		t.Fatalf("%q, %v", got, err)
	}
	if _, err := check(nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	f.write(t, ca.Server(t, "server-2"), nil)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := check(&cert); err != nil || got != "server-2" {
		t.Fatalf("after the rotation: %q, %v", got, err)
	}
}
