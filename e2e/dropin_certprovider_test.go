package e2e_test

// End-to-end tests of certificate provider plugins registered with grpc-go's
// registry (google.golang.org/grpc/credentials/tls/certprovider.Register),
// as a program moving from grpc-go's xDS server has them: the Listener names
// their instances, the server builds, shares, reads and closes their
// providers.
//
// grpc-go's pemfile package is linked in here, so that it registers its
// own file_watcher: every file_watcher test of this package then checks that
// this library's file_watcher (with gRFC A87 bundle maps) is the one used.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	gcp "google.golang.org/grpc/credentials/tls/certprovider"
	_ "google.golang.org/grpc/credentials/tls/certprovider/pemfile" // registers grpc-go's own "file_watcher"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// The plugins of these tests, one name per test (registrations are
// process-wide). They are registered at init, as plugins are, so that no
// registration races a bootstrap parse of a parallel test.
const (
	pluginMTLS       = "e2e-dropin-mtls"
	pluginStop       = "e2e-dropin-stop"
	pluginSPIFFE     = "e2e-dropin-spiffe"
	pluginNoMaterial = "e2e-dropin-no-material"
)

// plugins are the sources of the test plugins' key material, by name.
var plugins = map[string]*pluginSource{}

func init() {
	for _, name := range []string{pluginMTLS, pluginStop, pluginSPIFFE, pluginNoMaterial} {
		src := &pluginSource{name: name, dist: gcp.NewDistributor(), events: make(chan pluginEvent, 64)}
		plugins[name] = src
		gcp.Register(src)
	}
}

// pluginSource is a real certificate provider plugin: a Builder whose
// providers serve the key material the test sets (through a grpc-go
// Distributor, as grpc-go's own plugins do) and report when they are built
// and closed. Its config is {"tag": "<any string>"}.
type pluginSource struct {
	name   string
	dist   *gcp.Distributor
	events chan pluginEvent
}

// pluginEvent is a provider built (closed false) or closed.
type pluginEvent struct {
	opts   gcp.BuildOptions
	closed bool
}

func (p *pluginSource) Name() string { return p.name }

func (p *pluginSource) ParseConfig(c any) (*gcp.BuildableConfig, error) {
	var cfg struct {
		Tag string `json:"tag"`
	}
	if err := json.Unmarshal(c.(json.RawMessage), &cfg); err != nil {
		return nil, err
	}
	return gcp.NewBuildableConfig(p.name, []byte(cfg.Tag), func(opts gcp.BuildOptions) gcp.Provider {
		p.events <- pluginEvent{opts: opts}
		return &pluginProvider{src: p, opts: opts}
	}), nil
}

// set makes the providers serve the certificates of leaf and the roots of
// ca (and, if bundles is not nil, that SPIFFE bundle map).
func (p *pluginSource) set(leaf *testcerts.Leaf, ca *testcerts.CA, bundles map[string]*spiffebundle.Bundle) {
	p.dist.Set(&gcp.KeyMaterial{Certs: []tls.Certificate{leaf.TLS}, Roots: ca.Pool, SPIFFEBundleMap: bundles}, nil)
}

