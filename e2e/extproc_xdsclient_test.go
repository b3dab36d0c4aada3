package e2e_test

import (
	"encoding/json"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/extprocserver"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
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

	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "grpc-go-client", URIs: []string{"spiffe://test.example/grpc-go"}})
	files := testcerts.WriteFiles(t, t.TempDir(), client, pki.ca.PEM)
	clientBootstrap := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs: []string{env.ms.Address},
		NodeID:     env.nodeID + "-client",
		CertificateProviders: map[string]json.RawMessage{
			"client-identity": fileWatcher(map[string]string{"certificate_file": files.Cert, "private_key_file": files.Key, "refresh_interval": "600s"}, 0),
			"client-roots":    fileWatcher(map[string]string{"ca_certificate_file": files.CA, "refresh_interval": "600s"}, 0),
		},
	})
	host, port := hostPort(addr)
	if err := env.ms.Update(ctx, e2e.Resources{
		Listeners: []*listenerpb.Listener{serverListener, clientAPIListener(t)},
		Clusters:  []*clusterpb.Cluster{tlsCluster(t, "client-identity", "client-roots")},
		Raw:       map[string][]proto.Message{resourcev3.EndpointType: {endpoints(host, port)}},
	}); err != nil {
		t.Fatalf("ms.Update: %v", err)
	}
	s.serveOn(lis)

	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting(clientBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+interopTarget, grpc.WithTransportCredentials(creds), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
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
