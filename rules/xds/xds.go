// Package xds keeps rate-limit rules that a control plane sends over xDS,
// as Envoy Gateway drives envoyproxy/ratelimit: a Client subscribes to the
// RateLimitConfig resources (TypeURL) on an aggregated discovery stream
// (ADS, state of the world), builds each response into a rules.Set, and
// puts it in force as a rules file's reload is.
//
// Each response holds every resource, one domain each. The client ACKs a
// response whose rules build (DiscoveryRequest with the response's
// version_info and nonce), and NACKs one that does not (the last version
// it accepted, the nonce, and error_detail saying why); the last good rules
// then stay in force. A server may answer a NACK with the version just
// refused (go-control-plane's snapshot cache does, at once, until it has a
// newer one): the client NACKs a version refused again after the backoff,
// so that the two do not spin. When the stream fails, the client reconnects after
// an exponential backoff with jitter, and tells the server the version it
// holds; the rules in force stay until a new response replaces them.
//
// Until the first response the Client holds an empty Set: every descriptor
// is allowed, as with no rules at all (envoyproxy/ratelimit answers an
// error then, which Envoy, by default, takes as an allowance too).
package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/funnelrl/funnel/rules"
)

// TypeURL is the type of the resources the Client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// DefaultNodeID is the node id a Client gives when Options.NodeID is empty,
// as envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_ID defaults.
const DefaultNodeID = "default"

// Options configure a Client. Addr is required.
type Options struct {
	// Addr is the management server's gRPC target ("host:port", or any
	// target grpc.NewClient takes).
	Addr string
	// NodeID identifies this client to the server, which picks the
	// snapshot by it; "" means DefaultNodeID.
	NodeID string
	// NodeMetadata is sent with the node, as string values.
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream (a token, a tenant).
	Headers map[string]string
	// TLS, when not nil, is how the server is reached: its RootCAs verify
	// the server, its ServerName overrides the name checked, and its
	// client certificate answers a server that asks for one. Nil means
	// plain text.
	TLS *tls.Config
	// DialOptions are added to the connection's options (a maximum
	// message size, say).
	DialOptions []grpc.DialOption
	// Backoff paces reconnections.
	Backoff Backoff
	// Rules apply to every build of the rules (MergeDomains).
	Rules rules.Options
	// Logger receives a line per update, per refusal and per lost stream;
	// nil means slog.Default().
	Logger *slog.Logger
	// OnUpdate, when set, is called after each response: with the new
	// rules and a nil error when they are in force, or with nil and the
	// error that refused them. It is called from the Client's goroutine
	// and must not block for long.
	OnUpdate func(*rules.Set, error)
	// Wait waits between two attempts: it returns nil once d has passed,
	// or ctx's error when ctx ends first. Nil means a timer; tests give
	// their own, so that no test waits for time to pass.
	Wait func(ctx context.Context, d time.Duration) error
	// Rand returns a number in [0, 1) for the jitter; nil means
	// math/rand/v2's Float64.
	Rand func() float64
}

// Client holds the rules a management server sends. Rules is safe for
// concurrent use; *Client is an rls.RulesSource.
type Client struct {
	opts Options
	log  *slog.Logger
	node *corev3.Node
	cur  atomic.Pointer[rules.Set]

	// The run goroutine's own: the last version accepted, and the last
	// refused since.
	version, refused string

	cancel context.CancelFunc
	done   chan struct{}
	close  sync.Once
}

// ErrNoAddr reports Options without an address.
var ErrNoAddr = errors.New("xds: the management server's address is required")

// Start checks opts and starts subscribing, in a goroutine of its own,
// until Close. It does not wait for the server: the stream is opened, and
// opened again, in the background.
func Start(opts Options) (*Client, error) {
	if opts.Addr == "" {
		return nil, ErrNoAddr
	}
	if err := opts.Backoff.validate(); err != nil {
		return nil, err
	}
	opts.Backoff = opts.Backoff.withDefaults()
	if opts.NodeID == "" {
		opts.NodeID = DefaultNodeID
	}
	if opts.Wait == nil {
		opts.Wait = wait
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	c := &Client{opts: opts, log: opts.Logger, done: make(chan struct{})}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.node = &corev3.Node{Id: opts.NodeID}
	if len(opts.NodeMetadata) > 0 {
		md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range opts.NodeMetadata {
			md.Fields[k] = structpb.NewStringValue(v)
		}
		c.node.Metadata = md
	}
	c.cur.Store(&rules.Set{})
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.run(ctx)
	return c, nil
}

// Rules returns the rules in force: those of the last response accepted, or
// an empty Set before the first. It never returns nil.
func (c *Client) Rules() *rules.Set { return c.cur.Load() }

// Close stops subscribing and waits for the Client's goroutine to end. The
// rules in force stay readable.
func (c *Client) Close() error {
	c.close.Do(func() {
		c.cancel()
		<-c.done
	})
	return nil
}

// wait is Options.Wait's default.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run opens the stream, and opens it again after each failure, until ctx
// ends. A stream that delivered a response starts the backoff over.
func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	attempt := 0
	for {
		received, err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if received {
			attempt = 0
		}
		d := c.opts.Backoff.Delay(attempt, c.opts.Rand())
		attempt++
		c.log.Warn("xds: stream to the management server ended; the rules in force stay", "addr", c.opts.Addr,
			"err", err, "retry_in", d, "attempt", attempt)
		if c.opts.Wait(ctx, d) != nil {
			return
		}
	}
}

