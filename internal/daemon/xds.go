package daemon

import (
	"context"
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"

	"github.com/funnelrl/funnel/internal/tlsfiles"
	"github.com/funnelrl/funnel/rules"
	"github.com/funnelrl/funnel/rules/xds"
)

// rulesXDS is the subscription to the rules of a control plane, and the
// watch of the client certificate it presents.
type rulesXDS struct {
	client *xds.Client
	stop   context.CancelFunc // stops the certificate's watch; nil without one
	done   chan struct{}
}

// openRulesXDS subscribes to the rules that the management server of
// rules_xds sends. It does not wait for them: until the first snapshot,
// every descriptor is allowed.
func (d *Daemon) openRulesXDS() (*xds.Client, error) {
	headers, err := d.cfg.RulesXDSHeaderMap()
	if err != nil {
		return nil, err
	}
	md, err := d.cfg.RulesXDSNodeMetadataMap()
	if err != nil {
		return nil, err
	}
	x := &rulesXDS{}
	tc, err := d.rulesXDSTLS(x)
	if err != nil {
		return nil, err
	}
	var dopts []grpc.DialOption
	if n := d.cfg.RulesXDSMaxMsgSize; n > 0 {
		dopts = append(dopts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(n)))
	}
	x.client, err = xds.Start(xds.Options{
		Addr:         d.cfg.RulesXDS,
		NodeID:       d.cfg.RulesXDSNodeID,
		NodeMetadata: md,
		Headers:      headers,
		TLS:          tc,
		DialOptions:  dopts,
		Backoff:      xds.Backoff{Initial: d.cfg.RulesXDSBackoff, Max: d.cfg.RulesXDSBackoffMax},
		Rules:        rules.Options{MergeDomains: d.cfg.RulesMergeDomains},
		Logger:       d.log,
		OnUpdate:     func(_ *rules.Set, err error) { d.metrics.RulesReloaded(err); d.console.rulesReloaded(err) },
	})
	if err != nil {
		x.close()
		return nil, fmt.Errorf("daemon: %w", err)
	}
	d.rulesXDS = x
	d.log.Info("rules from xDS: every descriptor is allowed until the first snapshot", "server", d.cfg.RulesXDS, "tls", tc != nil)
	return x.client, nil
}

// rulesXDSTLS builds the TLS configuration of the connection to the
// management server (nil: plain text), and starts the watch of the client
// certificate, when there is one, in x.
func (d *Daemon) rulesXDSTLS(x *rulesXDS) (*tls.Config, error) {
	if !d.cfg.RulesXDSUseTLS() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if d.cfg.RulesXDSCert != "" {
		w, err := tlsfiles.New(tlsfiles.Options{CertFile: d.cfg.RulesXDSCert, KeyFile: d.cfg.RulesXDSKey, Logger: d.log})
		if err != nil {
			return nil, fmt.Errorf("daemon: rules_xds: %w", err)
		}
		tc = w.ClientConfig()
		ctx, stop := context.WithCancel(context.Background())
		x.stop, x.done = stop, make(chan struct{})
		go func() {
			defer close(x.done)
			if err := w.Run(ctx); err != nil {
				d.log.Error("the xDS client certificate is not watched; it is reloaded only by a restart", "err", err)
			}
		}()
	}
	if d.cfg.RulesXDSCA != "" {
		roots, err := tlsfiles.LoadCAs(d.cfg.RulesXDSCA)
		if err != nil {
			x.close()
			return nil, fmt.Errorf("daemon: rules_xds_ca: %w", err)
		}
		tc.RootCAs = roots
	}
	tc.ServerName = d.cfg.RulesXDSServerName
	return tc, nil
}

// close ends the subscription and the certificate's watch, and waits for
// them.
func (x *rulesXDS) close() {
	if x == nil {
		return
	}
	if x.client != nil {
		x.client.Close()
	}
	if x.stop != nil {
		x.stop()
		<-x.done
	}
}
