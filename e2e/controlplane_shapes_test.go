package e2e_test

// End-to-end tests with the resource shapes real control planes send.
//
// istiod's proxyless generator (pilot/pkg/networking/grpcgen): the bootstrap
// istio-agent writes has one file_watcher instance "default" with the
// workload's certificate, key and mesh root; a STRICT Listener names it in
// both the current and the deprecated certificate-provider fields.
//
// Traffic Director and go-control-plane based control planes: the server
// Listener of grpc-go's e2e helpers (DefaultServerListener), two wildcard
// chains restricted to SAME_IP_OR_LOOPBACK sources, whose TLS names its
// instances in the deprecated fields only.

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// istiodStrictTLS is istiod's DownstreamTlsContext for PeerAuthentication
// STRICT (since istio/istio#58257): identity and roots from the bootstrap
// instance "default", each named in the current and the deprecated field.
func istiodStrictTLS() *tlspb.DownstreamTlsContext {
	return &tlspb.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateProviderInstance:            &tlspb.CertificateProviderPluginInstance{InstanceName: "default", CertificateName: "default"},
			TlsCertificateCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "default", CertificateName: "default"},
			ValidationContextType: &tlspb.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext: &tlspb.CertificateValidationContext{
						CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "default", CertificateName: "ROOTCA"},
					},
					ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "default", CertificateName: "ROOTCA"},
				},
			},
		},
	}
}

// newIstioTestEnv is a test environment whose bootstrap has istio-agent's
// certificate provider: one file_watcher instance "default" over the
// server's certificate, key and the CA.
func newIstioTestEnv(t *testing.T, pki *testPKI) *testEnv {
	t.Helper()
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	nodeID := "sidecar~127.0.0.1~server.default~default.svc.cluster.local"
	provider, err := json.Marshal(map[string]any{"plugin_name": "file_watcher", "config": map[string]string{
		"certificate_file":    pki.serverFiles.Cert,
		"private_key_file":    pki.serverFiles.Key,
		"ca_certificate_file": pki.serverFiles.CA,
		"refresh_interval":    "900s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{
		ms:     ms,
		nodeID: nodeID,
		bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
			ServerURIs:                         []string{ms.Address},
			NodeID:                             nodeID,
			ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
			CertificateProviders:               map[string]json.RawMessage{"default": provider},
		}),
	}
}

// TestIstiodStrictMTLS: istiod's STRICT Listener is accepted and serves
// mutual TLS: a client with a certificate of the mesh CA gets through and
// is seen with its SPIFFE ID; plaintext, no certificate, and a certificate
// of another CA are refused.
func TestIstiodStrictMTLS(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newIstioTestEnv(t, pki)
	peers := newPeerRecorder()
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", istiodStrictTLS())
	}, peers.option())

	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client", URIs: []string{"spiffe://cluster.local/ns/default/sa/client"}})
	c := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
	if code := c.emptyCall(ctx); code != codes.OK {
		t.Fatalf("mTLS EmptyCall with a mesh certificate: %v, want OK", code)
	}
	info, ok := peers.next(ctx, t).AuthInfo.(credentials.TLSInfo)
	if !ok || info.SPIFFEID == nil || info.SPIFFEID.String() != "spiffe://cluster.local/ns/default/sa/client" {
		t.Errorf("server-side peer = %+v, want TLS with SPIFFE ID spiffe://cluster.local/ns/default/sa/client", info)
	}
	dialFails(ctx, t, addr, "127.0.0.1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, nil))
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, pki.otherCA.Issue(t, testcerts.LeafOptions{CommonName: "intruder"})))
}