// stream runs one ADS stream until it fails, and reports whether it
// delivered a response.
func (c *Client) stream(ctx context.Context) (received bool, err error) {
	creds := insecure.NewCredentials()
	if c.opts.TLS != nil {
		creds = credentials.NewTLS(c.opts.TLS)
	}
	conn, err := grpc.NewClient(c.opts.Addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, c.opts.DialOptions...)...)
	if err != nil {
		return false, fmt.Errorf("xds: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for k, v := range c.opts.Headers {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("xds: opening the stream: %w", err)
	}
	// The node goes in the first request of a stream only; the version is
	// the one held, so that a server that has nothing newer need not send
	// it again.
	req := &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: c.version}
	repeats := 0
	for {
		if err := st.Send(req); err != nil {
			return received, fmt.Errorf("xds: sending: %w", err)
		}
		resp, err := st.Recv()
		if err != nil {
			return received, fmt.Errorf("xds: receiving: %w", err)
		}
		received = true
		var again bool
		req, again = c.apply(resp)
		if !again {
			repeats = 0
			continue
		}
		// A server answers a NACK, which carries the last version accepted,
		// with the version it holds: the one just refused, at once (as
		// go-control-plane's snapshot cache does). The NACK of a version
		// refused again waits as a reconnection does, so that the two
		// do not spin until the server has a new version.
		if err := c.opts.Wait(ctx, c.opts.Backoff.Delay(repeats, c.opts.Rand())); err != nil {
			return received, err
		}
		repeats++
	}
}

// apply builds a response's rules and puts them in force, and returns the
// request that ACKs it, or, when they do not build, the one that NACKs it,
// and whether it is a NACK of the version last refused.
func (c *Client) apply(resp *discoveryv3.DiscoveryResponse) (*discoveryv3.DiscoveryRequest, bool) {
	set, err := Convert(resp, c.opts.Rules)
	if err != nil {
		again := c.refused == resp.VersionInfo
		if !again {
			c.refused = resp.VersionInfo
			c.log.Error("xds: rules refused; the last good rules stay in force", "version", resp.VersionInfo, "err", err)
			if c.opts.OnUpdate != nil {
				c.opts.OnUpdate(nil, err)
			}
		}
		return &discoveryv3.DiscoveryRequest{
			TypeUrl:       TypeURL,
			VersionInfo:   c.version,
			ResponseNonce: resp.Nonce,
			ErrorDetail:   &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()},
		}, again
	}
	c.cur.Store(set)
	c.version, c.refused = resp.VersionInfo, ""
	c.log.Info("xds: rules in force", "version", resp.VersionInfo, "domains", len(set.Domains()), "rules", len(set.All()))
	if c.opts.OnUpdate != nil {
		c.opts.OnUpdate(set, nil)
	}
	return &discoveryv3.DiscoveryRequest{TypeUrl: TypeURL, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}, false
}

// Convert builds the rules of a response: every resource a
// RateLimitConfig, one domain each (or several for one domain, with
// MergeDomains), checked as a rules file is. The error says what is wrong,
// naming the resource.
func Convert(resp *discoveryv3.DiscoveryResponse, opts rules.Options) (*rules.Set, error) {
	if resp.TypeUrl != TypeURL {
		return nil, fmt.Errorf("xds: a response of type %q, want %q", resp.TypeUrl, TypeURL)
	}
	configs := make([]rules.DomainConfig, 0, len(resp.Resources))
	for i, res := range resp.Resources {
		var rc rlsconfv3.RateLimitConfig
		if res.GetTypeUrl() != TypeURL {
			return nil, fmt.Errorf("xds: resource %d is a %q, want %q", i, res.GetTypeUrl(), TypeURL)
		}
		if err := anypb.UnmarshalTo(res, &rc, proto.UnmarshalOptions{}); err != nil {
			return nil, fmt.Errorf("xds: resource %d: %w", i, err)
		}
		name := rc.Name
		if name == "" {
			name = fmt.Sprintf("resource %d", i)
		}
		configs = append(configs, rules.DomainConfig{Name: "xds:" + name, Domain: rc.Domain, Descriptors: descriptors(rc.Descriptors)})
	}
	return rules.Build(configs, opts)
}

// descriptors converts a resource's descriptors.
func descriptors(ds []*rlsconfv3.RateLimitDescriptor) []rules.DescriptorConfig {
	out := make([]rules.DescriptorConfig, len(ds))
	for i, d := range ds {
		out[i] = rules.DescriptorConfig{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			Descriptors:    descriptors(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			QuotaMode:      d.GetQuotaMode(),
		}
		if md := d.GetMetadata(); md != nil {
			out[i].Metadata = md.AsMap()
		}
		if p := d.GetRateLimit(); p != nil {
			rl := &rules.RateLimitConfig{RequestsPerUnit: p.RequestsPerUnit, Unlimited: p.Unlimited, Name: p.Name}
			// UNKNOWN is the enum's zero, sent when no unit is set.
			if p.Unit != rlsconfv3.RateLimitUnit_UNKNOWN || !p.Unlimited {
				rl.Unit = p.Unit.String()
			}
			for _, r := range p.Replaces {
				rl.Replaces = append(rl.Replaces, r.GetName())
			}
			out[i].RateLimit = rl
		}
	}
	return out
}
