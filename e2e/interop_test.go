package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	grpcxds "google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// Names of the client-side resources of the interop test.
const (
	interopTarget  = "interop.test" // the client's Listener (api_listener)
	interopCluster = "interop-cluster"
	interopEDS     = "interop-eds"
)

// TestCredsInteropWithGRPCGoClient: grpc-go's own client-side xDS
// credentials (a client this project did not write), given their security
// configuration by the same management server over an xds:/// target, do
// mTLS with this server's xDS credentials. The server's chain requires a
// client certificate; the client's Cluster carries an UpstreamTlsContext.
// Each side gets its certificates from file_watcher providers of its own
// bootstrap.
func TestCredsInteropWithGRPCGoClient(t *testing.T) {
	// Registered first, so it runs last: grpc-go's ClientConn.Close returns
	// before its xDS client's goroutines have exited, and one of them may
	// still log; later tests that install their own gRPC logger must not
	// race with it.
	t.Cleanup(func() { waitForGoroutinesGone(t, "google.golang.org/grpc/internal/xds/", 5*time.Second) })
	ctx := testContext(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	peers := newPeerRecorder()
	lis, _ := listen(t, "127.0.0.1")
	addr := lis.Addr()
	serverListener := withTransportSocket(t, simpleListener(addr), "A", downstreamTLS(true, true))
	s := env.newServer(t, xdsCreds(t), peers.option())

	s.serveOn(lis)
	cc, client := grpcGoXDSClient(ctx, t, env, pki, serverListener, addr)

	var p peer.Peer
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{}, grpc.WaitForReady(true), grpc.Peer(&p)); err != nil {
		t.Fatalf("EmptyCall through grpc-go's xDS client: %v", err)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		t.Fatalf("client-side AuthInfo = %v, want TLS", p.AuthInfo)
	}
	if got, want := info.State.PeerCertificates[0].SerialNumber, pki.server.Cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("grpc-go client saw server certificate %v, want %v (the server provider's)", got, want)
	}
	sinfo, ok := peers.next(ctx, t).AuthInfo.(credentials.TLSInfo)
	if !ok || len(sinfo.State.PeerCertificates) == 0 {
		t.Fatal("server-side AuthInfo has no client certificate")
	}
	if got, want := sinfo.State.PeerCertificates[0].SerialNumber, client.Cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("server saw client certificate %v, want %v (the grpc-go client provider's)", got, want)
	}
	if sinfo.SPIFFEID.String() != "spiffe://test.example/grpc-go" {
		t.Errorf("server-side SPIFFEID = %v, want spiffe://test.example/grpc-go", sinfo.SPIFFEID)
	}
}

// grpcGoXDSClient returns grpc-go's own client of xds:///interopTarget,
// with grpc-go's xDS credentials, and the certificate it presents: env's
// management server gets the server's Listener serverListener, the
// client's Listener, an mTLS Cluster whose certificates come from
// file_watcher providers of the client's own bootstrap, and the endpoint
// addr. The client is closed when the test ends.
func grpcGoXDSClient(ctx context.Context, t *testing.T, env *testEnv, pki *testPKI, serverListener *listenerpb.Listener, addr net.Addr) (*grpc.ClientConn, *testcerts.Leaf) {
	t.Helper()
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
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting(clientBootstrap)
	if err != nil {
		t.Fatalf("grpc-go NewXDSResolverWithConfigForTesting: %v", err)
	}
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatalf("grpc-go NewClientCredentials: %v", err)
	}
	cc, err := grpc.NewClient("xds:///"+interopTarget, grpc.WithTransportCredentials(creds), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatalf("grpc.NewClient(xds:///%s): %v", interopTarget, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, client
}

// clientAPIListener is the client's Listener: an api_listener whose inline
// routes send everything to interopCluster.
func clientAPIListener(t *testing.T) *listenerpb.Listener {
	t.Helper()
	hcm := &hcmpb.HttpConnectionManager{
		HttpFilters: []*hcmpb.HttpFilter{e2e.RouterHTTPFilter()},
		RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &routepb.RouteConfiguration{
			Name: "interop-routes",
			VirtualHosts: []*routepb.VirtualHost{{
				Name:    "all",
				Domains: []string{"*"},
				Routes:  []*routepb.Route{clientRouteTo(interopCluster)},
			}},
		}},
	}
	return &listenerpb.Listener{
		Name:        interopTarget,
		ApiListener: &listenerpb.ApiListener{ApiListener: e2e.HCMAny(hcm)},
	}
}

func clientRouteTo(cluster string) *routepb.Route {
	return &routepb.Route{
		Match: prefixMatch("/"),
		Action: &routepb.Route_Route{Route: &routepb.RouteAction{
			ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: cluster},
		}},
	}
}

// tlsCluster is an EDS Cluster whose connections use mTLS with the client's
// certificate provider instances (an UpstreamTlsContext, gRFC A29).
func tlsCluster(t *testing.T, identity, roots string) *clusterpb.Cluster {
	t.Helper()
	utc, err := anypb.New(&tlspb.UpstreamTlsContext{CommonTlsContext: &tlspb.CommonTlsContext{
		TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: identity},
		ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
			CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: roots},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &clusterpb.Cluster{
		Name:                 interopCluster,
		ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_EDS},
		EdsClusterConfig: &clusterpb.Cluster_EdsClusterConfig{
			ServiceName: interopEDS,
			EdsConfig:   &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}},
		},
		LbPolicy: clusterpb.Cluster_ROUND_ROBIN,
		TransportSocket: &corepb.TransportSocket{
			Name:       "envoy.transport_sockets.tls",
			ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: utc},
		},
	}
}

// endpoints is the ClusterLoadAssignment of interopEDS: the server.
func endpoints(host string, port uint32) *endpointpb.ClusterLoadAssignment {
	return &endpointpb.ClusterLoadAssignment{
		ClusterName: interopEDS,
		Endpoints: []*endpointpb.LocalityLbEndpoints{{
			Locality:            &corepb.Locality{Region: "r", Zone: "z"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointpb.LbEndpoint{{
				HostIdentifier: &endpointpb.LbEndpoint_Endpoint{Endpoint: &endpointpb.Endpoint{
					Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
						Protocol:      corepb.SocketAddress_TCP,
						Address:       host,
						PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: port},
					}}},
				}},
			}},
		}},
	}
}

// waitForGoroutinesGone waits, at most d, until no goroutine has a frame of
// a function whose name starts with prefix, and fails t if one remains.
func waitForGoroutinesGone(t *testing.T, prefix string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	buf := make([]byte, 1<<20)
	testutils.WaitFor(ctx, t, "the goroutines of "+prefix+" to end", func() error {
		if n := runtime.Stack(buf, true); strings.Contains(string(buf[:n]), prefix) {
			return errors.New("still running")
		}
		return nil
	})
}
