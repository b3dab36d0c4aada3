package e2e_test

// Helpers of the end-to-end tests of xDS server credentials (gRFC A29):
// certificates generated at test time and written where the bootstrap's
// file_watcher certificate providers read them, TLS transport sockets for
// test Listeners, and TLS clients.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// Certificate provider instance names of the tls test bootstrap.
const (
	instServer = "server-identity" // the server's certificate and key
	instRoots  = "client-roots"    // roots that verify client certificates
)

// testPKI is the certificates of a TLS test: a CA for servers and clients,
// another CA that nothing trusts, the server's certificate and key files.
type testPKI struct {
	ca, otherCA *testcerts.CA
	server      *testcerts.Leaf
	serverDir   string          // holds cert.pem and key.pem of server
	serverFiles testcerts.Files // server's identity files and ca.pem (ca)
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{ca: testcerts.NewCA(t, "test-ca"), otherCA: testcerts.NewCA(t, "other-ca"), serverDir: t.TempDir()}
	p.server = p.ca.Issue(t, testcerts.LeafOptions{CommonName: "server", DNSNames: []string{"server.test"}, IPs: []string{"127.0.0.1"}})
	p.serverFiles = testcerts.WriteFiles(t, p.serverDir, p.server, p.ca.PEM)
	return p
}

// rotateServerCert issues a new server certificate and replaces the files.
func (p *testPKI) rotateServerCert(t *testing.T) *testcerts.Leaf {
	t.Helper()
	leaf := p.ca.Issue(t, testcerts.LeafOptions{CommonName: "server-rotated", DNSNames: []string{"server.test"}})
	testcerts.WriteFiles(t, p.serverDir, leaf, nil)
	return leaf
}

// fileWatcher is a bootstrap certificate_providers entry of the file_watcher
// plugin with cfg, re-reading its files every refresh (0: the plugin's
// default).
func fileWatcher(cfg map[string]string, refresh time.Duration) json.RawMessage {
	if refresh > 0 {
		cfg["refresh_interval"] = fmt.Sprintf("%.3fs", refresh.Seconds())
	}
	b, err := json.Marshal(map[string]any{"plugin_name": "file_watcher", "config": cfg})
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return b
}

// providers returns the bootstrap certificate_providers: instServer (the
// server's files) and instRoots (the CA file), each refreshed every refresh.
func (p *testPKI) providers(refresh time.Duration) map[string]json.RawMessage {
	return map[string]json.RawMessage{
		instServer: fileWatcher(map[string]string{"certificate_file": p.serverFiles.Cert, "private_key_file": p.serverFiles.Key}, refresh),
		instRoots:  fileWatcher(map[string]string{"ca_certificate_file": p.serverFiles.CA}, refresh),
	}
}

// newTLSTestEnv is newTestEnv with the certificate providers of pki in the
// bootstrap.
func newTLSTestEnv(t *testing.T, pki *testPKI, refresh time.Duration) *testEnv {
	t.Helper()
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	nodeID := "node-" + testutils.RunName(t)
	return &testEnv{
		ms:     ms,
		nodeID: nodeID,
		bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
			ServerURIs:                         []string{ms.Address},
			NodeID:                             nodeID,
			ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
			CertificateProviders:               pki.providers(refresh),
		}),
	}
}

// xdsCreds returns NewServerCredentials with insecure fallback, as a server
// option.
func xdsCreds(t *testing.T) grpc.ServerOption {
	t.Helper()
	creds, err := xds.NewServerCredentials(xds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatalf("NewServerCredentials: %v", err)
	}
	return grpc.Creds(creds)
}

// downstreamTLS returns a DownstreamTlsContext with the server's identity
// from instServer and, if mtls, client certificates verified with instRoots
// and required if require.
func downstreamTLS(mtls, require bool) *tlspb.DownstreamTlsContext {
	d := &tlspb.DownstreamTlsContext{
		CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: instServer},
		},
	}
	if mtls {
		d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
			CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: instRoots},
		}}
		d.RequireClientCertificate = wrapperspb.Bool(require)
	}
	return d
}

// withTransportSocket sets the transport socket of l's chain named name (or
// of its default chain if name is "") to TLS with d.
func withTransportSocket(t *testing.T, l *listenerpb.Listener, name string, d *tlspb.DownstreamTlsContext) *listenerpb.Listener {
	t.Helper()
	a, err := anypb.New(d)
	if err != nil {
		t.Fatal(err)
	}
	ts := &corepb.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: a}}
	if name == "" {
		l.DefaultFilterChain.TransportSocket = ts
		return l
	}
	for _, fc := range l.FilterChains {
		if fc.GetName() == name {
			fc.TransportSocket = ts
			return l
		}
	}
	t.Fatalf("Listener has no filter chain %q", name)
	return nil
}

// tlsClientCreds returns client TLS credentials that trust roots and, if
// cert is not nil, present it whenever the server asks for a certificate,
// even if it is not from a CA the server names (Go's client would otherwise
// send none).
func tlsClientCreds(roots *x509.CertPool, cert *testcerts.Leaf) grpc.DialOption {
	cfg := &tls.Config{RootCAs: roots, ServerName: "server.test"}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.TLS, nil }
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// serverCertSerial makes an EmptyCall and returns the serial number of the
// server certificate the connection it used was made with.
func (c *testClient) serverCertSerial(ctx context.Context, t *testing.T) string {
	t.Helper()
	var p peer.Peer
	if _, err := c.EmptyCall(ctx, &testpb.Empty{}, grpc.Peer(&p)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		t.Fatalf("EmptyCall's peer AuthInfo = %v, want TLS with a server certificate", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber.String()
}

// peerRecorder is a server interceptor that records the peer of every RPC.
type peerRecorder struct{ ch chan *peer.Peer }

func newPeerRecorder() *peerRecorder { return &peerRecorder{ch: make(chan *peer.Peer, 100)} }

func (r *peerRecorder) option() grpc.ServerOption {
	return grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p, _ := peer.FromContext(ctx)
		select {
		case r.ch <- p:
		default:
		}
		return h(ctx, req)
	})
}

func (r *peerRecorder) next(ctx context.Context, t *testing.T) *peer.Peer {
	t.Helper()
	select {
	case p := <-r.ch:
		return p
	case <-ctx.Done():
		t.Fatal("no RPC reached the server")
	}
	return nil
}

// dialFails checks that an RPC of a client with creds from srcIP to addr
// fails: the connection does not come up.
func dialFails(ctx context.Context, t *testing.T, addr net.Addr, srcIP string, creds grpc.DialOption) {
	t.Helper()
	c := newClient(t, addr, srcIP, 0, creds)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.EmptyCall(rctx, &testpb.Empty{}); err == nil {
		t.Fatalf("EmptyCall from %s succeeded, want the connection refused by the TLS handshake", srcIP)
	}
}
