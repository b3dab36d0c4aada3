package e2e_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/server/security"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

func TestNewServerCredentialsNeedsFallback(t *testing.T) {
	if _, err := xds.NewServerCredentials(xds.ServerOptions{}); err == nil {
		t.Fatal("NewServerCredentials without FallbackCreds succeeded, want an error")
	}
}

// startTLSServer serves the Listener l (built for lis) with xDS credentials
// and waits until the listener serves.
func startTLSServer(ctx context.Context, t *testing.T, env *testEnv, l *listenerpb.Listener, opts ...grpc.ServerOption) (*testServer, net.Addr) {
	t.Helper()
	lis, _ := listen(t, "127.0.0.1")
	return startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener { return l }, opts...)
}

// startTLSServerOn serves lis with xDS credentials and the Listener
// listener(lis.Addr()), and waits until it serves.
func startTLSServerOn(ctx context.Context, t *testing.T, env *testEnv, lis net.Listener, listener func(net.Addr) *listenerpb.Listener, opts ...grpc.ServerOption) (*testServer, net.Addr) {
	t.Helper()
	s := env.newServer(t, append([]grpc.ServerOption{xdsCreds(t)}, opts...)...)
	env.update(ctx, t, []*listenerpb.Listener{listener(lis.Addr())}, nil)
	s.serveOn(lis)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	return s, lis.Addr()
}

// A chain without transport_socket uses the fallback credentials (gRFC A29).
func TestCredsPlaintextChainUsesFallback(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	peers := newPeerRecorder()
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, simpleListener, peers.option())

	c := newClient(t, addr, "127.0.0.1", 0)
	if code := c.emptyCall(ctx); code != codes.OK {
		t.Fatalf("plaintext EmptyCall: %v, want OK", code)
	}
	p := peers.next(ctx, t)
	if _, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		t.Errorf("server-side AuthInfo of a plaintext chain is TLS, want the fallback's")
	}
	if p.AuthInfo == nil || p.AuthInfo.AuthType() != "insecure" {
		t.Errorf("server-side AuthInfo = %v, want insecure", p.AuthInfo)
	}
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, nil))
}

// A TLS chain: the client verifies the server's certificate, from the
// bootstrap's certificate provider.
func TestCredsTLS(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	peers := newPeerRecorder()
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", downstreamTLS(false, false))
	}, peers.option())

	c := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, nil))
	if got, want := c.serverCertSerial(ctx, t), pki.server.Cert.SerialNumber.String(); got != want {
		t.Errorf("server certificate serial = %s, want %s (the provider's)", got, want)
	}
	info, ok := peers.next(ctx, t).AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatal("server-side AuthInfo is not credentials.TLSInfo")
	}
	if info.SecurityLevel != credentials.PrivacyAndIntegrity {
		t.Errorf("SecurityLevel = %v, want PrivacyAndIntegrity", info.SecurityLevel)
	}
	if len(info.State.PeerCertificates) != 0 {
		t.Errorf("TLS (not mTLS) chain got %d client certificates, want none asked for", len(info.State.PeerCertificates))
	}
	// A client that does not trust the CA, and a plaintext client, fail.
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.otherCA.Pool, nil))
	dialFails(ctx, t, addr, "127.0.0.1", grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// An mTLS chain: a client certificate from the trusted CA is required.
func TestCredsMTLS(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	peers := newPeerRecorder()
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", downstreamTLS(true, true))
	}, peers.option())

	t.Run("valid client certificate", func(t *testing.T) {
		client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client", URIs: []string{"spiffe://test.example/client"}, DNSNames: []string{"client.test"}})
		c := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
		if code := c.emptyCall(ctx); code != codes.OK {
			t.Fatalf("EmptyCall with a valid client certificate: %v, want OK", code)
		}
		info, ok := peers.next(ctx, t).AuthInfo.(credentials.TLSInfo)
		if !ok || len(info.State.PeerCertificates) == 0 {
			t.Fatal("server-side AuthInfo has no client certificate")
		}
		leaf := info.State.PeerCertificates[0]
		if leaf.SerialNumber.Cmp(client.Cert.SerialNumber) != 0 || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "client.test" {
			t.Errorf("server saw client certificate %v (DNS %v), want the client's", leaf.Subject, leaf.DNSNames)
		}
		if info.SPIFFEID == nil || info.SPIFFEID.String() != "spiffe://test.example/client" {
			t.Errorf("SPIFFEID = %v, want spiffe://test.example/client", info.SPIFFEID)
		}
		if len(info.State.VerifiedChains) == 0 {
			t.Error("client certificate has no verified chain")
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, nil))
	})
	t.Run("client certificate from another CA", func(t *testing.T) {
		other := pki.otherCA.Issue(t, testcerts.LeafOptions{CommonName: "intruder"})
		dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, other))
	})
}

