// Package security is the transport security of an xDS server (gRFC A29):
// transport credentials that give each connection the TLS of its filter
// chain, and the per-chain state they use, the chain's certificate
// providers. Client certificates are verified against the roots of the
// chain's root provider, or, when that provider has a SPIFFE trust bundle
// map, against the bundle of the trust domain in the certificate's SPIFFE ID
// (gRFC A87). Every handshake is counted by result, and the expiry of each
// chain's certificates is reported, in package metrics.
//
// The credentials find a connection's chain through the small interface
// Conn, which the server's connections implement; a connection without one,
// or whose chain has no transport_socket, uses the fallback credentials.
package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	gcp "google.golang.org/grpc/credentials/tls/certprovider"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/certprovider"
	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/netaddr"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
)

// Conn is implemented by the connections an xDS server hands to gRPC.
type Conn interface {
	net.Conn
	// ChainSecurity returns the security of the connection's filter chain;
	// nil when the chain has no transport_socket.
	ChainSecurity() *Chain
	// HandshakeDeadline returns the deadline last set on the connection
	// (SetDeadline), which during the handshake is the one gRPC set for
	// it; zero when none is set.
	HandshakeDeadline() time.Time
}

// NewCredentials returns server transport credentials that do the TLS or
// mutual TLS of each connection's filter chain, and use fallback for a
// connection without one (no transport_socket, or not from an xDS server).
func NewCredentials(fallback credentials.TransportCredentials) credentials.TransportCredentials {
	return &serverCreds{fallback: fallback}
}

// IsCredentials reports whether c were made by NewCredentials.
func IsCredentials(c credentials.TransportCredentials) bool {
	_, ok := c.(*serverCreds)
	return ok
}

// serverCreds implements NewCredentials. Immutable.
type serverCreds struct {
	fallback credentials.TransportCredentials
}

// ServerHandshake does TLS or mTLS as the connection's filter chain says,
// or the fallback credentials' handshake. A failed handshake closes only
// that connection and never falls back.
func (c *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	sc, ok := raw.(Conn)
	if !ok {
		return c.fallback.ServerHandshake(raw)
	}
	ch := sc.ChainSecurity()
	if ch == nil {
		return c.fallback.ServerHandshake(raw)
	}
	return ch.handshake(sc)
}

// ClientHandshake fails: these are server credentials.
func (c *serverCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("xds: the credentials of NewServerCredentials cannot be used by a client")
}

// Info describes the credentials: TLS, the protocol of xDS security.
func (c *serverCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

// Clone returns a copy of the credentials.
func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{fallback: c.fallback.Clone()}
}

// UsesXDS reports that the credentials take their configuration from xDS,
// as grpc-go's xDS credentials report with the same method.
func (c *serverCreds) UsesXDS() bool { return true }

// OverrideServerName does nothing: a server has no server name to check.
//
// Deprecated: as in credentials.TransportCredentials.
func (c *serverCreds) OverrideServerName(string) error { return nil }

// store runs the certificate providers of every xDS server of the process,
// so that identical provider configurations are read once (gRFC A29
// "deduping and reference counting").
var store = certprovider.NewStore(func(format string, args ...any) {
	serverlog.Component.Warningf(format, args...)
})

// ProviderRefs returns how many filter chains in service hold the
// certificate provider of cfg; 0 when it is not running. For tests.
func ProviderRefs(cfg bootstrap.FileWatcherConfig) int { return store.Refs(cfg) }

// Chain is the security of one filter chain in service: its validated TLS
// configuration and the certificate providers it names, taken by the first
// handshake that needs them and released with Release, so that a provider
// runs exactly while a chain in service uses it. Safe for concurrent use.
type Chain struct {
	// Immutable.
	name          string
	sec           *filterchain.Security
	providers     map[string]*bootstrap.CertProviderConfig
	log           *HandshakeLog
	metrics       *metrics.TLSChain // nil records nothing
	stopObserving func()            // ends the expiry gauges' reports of the chain

	mu       sync.Mutex
	released bool                 // guarded by mu
	identity *certprovider.Handle // guarded by mu; nil until the first handshake
	roots    *certprovider.Handle // guarded by mu; nil without a validation context
}