// instance is a certificate_providers entry of the plugin.
func (p *pluginSource) instance(tag string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"plugin_name": %q, "config": {"tag": %q}}`, p.name, tag))
}

// next waits for the next build or close of a provider.
func (p *pluginSource) next(ctx context.Context, t *testing.T) pluginEvent {
	t.Helper()
	select {
	case e := <-p.events:
		return e
	case <-ctx.Done():
		t.Fatalf("plugin %s: no provider built or closed", p.name)
		return pluginEvent{}
	}
}

// waitAllClosed takes events until the providers built (by options) are
// each closed once; a build meanwhile fails the test.
func (p *pluginSource) waitAllClosed(ctx context.Context, t *testing.T, built map[gcp.BuildOptions]int) {
	t.Helper()
	for open := len(built); open > 0; {
		e := p.next(ctx, t)
		if !e.closed {
			t.Fatalf("plugin %s: a provider %+v was built while waiting for the closes", p.name, e.opts)
		}
		if built[e.opts]--; built[e.opts] < 0 {
			t.Fatalf("plugin %s: provider %+v closed more often than built", p.name, e.opts)
		}
		open--
	}
}

// pluginProvider is one provider of a pluginSource.
type pluginProvider struct {
	src       *pluginSource
	opts      gcp.BuildOptions
	closeOnce sync.Once
}

func (p *pluginProvider) KeyMaterial(ctx context.Context) (*gcp.KeyMaterial, error) {
	return p.src.dist.KeyMaterial(ctx)
}

func (p *pluginProvider) Close() {
	closed := false
	p.closeOnce.Do(func() { closed = true })
	if !closed {
		panic("provider closed twice")
	}
	p.src.events <- pluginEvent{opts: p.opts, closed: true}
}

// pluginMTLSContext is downstreamTLS(true, true) with certificate names,
// which the plugin's providers are built with.
func pluginMTLSContext() *tlspb.DownstreamTlsContext {
	d := downstreamTLS(true, true)
	d.CommonTlsContext.TlsCertificateProviderInstance.CertificateName = "default"
	d.CommonTlsContext.GetValidationContext().CaCertificateProviderInstance.CertificateName = "ROOTCA"
	return d
}

var (
	identityOpts = gcp.BuildOptions{CertName: "default", WantIdentity: true}
	rootOpts     = gcp.BuildOptions{CertName: "ROOTCA", WantRoot: true}
)

// expectBuilt takes the next two events: the identity and the roots
// providers built, in either order.
func (p *pluginSource) expectBuilt(ctx context.Context, t *testing.T) {
	t.Helper()
	seen := map[gcp.BuildOptions]bool{}
	for range 2 {
		e := p.next(ctx, t)
		if e.closed {
			t.Fatalf("plugin %s: provider %+v closed, want two built", p.name, e.opts)
		}
		seen[e.opts] = true
	}
	if !seen[identityOpts] || !seen[rootOpts] {
		t.Errorf("plugin %s: providers built with %v, want %+v and %+v", p.name, seen, identityOpts, rootOpts)
	}
}

// A plugin of grpc-go's registry serves the identity and the roots of an
// mTLS chain: a client with a certificate from its roots gets in, one
// without a certificate or with another CA's does not; a rotation reaches
// the next connection; the TLS metrics report the plugin's certificate; the
// providers are built once (per identity and roots) and closed once the
// chain is out of service.
func TestDropinCertProviderMTLS(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	src := plugins[pluginMTLS]
	src.set(pki.server, pki.ca, nil)
	env := newProvidersEnv(t, map[string]json.RawMessage{
		instServer: src.instance("identity"),
		instRoots:  src.instance("roots"),
	})
	mr := testutils.NewMetricReader(t)
	peers := newPeerRecorder()
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", pluginMTLSContext())
	}, peers.option(), xds.MeterProvider(mr.Provider), xds.DrainGraceTime(0))

	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client", URIs: []string{"spiffe://test.example/client"}})
	c := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
	if got, want := c.serverCertSerial(ctx, t), pki.server.Cert.SerialNumber.String(); got != want {
		t.Errorf("server certificate serial = %s, want the plugin's %s", got, want)
	}
	info, ok := peers.next(ctx, t).AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || info.SPIFFEID == nil || info.SPIFFEID.String() != "spiffe://test.example/client" {
		t.Errorf("server-side AuthInfo = %+v, want TLS with the client's verified certificate", info)
	}
	src.expectBuilt(ctx, t)

	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, nil))
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, pki.otherCA.Issue(t, testcerts.LeafOptions{CommonName: "intruder"})))

	// The TLS metrics see the plugin's certificate.
	attrs := tlsAttrs(addr, "A")
	mr.WaitForValue(ctx, t, "grpc.server.tls.handshakes", 1, append(attrs, attribute.String("grpc.xds_server.tls.outcome", "ok"))...)
	if got, ok := mr.Value(t, "grpc.xds_server.tls.certificate.time_to_expiry", attrs...); !ok || float64(got) < time.Until(pki.server.Cert.NotAfter).Seconds()-10 {
		t.Errorf("certificate time_to_expiry = %d (reported: %v), want about %.0f", got, ok, time.Until(pki.server.Cert.NotAfter).Seconds())
	}

	// Rotation: the provider's new key material reaches the next connection.
	rotated := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "server-rotated", DNSNames: []string{"server.test"}})
	src.set(rotated, pki.ca, nil)
	c2 := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
	if got, want := c2.serverCertSerial(ctx, t), rotated.Cert.SerialNumber.String(); got != want {
		t.Errorf("after a rotation, a new connection's server certificate serial = %s, want %s", got, want)
	}

	// A Listener without TLS: the chain drains, its providers are closed,
	// each once, and nothing more is built.
	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "B"}}, nil)}, nil)
	src.waitAllClosed(ctx, t, map[gcp.BuildOptions]int{identityOpts: 1, rootOpts: 1})
	if code := newClient(t, addr, "127.0.0.1", 0).emptyCall(ctx); code != codes.OK {
		t.Errorf("plaintext EmptyCall after the update: %v, want OK", code)
	}
	expectNoEvent(t, src)
}

// expectNoEvent checks that no provider of src is built or closed for a
// short while.
func expectNoEvent(t *testing.T, src *pluginSource) {
	t.Helper()
	timer := time.NewTimer(defaultTestShortTimeout)
	defer timer.Stop()
	select {
	case e := <-src.events:
		t.Errorf("plugin %s: unexpected provider event %+v", src.name, e)
	case <-timer.C:
	}
}

// Stopping the server closes the providers its chains hold.
func TestDropinCertProviderClosedOnStop(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	src := plugins[pluginStop]
	src.set(pki.server, pki.ca, nil)
	env := newProvidersEnv(t, map[string]json.RawMessage{
		instServer: src.instance("identity"),
		instRoots:  src.instance("roots"),
	})
	lis, _ := listen(t, "127.0.0.1")
	s, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", pluginMTLSContext())
	})
	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client"})
	if code := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client)).emptyCall(ctx); code != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK", code)
	}
	src.expectBuilt(ctx, t)
	s.stopAndWait()
	src.waitAllClosed(ctx, t, map[gcp.BuildOptions]int{identityOpts: 1, rootOpts: 1})
}

// A plugin whose key material carries a SPIFFE bundle map: clients are
// verified against the bundle of the trust domain of their SPIFFE ID, never
// against the key material's roots (gRFC A87, as file_watcher's map).
func TestDropinCertProviderSPIFFE(t *testing.T) {
	ctx := testContext(t)
	pki := newSPIFFEPKI(t)
	src := plugins[pluginSPIFFE]
	bundles := map[string]*spiffebundle.Bundle{}
	for _, td := range []string{"a.test", "b.test"} {
		bundles[td] = spiffebundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString(td), []*x509.Certificate{pki.domains[td].Cert})
	}
	// The roots hold c.test's CA: a map-less verification would let its
	// clients in.
	src.set(pki.server, pki.domains["c.test"], bundles)
	env := newProvidersEnv(t, map[string]json.RawMessage{
		instServer: src.instance("identity"),
		instRoots:  src.instance("roots"),
	})
	peers := newPeerRecorder()
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", pluginMTLSContext())
	}, peers.option(), xds.DrainGraceTime(0))

	for _, c := range []struct{ signer, id string }{{"a.test", "spiffe://a.test/client"}, {"b.test", "spiffe://b.test/ns/x/sa/y"}} {
		if code := newClient(t, addr, "127.0.0.1", 0, pki.creds(pki.client(t, c.signer, c.id))).emptyCall(ctx); code != codes.OK {
			t.Fatalf("EmptyCall of %s: %v, want OK", c.id, code)
		}
		info, ok := peers.next(ctx, t).AuthInfo.(credentials.TLSInfo)
		if !ok || info.SPIFFEID == nil || info.SPIFFEID.String() != c.id || len(info.State.VerifiedChains) == 0 {
			t.Errorf("server-side AuthInfo = %+v, want TLS verified as %s", info, c.id)
		}
	}
	// Signed by b.test's root but naming a.test; from c.test, which only
	// the roots (not the map) trust.
	dialFails(ctx, t, addr, "127.0.0.1", pki.creds(pki.client(t, "b.test", "spiffe://a.test/impostor")))
	dialFails(ctx, t, addr, "127.0.0.1", pki.creds(pki.client(t, "c.test", "spiffe://c.test/client")))
	logs.WaitCount(ctx, t, 1, "W", "[listener "+addr.String()+"]", `signed by a root of trust domain "b.test", not of "a.test"`)
}

// A plugin with no key material yet fails the handshake when gRPC's
// handshake deadline passes, with a warning that says why; once it has
// material, new connections succeed.
func TestDropinCertProviderNoKeyMaterial(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	src := plugins[pluginNoMaterial]
	env := newProvidersEnv(t, map[string]json.RawMessage{
		instServer: src.instance("identity"),
		instRoots:  src.instance("roots"),
	})
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", pluginMTLSContext())
	}, grpc.ConnectionTimeout(200*time.Millisecond), xds.DrainGraceTime(0))
	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client"})
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, client))
	logs.WaitCount(ctx, t, 1, "W", "[listener "+addr.String()+"]", `filter chain "A"`, "no key material before the handshake's deadline")

	src.set(pki.server, pki.ca, nil)
	if code := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client)).emptyCall(ctx); code != codes.OK {
		t.Fatalf("EmptyCall once the plugin has key material: %v, want OK", code)
	}
}
