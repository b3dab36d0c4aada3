package e2e_test

import (
	"encoding/json"
	"testing"
	"time"

	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/extprocserver"
)

// TestExtProc_GRPCGoXDSClientMTLS: grpc-go's own xds:/// client, given
// its configuration (mTLS included) by the same management server, calls
// a server whose mTLS filter chain runs ext_proc: the processor gets every
// event, with the connection.mtls and connection.uri_san_peer_certificate
// attributes of the client's certificate, and the client gets the
// response the processor rewrote.
func TestExtProc_GRPCGoXDSClientMTLS(t *testing.T) {
	t.Cleanup(func() { waitForGoroutinesGone(t, "google.golang.org/grpc/internal/xds/", 5*time.Second) })
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.Raw(redactor))
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	env.bootstrap = e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs: []string{env.ms.Address}, NodeID: env.nodeID, ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		CertificateProviders: pki.providers(time.Hour),
		AllowedGRPCServices:  map[string]json.RawMessage{p.Addr(): json.RawMessage(`{"channel_creds": [{"type": "insecure"}]}`)},
	})
	lis, _ := listen(t, "127.0.0.1")
	addr := lis.Addr()
	cfg := extProc(p.Addr(), allEvents())
	cfg.RequestAttributes = []string{"connection.mtls", "connection.uri_san_peer_certificate"}
	serverListener := withTransportSocket(t, filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "proc", cfg)}, allRoutes("routes"), ""), "filters-chain", downstreamTLS(true, true))
	s := env.newServer(t, xdsCreds(t))

	s.serveOn(lis)
	cc, _ := grpcGoXDSClient(ctx, t, env, pki, serverListener, addr)
	resp, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("secret")}}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("UnaryCall through grpc-go's xDS client over mTLS: %v", err)
	}
	if got := string(resp.GetPayload().GetBody()); got != "redacted" {
		t.Errorf("client got %q, want the processor's %q", got, "redacted")
	}
	recs, err := p.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := events(recs[0]), "request_headers,request_body,response_headers,response_body,response_trailers"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	attrs := recs[0].Requests[0].GetAttributes()["envoy.filters.http.ext_proc"].GetFields()
	if !attrs["connection.mtls"].GetBoolValue() || attrs["connection.uri_san_peer_certificate"].GetStringValue() != "spiffe://test.example/grpc-go" {
		t.Errorf("request attributes %v, want connection.mtls true and the client's URI SAN", attrs)
	}
}