// NewChain returns the security of the filter chain fc, or nil when fc has
// no transport_socket (the fallback credentials apply). providers are the
// bootstrap's certificate_providers; failed handshakes are logged to log,
// and every handshake is counted in the metrics of log's listener.
func NewChain(fc *filterchain.FilterChain, providers map[string]*bootstrap.CertProviderConfig, log *HandshakeLog) *Chain {
	if fc.Security == nil {
		return nil
	}
	c := &Chain{name: fc.Name, sec: fc.Security, providers: providers, log: log, metrics: log.metrics.TLSChain(fc.Name)}
	c.stopObserving = c.metrics.ObserveExpiry(c.expiry)
	return c
}

// Release gives the providers back; later handshakes on the chain fail.
// Safe to call more than once, and on a nil Chain.
func (c *Chain) Release() {
	if c == nil {
		return
	}
	c.stopObserving()
	c.mu.Lock()
	c.released = true
	id, roots := c.identity, c.roots
	c.identity, c.roots = nil, nil
	c.mu.Unlock()
	if id != nil {
		id.Release()
	}
	if roots != nil {
		roots.Release()
	}
}

// defaultHandshakeWait bounds the wait for a plugin's key material when
// the connection has no deadline (gRPC always sets one: 120 s unless
// grpc.ConnectionTimeout says otherwise).
const defaultHandshakeWait = 2 * time.Minute

