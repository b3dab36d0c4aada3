package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"

	"google.golang.org/grpc/credentials"

	"github.com/proxyless-grpc/xds/bootstrap"
	"github.com/proxyless-grpc/xds/filterchain"
	"github.com/proxyless-grpc/xds/internal/certprovider"
)

// ServerOptions configures NewServerCredentials. The names mirror
// google.golang.org/grpc/credentials/xds.
type ServerOptions struct {
	// FallbackCreds are the credentials used for a connection whose filter
	// chain has no transport_socket, and for connections not accepted by an
	// xDS server (gRFC A29). Required; insecure.NewCredentials() gives
	// plaintext, as Envoy does without a transport socket.
	FallbackCreds credentials.TransportCredentials
}

// NewServerCredentials returns transport credentials that let the control
// plane decide the security of each connection of an xDS server (gRFC A29).
// Pass them to NewGRPCServer with grpc.Creds.
//
// A connection whose filter chain has a DownstreamTlsContext gets TLS with
// the identity certificate of the chain's tls_certificate_provider_instance;
// with a validation context it is mutual TLS: the client's certificate must
// chain to the roots of its ca_certificate_provider_instance, and is
// required when require_client_certificate is true. The instances are
// certificate_providers of the bootstrap (plugin file_watcher), started on
// the first handshake that needs them, shared by every filter chain (and
// server) that names the same configuration, re-read every refresh_interval
// (new handshakes see rotated files; existing connections are not touched),
// and stopped when no filter chain uses them. A chain without
// transport_socket, and a connection not accepted by an xDS server, use
// FallbackCreds.
//
// A failed TLS handshake closes that connection only and is logged with its
// reason; it never falls back to FallbackCreds and does not change the
// serving mode. The AuthInfo of a TLS connection is a credentials.TLSInfo
// with SecurityLevel PrivacyAndIntegrity, so handlers (peer.FromContext) and
// RBAC see the client certificate.
//
// The returned credentials are server credentials: ClientHandshake fails.
func NewServerCredentials(opts ServerOptions) (credentials.TransportCredentials, error) {
	if opts.FallbackCreds == nil {
		return nil, errors.New("xds: NewServerCredentials: ServerOptions.FallbackCreds is nil, want the credentials to use without xDS security (e.g. insecure.NewCredentials())")
	}
	return &serverCreds{fallback: opts.FallbackCreds}, nil
}

// certStore runs the certificate providers of every xDS server of the
// process, so that identical provider configurations are read once (gRFC
// A29 "deduping and reference counting").
var certStore = certprovider.NewStore(func(format string, args ...any) {
	logger.Warningf(format, args...)
})

// securityConn is implemented by the connections an xDS server hands to
// gRPC: it gives the credentials the security configuration of the
// connection's filter chain (nil without transport_socket) and the
// chainServer that holds the chain's certificate providers.
type securityConn interface {
	net.Conn
	xdsSecurity() (*filterchain.Security, *chainServer)
}

// serverCreds implements NewServerCredentials. Immutable.
type serverCreds struct {
	fallback credentials.TransportCredentials
}

