package xdsclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/google"
	"google.golang.org/grpc/credentials/insecure"
	grpcbootstrap "google.golang.org/grpc/xds/bootstrap"
)

// BootstrapOptions returns the options with which to parse a bootstrap
// for this package's clients (bootstrap.ParseWith, bootstrap.LoadWith):
// beyond the built-in credential types (channel credentials insecure, tls
// and google_default; call credentials jwt_token_file), every type
// registered in grpc-go's registry, google.golang.org/grpc/xds/bootstrap
// (RegisterChannelCredentials, RegisterCallCredentials), is supported, so
// that a program moved from grpc-go keeps its own types. The built-in types
// win over registered ones of the same name (grpc-go registers its own
// insecure, tls, google_default and jwt_token_file).
//
// A registered type's config is checked while parsing by building its
// credentials once and releasing them at once; a client builds them again
// for each channel that uses them and releases them when the channel closes.
func BootstrapOptions() bootstrap.ParseOptions {
	return bootstrap.ParseOptions{
		ChannelCreds: checkRegisteredChannelCreds,
		ChannelCredsHelp: "or a type registered with " +
			"google.golang.org/grpc/xds/bootstrap.RegisterChannelCredentials",
		CallCreds: checkRegisteredCallCreds,
	}
}

// checkRegisteredChannelCreds reports whether typ is registered with
// grpc-go as channel credentials and, if it is, whether its builder accepts
// config.
func checkRegisteredChannelCreds(typ string, config json.RawMessage) (supported bool, err error) {
	b := grpcbootstrap.GetChannelCredentials(typ)
	if b == nil {
		return false, nil
	}
	_, cleanup, err := b.Build(config)
	if cleanup != nil {
		cleanup()
	}
	return true, err
}

// checkRegisteredCallCreds is checkRegisteredChannelCreds for call
// credentials.
func checkRegisteredCallCreds(typ string, config json.RawMessage) (supported bool, err error) {
	b := grpcbootstrap.GetCallCredentials(typ)
	if b == nil {
		return false, nil
	}
	_, cleanup, err := b.Build(config)
	if cleanup != nil {
		cleanup()
	}
	return true, err
}

// credentialOptions returns the dial options of a management server's
// credentials: its channel credentials and the call credentials of its
// call_creds (gRFC A97), sent on every ADS stream. cleanup, never nil,
// releases what the credentials hold; the caller calls it once the
// connection is closed. On error there is nothing to release.
func credentialOptions(s *bootstrap.ServerConfig) (opts []grpc.DialOption, cleanup func(), err error) {
	opts, chanCleanup, err := channelCredentials(s)
	if err != nil {
		return nil, nil, err
	}
	cleanups := []func(){chanCleanup}
	cleanup = func() {
		for _, f := range cleanups {
			f()
		}
	}
	for _, cc := range s.CallCreds {
		creds, ccCleanup, err := callCredentials(s, cc)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		cleanups = append(cleanups, ccCleanup)
		opts = append(opts, grpc.WithPerRPCCredentials(creds))
	}
	return opts, cleanup, nil
}

// CredentialOptions returns the dial options of the credentials of s, a
// management server or an allowed_grpc_services entry of the bootstrap
// (gRFC A102: the same format), and the function releasing what they hold
// (never nil when err is nil); the caller calls it once the channel is
// closed.
func CredentialOptions(s *bootstrap.ServerConfig) (opts []grpc.DialOption, cleanup func(), err error) {
	return credentialOptions(s)
}

// callCredentials builds one call credential of a management server: the
// built-in jwt_token_file, else the type registered with grpc-go (see
// BootstrapOptions). cleanup is never nil when err is nil.
func callCredentials(s *bootstrap.ServerConfig, cc bootstrap.CallCreds) (creds credentials.PerRPCCredentials, cleanup func(), err error) {
	if cc.Type == bootstrap.CallCredsJWTTokenFile {
		return newTokenFileCreds(cc.JWTTokenFile), func() {}, nil
	}
	b := grpcbootstrap.GetCallCredentials(cc.Type)
	if b == nil {
		return nil, nil, fmt.Errorf("management server %q: unsupported call credentials %q (not registered with google.golang.org/grpc/xds/bootstrap)",
			s.ServerURI, cc.Type)
	}
	creds, cleanup, err = b.Build(cc.Config)
	if cleanup == nil {
		cleanup = func() {}
	}
	switch {
	case err != nil:
		cleanup()
		return nil, nil, fmt.Errorf("%q call credentials of management server %q: %w", cc.Type, s.ServerURI, err)
	case creds == nil:
		cleanup()
		return nil, nil, fmt.Errorf("%q call credentials of management server %q: the registered builder returned no credentials", cc.Type, s.ServerURI)
	}
	return creds, cleanup, nil
}