// handshake does the TLS handshake of raw with the chain's current key
// material. The deadline gRPC set on raw bounds it, including the wait of
// a certificate provider plugin for its first key material.
func (c *Chain) handshake(raw Conn) (net.Conn, credentials.AuthInfo, error) {
	src := addrPort(raw.RemoteAddr())
	deadline := raw.HandshakeDeadline()
	if deadline.IsZero() {
		deadline = time.Now().Add(defaultHandshakeWait)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var v verified
	cfg, err := c.tlsConfig(ctx, &v)
	if err != nil {
		r := metrics.TLSUnknownFailure
		if errors.Is(err, context.DeadlineExceeded) {
			r = metrics.TLSTimeout // a plugin had no key material in time
		}
		c.metrics.Handshake(r)
		c.log.failed(c.name, src, r, err)
		return nil, nil, fmt.Errorf("xds: TLS handshake with %v on filter chain %q: %w", raw.RemoteAddr(), c.name, err)
	}
	conn := tls.Server(raw, cfg)
	if err := conn.HandshakeContext(context.Background()); err != nil {
		r := classify(err)
		c.metrics.Handshake(r)
		if errors.Is(err, io.EOF) {
			// The peer closed without a handshake, as TCP health checks
			// do: not worth a warning each time.
			c.log.log.Infof("filter chain %q: %v closed the connection before the TLS handshake", c.name, raw.RemoteAddr())
		} else {
			c.log.failed(c.name, src, r, err)
		}
		return nil, nil, fmt.Errorf("xds: TLS handshake with %v on filter chain %q failed: %w", raw.RemoteAddr(), c.name, err)
	}
	c.metrics.Handshake(metrics.TLSOK)
	state := conn.ConnectionState()
	id := spiffeID(state)
	if v.id != nil {
		// SPIFFE verification (gRFC A87): crypto/tls did not verify the
		// chain, this package did.
		id, state.VerifiedChains = v.id, v.chains
	}
	return conn, credentials.TLSInfo{
		State:          state,
		SPIFFEID:       id,
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
	}, nil
}

// expiry returns when the chain's identity certificate and its earliest
// root expire; zero for what the chain does not have (yet: the providers
// are taken by the first handshake; a plugin's roots in an x509.CertPool,
// which does not list its certificates). For the expiry gauges, whose
// collection must not wait: a plugin's provider is asked with a context
// that is already done, which grpc-go's providers (certprovider.Distributor)
// answer at once with the material they have.
func (c *Chain) expiry() (cert, root time.Time) {
	c.mu.Lock()
	id, roots := c.identity, c.roots
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if id != nil {
		if v, err := id.Identity(ctx); err == nil {
			cert = v.NotAfter
		}
	}
	if roots != nil {
		if v, err := roots.Trust(ctx); err == nil {
			root = v.NotAfter
		}
	}
	return cert, root
}

// LocalCertificate returns the leaf of the chain's current identity
// certificate (a plugin's first one), without waiting; nil without TLS
// (c is nil) or before the chain's first handshake. For the ext_authz
// filter's destination principal (gRFC A92).
func (c *Chain) LocalCertificate() *x509.Certificate {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	id := c.identity
	c.mu.Unlock()
	if id == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v, err := id.Identity(ctx)
	if err != nil || len(v.Certs) == 0 {
		return nil
	}
	return v.Certs[0].Leaf
}

var errReleased = errors.New("the filter chain is no longer in service")

// handles returns the chain's providers, taking them on the first call.
// The providers are taken (which may read files) without holding c.mu.
func (c *Chain) handles() (identity, roots *certprovider.Handle, err error) {
	c.mu.Lock()
	released, id, r := c.released, c.identity, c.roots
	c.mu.Unlock()
	switch {
	case released:
		return nil, nil, errReleased
	case id != nil:
		return id, r, nil
	}
	idOpts := gcp.BuildOptions{CertName: c.sec.IdentityCertName, WantIdentity: true}
	if id, err = getProvider(c.providers, c.sec.IdentityInstance, idOpts); err != nil {
		return nil, nil, err
	}
	if c.sec.MutualTLS() {
		rootOpts := gcp.BuildOptions{CertName: c.sec.RootCertName, WantRoot: true}
		if r, err = getProvider(c.providers, c.sec.RootInstance, rootOpts); err != nil {
			id.Release()
			return nil, nil, err
		}
	}
	c.mu.Lock()
	if c.released || c.identity != nil {
		// Released meanwhile, or another handshake took them first.
		released, keptID, keptRoots := c.released, c.identity, c.roots
		c.mu.Unlock()
		id.Release()
		if r != nil {
			r.Release()
		}
		if released {
			return nil, nil, errReleased
		}
		return keptID, keptRoots, nil
	}
	c.identity, c.roots = id, r
	c.mu.Unlock()
	return id, r, nil
}

// getProvider takes a handle on the provider of a bootstrap instance:
// this library's file_watcher (certificate_name is ignored), or the
// provider a plugin registered with grpc-go builds with opts. Listener
// validation has checked that the instance exists with one of them. A
// plugin's build that fails is an error of this handshake; the next one
// builds again.
func getProvider(providers map[string]*bootstrap.CertProviderConfig, instance string, opts gcp.BuildOptions) (*certprovider.Handle, error) {
	p := providers[instance]
	switch {
	case p != nil && p.FileWatcher != nil:
		return store.Get(*p.FileWatcher), nil
	case p != nil && p.Buildable() != nil:
		h, err := store.GetPlugin(p.Buildable(), opts)
		if err != nil {
			return nil, fmt.Errorf("certificate provider instance %q: %w", instance, err)
		}
		return h, nil
	}
	return nil, fmt.Errorf("certificate provider instance %q is not in the bootstrap with a plugin this server runs", instance)
}

// tlsConfig returns the TLS configuration of a new handshake, with the
// providers' current key material; a plugin's provider may wait for its
// first until ctx is done. A SPIFFE verification stores its result in v.
func (c *Chain) tlsConfig(ctx context.Context, v *verified) (*tls.Config, error) {
	id, roots, err := c.handles()
	if err != nil {
		return nil, err
	}
	ident, err := id.Identity(ctx)
	if err != nil {
		return nil, fmt.Errorf("identity certificate provider instance %q: %w", c.sec.IdentityInstance, err)
	}
	cfg := &tls.Config{
		Certificates: ident.Certs,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"}, // gRPC clients insist on ALPN h2
		// Each handshake has a Config of its own, whose session ticket
		// keys no other handshake knows: a ticket could never be used.
		SessionTicketsDisabled: true,
	}
	if roots == nil {
		return cfg, nil
	}
	tr, err := roots.Trust(ctx)
	if err != nil {
		return nil, fmt.Errorf("root certificate provider instance %q: %w", c.sec.RootInstance, err)
	}
	require := c.sec.RequireClientCert
	if m := tr.SPIFFE; m != nil {
		// gRFC A87: the bundle map replaces the roots. crypto/tls asks for
		// a certificate and leaves its verification to verifySPIFFE.
		cfg.ClientAuth = tls.RequestClientCert
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifySPIFFE(cs, m, require, v) }
		return cfg, nil
	}
	// crypto/tls verifies a certificate that is sent; a missing one is
	// refused by requireClientCert, so that it is counted as such.
	cfg.ClientCAs = tr.Roots
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	if require {
		cfg.VerifyConnection = requireClientCert
	}
	return cfg, nil
}