// mTLS with require_client_certificate false: a certificate is asked for
// and verified if given, but not required.
func TestCredsMTLSOptional(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", downstreamTLS(true, false))
	})
	if code := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, nil)).emptyCall(ctx); code != codes.OK {
		t.Errorf("EmptyCall without a client certificate: %v, want OK", code)
	}
	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client"})
	if code := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client)).emptyCall(ctx); code != codes.OK {
		t.Errorf("EmptyCall with a valid client certificate: %v, want OK", code)
	}
	other := pki.otherCA.Issue(t, testcerts.LeafOptions{CommonName: "intruder"})
	dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, other))
}

// Two chains of one Listener, picked by source address, with different
// security: plaintext for 127.0.0.2, mTLS for 127.0.0.1.
func TestCredsTwoChainsBySource(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		l := testListener(a, []chainSpec{
			{name: "plain", match: &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}},
			{name: "mtls", match: &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.1/32")}}},
		}, nil)
		return withTransportSocket(t, l, "mtls", downstreamTLS(true, true))
	})
	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client"})

	plain := newClient(t, addr, "127.0.0.2", 0)
	if got := plain.chainOf(ctx, t, "plain", "mtls"); got != "plain" {
		t.Errorf("plaintext client from 127.0.0.2 served by chain %q, want plain", got)
	}
	secure := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
	if got := secure.chainOf(ctx, t, "plain", "mtls"); got != "mtls" {
		t.Errorf("mTLS client from 127.0.0.1 served by chain %q, want mtls", got)
	}
	dialFails(ctx, t, addr, "127.0.0.1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	dialFails(ctx, t, addr, "127.0.0.2", tlsClientCreds(pki.ca.Pool, client))
}

// A rotated identity certificate is used by new connections within the
// refresh interval; an existing connection keeps working.
func TestCredsRotation(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, 50*time.Millisecond)
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", downstreamTLS(false, false))
	})
	old := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, nil))
	if got, want := old.serverCertSerial(ctx, t), pki.server.Cert.SerialNumber.String(); got != want {
		t.Fatalf("server certificate serial = %s, want %s", got, want)
	}
	st := old.startStream(ctx, t)

	rotated := pki.rotateServerCert(t)
	want := rotated.Cert.SerialNumber.String()
	testutils.WaitFor(ctx, t, "new connections to get the rotated certificate "+want, func() error {
		c := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, nil))
		defer c.Close()
		if got := c.serverCertSerial(ctx, t); got != want {
			return fmt.Errorf("they get %s", got)
		}
		return nil
	})
	st.pingPong(t)
	st.finish(t)
	if got, want := old.serverCertSerial(ctx, t), pki.server.Cert.SerialNumber.String(); got != want {
		t.Errorf("existing connection's certificate serial = %s, want the original %s", got, want)
	}
}

// Failed handshakes close their connections only: an open stream and new
// good clients keep working, and the serving mode does not change.
func TestCredsHandshakeFailureIsolated(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	lis, _ := listen(t, "127.0.0.1")
	s, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", downstreamTLS(true, true))
	})
	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client"})
	good := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
	st := good.startStream(ctx, t)

	other := pki.otherCA.Issue(t, testcerts.LeafOptions{CommonName: "intruder"})
	for range 3 {
		dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, nil))
		dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, other))
		dialFails(ctx, t, addr, "127.0.0.1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	st.pingPong(t)
	if code := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client)).emptyCall(ctx); code != codes.OK {
		t.Errorf("new good client after failed handshakes: %v, want OK", code)
	}
	st.finish(t)
	s.modes.expectNoneBy(ctx, t, env.ms, addr)
}