// ServerHandshake does TLS or mTLS as the connection's filter chain says,
// or the fallback credentials' handshake.
func (c *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	sc, ok := raw.(securityConn)
	if !ok {
		return c.fallback.ServerHandshake(raw)
	}
	sec, cs := sc.xdsSecurity()
	if sec == nil {
		return c.fallback.ServerHandshake(raw)
	}
	cfg, err := cs.sec.tlsConfig(sec, cs.lw.client.BootstrapConfig().CertProviders)
	if err != nil {
		cs.lw.handshakeFailed(cs.chain.Name, addrPort(raw.RemoteAddr()), err)
		return nil, nil, fmt.Errorf("xds: TLS handshake with %v on filter chain %q: %w", raw.RemoteAddr(), cs.chain.Name, err)
	}
	conn := tls.Server(raw, cfg)
	// The deadline gRPC set on raw bounds the handshake.
	if err := conn.HandshakeContext(context.Background()); err != nil {
		if errors.Is(err, io.EOF) {
			// The peer closed without a handshake, as TCP health checks
			// do: not worth a warning each time.
			cs.lw.log.Infof("filter chain %q: %v closed the connection before the TLS handshake", cs.chain.Name, raw.RemoteAddr())
		} else {
			// At most one warning a minute per chain: a misconfigured
			// client fleet must not flood the log.
			cs.lw.handshakeFailed(cs.chain.Name, addrPort(raw.RemoteAddr()), err)
		}
		return nil, nil, fmt.Errorf("xds: TLS handshake with %v on filter chain %q failed: %w", raw.RemoteAddr(), cs.chain.Name, err)
	}
	state := conn.ConnectionState()
	return conn, credentials.TLSInfo{
		State:          state,
		SPIFFEID:       spiffeID(state),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
	}, nil
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

// OverrideServerName does nothing: a server has no server name to check.
//
// Deprecated: as in credentials.TransportCredentials.
func (c *serverCreds) OverrideServerName(string) error { return nil }

// chainSecurity holds the certificate providers of one chainServer's TLS
// configuration: taken by the first handshake that needs them, released when
// the chainServer is gone (release), so that a provider runs exactly while a
// filter chain in service, or one of its connections, uses it.
type chainSecurity struct {
	mu       sync.Mutex
	released bool                 // guarded by mu
	identity *certprovider.Handle // guarded by mu; nil until the first handshake
	roots    *certprovider.Handle // guarded by mu; nil without a validation context
}

// xdsSecurity implements securityConn for the connections of a
// chainServer.
func (c *trackedConn) xdsSecurity() (*filterchain.Security, *chainServer) {
	return c.cs.chain.Security, c.cs
}

var errRetired = errors.New("the filter chain is no longer in service")

// handles returns the providers of sec, taking them from providers (the
// bootstrap's certificate_providers) on the first call.
func (s *chainSecurity) handles(sec *filterchain.Security, providers map[string]*bootstrap.CertProviderConfig) (identity, roots *certprovider.Handle, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil, nil, errRetired
	}
	if s.identity == nil {
		id, err := getProvider(providers, sec.IdentityInstance)
		if err != nil {
			return nil, nil, err
		}
		var r *certprovider.Handle
		if sec.MutualTLS() {
			if r, err = getProvider(providers, sec.RootInstance); err != nil {
				id.Release()
				return nil, nil, err
			}
		}
		s.identity, s.roots = id, r
	}
	return s.identity, s.roots, nil
}

// getProvider takes a handle on the provider of a bootstrap instance. Listener
// validation has checked that it exists with the file_watcher plugin.
func getProvider(providers map[string]*bootstrap.CertProviderConfig, instance string) (*certprovider.Handle, error) {
	p := providers[instance]
	if p == nil || p.FileWatcher == nil {
		return nil, fmt.Errorf("certificate provider instance %q is not a file_watcher of the bootstrap", instance)
	}
	return certStore.Get(*p.FileWatcher), nil
}

// tlsConfig returns the TLS configuration of a new handshake, with the
// providers' current key material.
func (s *chainSecurity) tlsConfig(sec *filterchain.Security, providers map[string]*bootstrap.CertProviderConfig) (*tls.Config, error) {
	id, roots, err := s.handles(sec, providers)
	if err != nil {
		return nil, err
	}
	km, err := id.KeyMaterial()
	if err != nil {
		return nil, fmt.Errorf("identity certificate provider instance %q: %w", sec.IdentityInstance, err)
	}
	if len(km.Certs) == 0 {
		return nil, fmt.Errorf("identity certificate provider instance %q has no certificate_file", sec.IdentityInstance)
	}
	cfg := &tls.Config{
		Certificates: km.Certs,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"}, // gRPC clients insist on ALPN h2
	}
	if roots == nil {
		return cfg, nil
	}
	rkm, err := roots.KeyMaterial()
	if err != nil {
		return nil, fmt.Errorf("root certificate provider instance %q: %w", sec.RootInstance, err)
	}
	if rkm.Roots == nil {
		return nil, fmt.Errorf("root certificate provider instance %q has no ca_certificate_file", sec.RootInstance)
	}
	cfg.ClientCAs = rkm.Roots
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	if sec.RequireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// release gives the providers back; later handshakes of the chain fail.
// Called when the chainServer is gone; safe to call more than once.
func (s *chainSecurity) release() {
	s.mu.Lock()
	s.released = true
	id, roots := s.identity, s.roots
	s.identity, s.roots = nil, nil
	s.mu.Unlock()
	if id != nil {
		id.Release()
	}
	if roots != nil {
		roots.Release()
	}
}