// spiffeID returns the SPIFFE ID of the peer's certificate: its URI SAN if
// it has exactly one URI SAN, with scheme spiffe; nil otherwise.
func spiffeID(state tls.ConnectionState) *url.URL {
	if len(state.PeerCertificates) == 0 {
		return nil
	}
	uris := state.PeerCertificates[0].URIs
	if len(uris) != 1 || uris[0].Scheme != "spiffe" {
		return nil
	}
	return uris[0]
}

// addrPort converts a TCP address; the zero value for other kinds.
func addrPort(a net.Addr) netip.AddrPort {
	if _, ok := a.(*net.TCPAddr); !ok {
		return netip.AddrPort{}
	}
	ap, _ := netaddr.FromNet(a)
	return ap
}

// handshakeLogInterval is how often, at most, handshake failures of one
// filter chain are logged at warning level.
const handshakeLogInterval = time.Minute

// HandshakeLog limits the logging of failed handshakes (TLS, mTLS) of one
// listener: a client with a bad certificate retries forever, and one line
// per attempt would drown the log. The first failure of each filter chain is
// logged at once; later ones at most once per handshakeLogInterval, with the
// number of failures left out since. Every failure is logged at info level
// (verbosity 2). Safe for concurrent use.
type HandshakeLog struct {
	log     *serverlog.Logger // immutable
	metrics *metrics.Listener // immutable; nil records nothing

	mu     sync.Mutex
	chains map[string]*handshakeLogState // guarded by mu; by filter chain name
	now    func() time.Time              // immutable; time.Now except in tests
}

type handshakeLogState struct {
	last       time.Time // when the last warning was logged
	suppressed int       // failures not logged at warning level since
}

// NewHandshakeLog returns the handshake log of the listener logging to log;
// the TLS metrics of its filter chains are recorded to m (nil records
// none).
func NewHandshakeLog(log *serverlog.Logger, m *metrics.Listener) *HandshakeLog {
	return &HandshakeLog{log: log, metrics: m, chains: make(map[string]*handshakeLogState), now: time.Now}
}

// failed logs a failed handshake of a connection from src on the filter
// chain named chain, with its result r; once per failed handshake, never
// per RPC.
func (h *HandshakeLog) failed(chain string, src netip.AddrPort, r metrics.TLSResult, err error) {
	now := h.now()
	h.mu.Lock()
	st := h.chains[chain]
	if st == nil {
		st = &handshakeLogState{}
		h.chains[chain] = st
	}
	warn := st.last.IsZero() || now.Sub(st.last) >= handshakeLogInterval
	suppressed := st.suppressed
	if warn {
		st.last, st.suppressed = now, 0
	} else {
		st.suppressed++
	}
	h.mu.Unlock()

	switch {
	case !warn:
		if h.log.V(2) {
			h.log.Infof("filter chain %q: TLS handshake with %v failed (%s): %v", chain, src, r.Outcome(), err)
		}
	case suppressed > 0:
		h.log.Warningf("filter chain %q: TLS handshake with %v failed (%s): %v (%d more failure(s) since the last warning, logged at verbosity 2)", chain, src, r.Outcome(), err, suppressed)
	default:
		h.log.Warningf("filter chain %q: TLS handshake with %v failed (%s): %v", chain, src, r.Outcome(), err)
	}
}