// A Listener naming a certificate provider instance the bootstrap does not
// have is NACKed (gRFC A29); the previous Listener keeps serving.
func TestCredsUnknownInstanceNACKed(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	lis, _ := listen(t, "127.0.0.1")
	s, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", downstreamTLS(false, false))
	})
	bad := downstreamTLS(false, false)
	bad.CommonTlsContext.TlsCertificateProviderInstance.InstanceName = "no-such-instance"
	seen := len(env.ms.Requests())
	env.update(ctx, t, []*listenerpb.Listener{withTransportSocket(t, simpleListener(addr), "A", bad)}, nil)
	req, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(resourcev3.ListenerType)))
	if err != nil {
		t.Fatalf("waiting for the NACK: %v", err)
	}
	if msg := req.GetErrorDetail().GetMessage(); !strings.Contains(msg, "no-such-instance") || !strings.Contains(msg, "tls_certificate_provider_instance") {
		t.Errorf("NACK message %q, want it to name the instance and the field", msg)
	}
	if code := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, nil)).emptyCall(ctx); code != codes.OK {
		t.Errorf("EmptyCall after the NACK: %v, want OK (the previous Listener)", code)
	}
	s.modes.expectNoneBy(ctx, t, env.ms, addr)
}

// The credentials on a server that is not an xDS server use the fallback.
func TestCredsNotXDSConnUsesFallback(t *testing.T) {
	ctx := testContext(t)
	creds, err := xds.NewServerCredentials(xds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(creds))
	testgrpc.RegisterTestServiceServer(s, testService{})
	lis, _ := listen(t, "127.0.0.1")
	go s.Serve(lis)
	defer s.Stop()
	if code := newClient(t, lis.Addr(), "127.0.0.1", 0).emptyCall(ctx); code != codes.OK {
		t.Errorf("EmptyCall on a plain grpc.Server with xDS credentials: %v, want OK", code)
	}
}

// Certificate providers start with the first handshake that needs them, are
// shared by the connections of a chain, and stop once no chain in service
// or connection uses them (the chain left the Listener and its connections
// drained).
func TestCredsProvidersStartLazilyAndStop(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", downstreamTLS(false, false))
	}, xds.DrainGraceTime(0))
	identity := bootstrap.FileWatcherConfig{CertificateFile: pki.serverFiles.Cert, PrivateKeyFile: pki.serverFiles.Key, RefreshInterval: time.Hour}
	if got := security.ProviderRefs(identity); got != 0 {
		t.Errorf("before any handshake, provider refs = %d, want 0 (started lazily)", got)
	}
	for range 2 {
		if code := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, nil)).emptyCall(ctx); code != codes.OK {
			t.Fatalf("EmptyCall: %v, want OK", code)
		}
	}
	if got := security.ProviderRefs(identity); got != 1 {
		t.Errorf("after two connections on one chain, provider refs = %d, want 1", got)
	}
	// The TLS chain is replaced by a plaintext one: its connections drain.
	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "B"}}, nil)}, nil)
	testutils.WaitFor(ctx, t, "the provider of a chain no longer in service to stop", func() error {
		if n := security.ProviderRefs(identity); n != 0 {
			return fmt.Errorf("%d references", n)
		}
		return nil
	})
}

// A failed handshake is logged once, with the peer, the filter chain and
// the reason.
func TestCredsHandshakeFailureLogged(t *testing.T) {
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	lis, _ := listen(t, "127.0.0.1")
	mr := testutils.NewMetricReader(t)
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return withTransportSocket(t, simpleListener(a), "A", downstreamTLS(true, true))
	}, xds.MeterProvider(mr.Provider))
	other := pki.otherCA.Issue(t, testcerts.LeafOptions{CommonName: "intruder"})
	// intrude makes a handshake with a certificate of another CA and
	// returns the local address of its connection.
	intrude := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", addr.String(), &tls.Config{
			RootCAs:              pki.ca.Pool,
			ServerName:           "server.test",
			NextProtos:           []string{"h2"},
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &other.TLS, nil },
		})
		if err == nil {
			// TLS 1.3: the server checks the client certificate after the
			// client's handshake is done; a read sees the alert.
			conn.SetReadDeadline(time.Now().Add(defaultTestTimeout))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil {
			t.Fatal("TLS connection with a certificate of another CA was accepted")
		}
		return conn.LocalAddr().String()
	}
	local := intrude()
	logs := warningsOf("[listener " + addr.String() + "]")
	logs.waitCount(ctx, t, 1, "TLS handshake", local, `"A"`, "certificate")
	// A second failed handshake, made after the first was logged and
	// counted by the handshakes metric, is the point by which a repeated
	// line about the first would have shown. (The second is not logged at
	// warning level: failures of a chain are, at most once per interval.)
	intrude()
	mr.WaitForValue(ctx, t, "grpc.server.tls.handshakes", 2, tlsAttrs(addr, "A")...)
	if n := logs.count("TLS handshake", local); n != 1 {
		t.Errorf("failed handshake logged %d times, want once:\n%s", n, strings.Join(logs.all(), "\n"))
	}
}