// TestIstiodDisableToStrict: a workload serving plaintext (PeerAuthentication
// DISABLE) that is switched to STRICT gets mTLS, without a restart: after the
// push, a new plaintext connection is refused and an mTLS one works. (Before
// the deprecated fields were accepted, the STRICT Listener was NACKed and the
// server silently kept serving plaintext.)
func TestIstiodDisableToStrict(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newIstioTestEnv(t, pki)
	lis, _ := listen(t, "127.0.0.1")
	s, addr := startTLSServerOn(ctx, t, env, lis, simpleListener)

	plain := newClient(t, addr, "127.0.0.1", 0)
	if code := plain.emptyCall(ctx); code != codes.OK {
		t.Fatalf("plaintext EmptyCall under DISABLE: %v, want OK", code)
	}

	env.update(ctx, t, []*listenerpb.Listener{withTransportSocket(t, simpleListener(addr), "A", istiodStrictTLS())}, nil)
	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client", URIs: []string{"spiffe://cluster.local/ns/default/sa/client"}})
	mtls := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
	waitForCode(ctx, t, "mTLS EmptyCall after the switch to STRICT", codes.OK, mtls.emptyCallNoOpts)
	dialFails(ctx, t, addr, "127.0.0.1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	s.modes.expectNone(t, lis.Addr(), 50*time.Millisecond) // still serving
	for _, r := range env.ms.Requests() {
		if r.GetErrorDetail() != nil && strings.Contains(r.GetTypeUrl(), "Listener") {
			t.Errorf("the server NACKed a Listener: %v", r.GetErrorDetail().GetMessage())
		}
	}
}

// trafficDirectorListener is the shape of grpc-go's e2e DefaultServerListener
// for an mTLS server: chains "v4-wildcard" and "v6-wildcard" matching
// 0.0.0.0/0 and ::/0 from SAME_IP_OR_LOOPBACK sources, an HttpConnectionManager
// named "filter-1" with an inline route_config, and a DownstreamTlsContext
// that names the certificate provider instance only in the deprecated
// tls_certificate_certificate_provider_instance and (standalone)
// validation_context_certificate_provider_instance.
func trafficDirectorListener(t *testing.T, addr net.Addr, instance string) *listenerpb.Listener {
	t.Helper()
	d := &tlspb.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: instance},
			ValidationContextType: &tlspb.CommonTlsContext_ValidationContextCertificateProviderInstance{
				ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: instance},
			},
		},
	}
	l := simpleListener(addr)
	tmpl := l.FilterChains[0]
	tmpl.Filters[0].Name = "filter-1"
	l.FilterChains = nil
	for _, c := range []struct{ name, prefix string }{{"v4-wildcard", "0.0.0.0"}, {"v6-wildcard", "::"}} {
		fc := &listenerpb.FilterChain{
			Name:    c.name,
			Filters: tmpl.Filters,
			FilterChainMatch: &listenerpb.FilterChainMatch{
				PrefixRanges:       []*corepb.CidrRange{{AddressPrefix: c.prefix, PrefixLen: wrapperspb.UInt32(0)}},
				SourceType:         listenerpb.FilterChainMatch_SAME_IP_OR_LOOPBACK,
				SourcePrefixRanges: []*corepb.CidrRange{{AddressPrefix: c.prefix, PrefixLen: wrapperspb.UInt32(0)}},
			},
		}
		l.FilterChains = append(l.FilterChains, fc)
		withTransportSocket(t, l, c.name, d)
	}
	return l
}

// TestTrafficDirectorMTLS: the Listener shape of Traffic Director and
// go-control-plane based control planes (grpc-go's e2e helpers), whose TLS
// uses only the deprecated certificate-provider fields, serves mTLS.
func TestTrafficDirectorMTLS(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newIstioTestEnv(t, pki) // one instance with identity and roots
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return trafficDirectorListener(t, a, "default")
	})
	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client"})
	if code := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client)).emptyCall(ctx); code != codes.OK {
		t.Fatalf("mTLS EmptyCall: %v, want OK", code)
	}
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, nil))
	dialFails(ctx, t, addr, "127.0.0.1", grpc.WithTransportCredentials(insecure.NewCredentials()))
}