// bundleDialOptions is implemented by credential bundles that need dial
// options of their own, which grpc-go's xDS client applies too.
type bundleDialOptions interface {
	DialOptions() []grpc.DialOption
}

// channelCredentials returns the dial options of the channel credentials of
// a management server: the built-in types, else the type registered with
// grpc-go (see BootstrapOptions), dialed with its credentials bundle as
// grpc-go's xDS client does (its transport and per-RPC credentials, and its
// own dial options if it has any).
func channelCredentials(s *bootstrap.ServerConfig) (opts []grpc.DialOption, cleanup func(), err error) {
	nop := func() {}
	switch s.ChannelCreds.Type {
	case bootstrap.CredsInsecure, bootstrap.CredsTLS:
		creds, err := transportCredentials(s)
		if err != nil {
			return nil, nil, err
		}
		return []grpc.DialOption{grpc.WithTransportCredentials(creds)}, nop, nil
	case bootstrap.CredsGoogleDefault:
		return bundleOptions(google.NewDefaultCredentials()), nop, nil
	}
	b := grpcbootstrap.GetChannelCredentials(s.ChannelCreds.Type)
	if b == nil {
		return nil, nil, fmt.Errorf("management server %q: unsupported channel credentials %q (not registered with google.golang.org/grpc/xds/bootstrap)",
			s.ServerURI, s.ChannelCreds.Type)
	}
	bundle, cleanup, err := b.Build(s.ChannelCreds.Config)
	if cleanup == nil {
		cleanup = nop
	}
	switch {
	case err != nil:
		cleanup()
		return nil, nil, fmt.Errorf("%q channel credentials of management server %q: %w", s.ChannelCreds.Type, s.ServerURI, err)
	case bundle == nil:
		cleanup()
		return nil, nil, fmt.Errorf("%q channel credentials of management server %q: the registered builder returned no credentials", s.ChannelCreds.Type, s.ServerURI)
	}
	return bundleOptions(bundle), cleanup, nil
}

// bundleOptions returns the dial options of a credentials bundle.
func bundleOptions(bundle credentials.Bundle) []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithCredentialsBundle(bundle)}
	if d, ok := bundle.(bundleDialOptions); ok {
		opts = append(opts, d.DialOptions()...)
	}
	return opts
}

// transportCredentials builds the channel credentials of a management server
// from its bootstrap entry: "insecure", or "tls" as gRFC A65 describes (the
// CA file, else the system roots; an optional client certificate and key).
// The files are read once here, so that unusable files fail the channel at
// once, and read again on a TLS handshake once RefreshInterval has passed;
// no goroutine is involved. Errors are causes: the channel reports them as
// the cause of a KindConnection *Error.
func transportCredentials(s *bootstrap.ServerConfig) (credentials.TransportCredentials, error) {
	switch s.ChannelCreds.Type {
	case bootstrap.CredsInsecure:
		return insecure.NewCredentials(), nil
	case bootstrap.CredsTLS:
		files := s.ChannelCreds.TLS
		if files == nil {
			files = &bootstrap.TLSCreds{}
		}
		r := &certFiles{files: files}
		if _, _, err := r.current(); err != nil {
			return nil, fmt.Errorf("tls channel credentials of management server %q: %w", s.ServerURI, err)
		}
		return &fileTLS{r: r}, nil
	default:
		return nil, fmt.Errorf("management server %q: unsupported channel credentials %q", s.ServerURI, s.ChannelCreds.Type)
	}
}

// fileTLS are the "tls" channel credentials: grpc-go's TLS credentials over
// a config made for each handshake, which verifies the server against the
// roots current at that time and the name of the target.
type fileTLS struct {
	r *certFiles
	// serverName, when set (OverrideServerName), is the name checked
	// instead of the target's host.
	serverName string
}

