package xds_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds"
)

// exampleBootstrap is an xDS bootstrap (gRFC A27) naming the control plane
// at cpAddr.
func exampleBootstrap(cpAddr string) []byte {
	return []byte(`{
		"xds_servers": [{"server_uri": "` + cpAddr + `", "channel_creds": [{"type": "insecure"}]}],
		"node": {"id": "example"},
		"server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s"
	}`)
}

// unusedAddr is a loopback address where nothing listens: the servers of
// the examples that do not need a control plane never get their Listener.
func unusedAddr() string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// exampleListener is the Listener a control plane publishes for an xDS
// server listening on addr: named after the address as the bootstrap's
// template says, one filter chain whose HttpConnectionManager routes every
// RPC to the server's services (non_forwarding_action) with the router
// filter.
func exampleListener(addr *net.TCPAddr) *listenerpb.Listener {
	router, err := anypb.New(&routerpb.Router{})
	if err != nil {
		log.Fatal(err)
	}
	hcm, err := anypb.New(&hcmpb.HttpConnectionManager{
		HttpFilters: []*hcmpb.HttpFilter{{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: router}}},
		RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &routepb.RouteConfiguration{
			VirtualHosts: []*routepb.VirtualHost{{
				Domains: []string{"*"},
				Routes: []*routepb.Route{{
					Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
				}},
			}},
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	return &listenerpb.Listener{
		Name: "grpc/server?xds.resource.listening_address=" + addr.String(),
		Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Address:       addr.IP.String(),
			PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: uint32(addr.Port)},
		}}},
		FilterChains: []*listenerpb.FilterChain{{
			Name:    "all",
			Filters: []*listenerpb.Filter{{Name: "hcm", ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: hcm}}},
		}},
	}
}

// exampleControlPlane serves, over ADS on loopback, a Listener for the xDS
// server listening on serverAddr that lets every RPC through. stop ends it.
func exampleControlPlane(serverAddr *net.TCPAddr) (addr string, stop func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	listeners := cachev3.NewLinearCache(resourcev3.ListenerType)
	l := exampleListener(serverAddr)
	listeners.SetResources(map[string]cachetypes.Resource{l.GetName(): l})
	ctx, cancel := context.WithCancel(context.Background())
	srv := grpc.NewServer()
	discoverypb.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(ctx, listeners, nil))
	served := make(chan struct{})
	go func() {
		srv.Serve(lis)
		close(served)
	}()
	return lis.Addr().String(), func() {
		cancel()
		srv.Stop()
		<-served
	}
}

// A server whose configuration comes from the control plane named by its
// bootstrap. Here the bootstrap is passed in memory; without
// BootstrapContents it is read from the file named by GRPC_XDS_BOOTSTRAP,
// else from GRPC_XDS_BOOTSTRAP_CONFIG.
func ExampleNewGRPCServer() {
	s, err := xds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
		xds.BootstrapContents(exampleBootstrap(unusedAddr())),
	)
	if err != nil {
		log.Fatal(err) // no bootstrap, an invalid one, or no server_listener_resource_name_template
	}
	defer s.Stop()
	testgrpc.RegisterTestServiceServer(s, testgrpc.UnimplementedTestServiceServer{})
	// Then, as with grpc.Server:
	//	lis, err := net.Listen("tcp4", "0.0.0.0:50051") // named 0.0.0.0:50051; "tcp" may report [::]:50051
	//	...
	//	s.Serve(lis)
	for name := range s.GetServiceInfo() {
		fmt.Println("registered:", name)
	}

	_, err = xds.NewGRPCServer(xds.BootstrapContents([]byte(`{"xds_servers": []}`)))
	fmt.Println("a bad bootstrap fails:", err != nil)
	// Output:
	// registered: grpc.testing.TestService
	// a bad bootstrap fails: true
}

// The callback is told of every serving-mode change of a listener: here,
// SERVING once the control plane has sent its Listener.
func ExampleServingModeCallback() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	cpAddr, stopControlPlane := exampleControlPlane(lis.Addr().(*net.TCPAddr))
	defer stopControlPlane()

	serving := make(chan struct{})
	s, err := xds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
		xds.BootstrapContents(exampleBootstrap(cpAddr)),
		xds.ServingModeCallback(func(addr net.Addr, args xds.ServingModeChangeArgs) {
			// args.Err says why the listener is not serving; nil when serving.
			fmt.Printf("listener on 127.0.0.1: %v (err: %v)\n", args.Mode, args.Err)
			if args.Mode == connectivity.ServingModeServing {
				close(serving)
			}
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	go s.Serve(lis)
	defer s.Stop()

	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	select {
	case <-serving:
	case <-timeout.C:
		fmt.Println("not serving after 10 s")
	}
	// Output: listener on 127.0.0.1: SERVING (err: <nil>)
}

// Credentials with which the control plane decides each connection's
// security: TLS or mTLS for a filter chain with a DownstreamTlsContext,
// FallbackCreds (here plaintext) for a chain without transport_socket.
func ExampleNewServerCredentials() {
	creds, err := xds.NewServerCredentials(xds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		log.Fatal(err)
	}
	s, err := xds.NewGRPCServer(grpc.Creds(creds), xds.BootstrapContents(exampleBootstrap(unusedAddr())))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Stop()
	fmt.Println("security protocol:", creds.Info().SecurityProtocol)

	_, err = xds.NewServerCredentials(xds.ServerOptions{})
	fmt.Println("FallbackCreds are required:", err != nil)
	// Output:
	// security protocol: tls
	// FallbackCreds are required: true
}