// ClientHandshake checks the server's certificate against the host of
// authority (the target's, unless the channel overrides it), as grpc-go's
// credentials.NewTLS does: an IP literal against the certificate's IP SANs,
// a DNS name against its DNS SANs. The name is fixed here, not read back
// from the connection state: Go sends no SNI for an IP literal, so the
// state's ServerName is then empty and would check nothing.
func (c *fileTLS) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	name := c.serverName
	if name == "" {
		name = hostOf(authority)
	}
	return credentials.NewTLS(c.r.tlsConfig(name)).ClientHandshake(ctx, authority, conn)
}

// ServerHandshake implements credentials.TransportCredentials; these are
// client credentials only.
func (c *fileTLS) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("xdsclient: tls channel credentials are client credentials")
}

// Info implements credentials.TransportCredentials.
func (c *fileTLS) Info() credentials.ProtocolInfo {
	return credentials.NewTLS(&tls.Config{ServerName: c.serverName}).Info()
}

// Clone implements credentials.TransportCredentials.
func (c *fileTLS) Clone() credentials.TransportCredentials {
	cc := *c
	return &cc
}

// OverrideServerName implements credentials.TransportCredentials.
//
// Deprecated: as in grpc-go; use grpc.WithAuthority.
func (c *fileTLS) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}

// hostOf returns the host of a target's authority, as grpc-go's TLS
// credentials take it: the authority itself when it has no port.
func hostOf(authority string) string {
	host, _, err := net.SplitHostPort(authority)
	if err != nil {
		return authority
	}
	return host
}

// certFiles reads the certificate files of gRFC A65 channel credentials and
// re-reads them at most every RefreshInterval.
type certFiles struct {
	files *bootstrap.TLSCreds // immutable

	mu       sync.Mutex
	loadedAt time.Time        // guarded by mu; zero before the first successful load
	roots    *x509.CertPool   // guarded by mu; nil when there is no CA file
	cert     *tls.Certificate // guarded by mu; nil when there is no certificate file
}

// tlsConfig returns a client config that verifies the server, named
// serverName (a DNS name or an IP literal), against the current roots and
// presents the current certificate.
func (r *certFiles) tlsConfig(serverName string) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if r.files.CACertificateFile != "" {
		// Verification is done in VerifyConnection, against the roots
		// current at handshake time; Go's built-in verification would pin
		// the roots of the first load.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return r.verify(cs, serverName) }
	}
	if r.files.CertificateFile != "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			_, cert, err := r.current()
			return cert, err
		}
	}
	return cfg
}

// verify checks the server's chain and its name, serverName, as crypto/tls
// would (x509.Certificate.VerifyHostname: an IP literal is matched against
// the IP SANs). An empty name is refused, as crypto/tls refuses a config
// with neither ServerName nor InsecureSkipVerify: it would check no name.
func (r *certFiles) verify(cs tls.ConnectionState, serverName string) error {
	if serverName == "" {
		return errors.New("no server name to verify the management server's certificate against")
	}
	roots, _, err := r.current()
	if err != nil {
		return err
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("management server sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		DNSName:       serverName,
	})
	return err
}

// current returns the roots and certificate, reloading the files when the
// refresh interval has passed. A failed reload keeps the previous files.
func (r *certFiles) current() (*x509.CertPool, *tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	interval := r.files.RefreshInterval
	if interval <= 0 {
		interval = bootstrap.DefaultRefreshInterval
	}
	if !r.loadedAt.IsZero() && time.Since(r.loadedAt) < interval {
		return r.roots, r.cert, nil
	}
	roots, cert, err := loadCertFiles(r.files)
	if err != nil {
		if r.loadedAt.IsZero() {
			return nil, nil, err
		}
		logger.Warningf("xdsclient: reloading channel credential files failed, keeping the previous ones: %v", err)
		r.loadedAt = time.Now()
		return r.roots, r.cert, nil
	}
	r.roots, r.cert, r.loadedAt = roots, cert, time.Now()
	return roots, cert, nil
}

func loadCertFiles(f *bootstrap.TLSCreds) (*x509.CertPool, *tls.Certificate, error) {
	var roots *x509.CertPool
	if f.CACertificateFile != "" {
		pem, err := os.ReadFile(f.CACertificateFile)
		if err != nil {
			return nil, nil, err
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("no PEM certificate in CA file %q", f.CACertificateFile)
		}
	}
	var cert *tls.Certificate
	if f.CertificateFile != "" || f.PrivateKeyFile != "" {
		c, err := tls.LoadX509KeyPair(f.CertificateFile, f.PrivateKeyFile)
		if err != nil {
			return nil, nil, err
		}
		cert = &c
	}
	return roots, cert, nil
}
