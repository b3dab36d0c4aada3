package ratelimit

// The end-to-end environment: one in-process management server
// (internal/testutils/e2e: go-control-plane) and three xDS servers of this
// library (xds.NewGRPCServer, insecure credentials) on 127.0.0.1, each
// serving grpc-go's interop TestService behind a Listener whose
// HttpConnectionManager runs the global rate limit filter and the router.
// The filter's Rate Limit Service is envoyproxy/ratelimit (procs_test.go),
// listed in the bootstrap's allowed_grpc_services (gRFC A102).

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rlconfpb "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// testTimeout bounds a whole test.
const testTimeout = 30 * time.Second

const serverNodeID = "interop-ratelimit-server"

// filterName is the HttpFilter's name (Envoy's usual one).
const filterName = "envoy.filters.http.ratelimit"

// domain is the rate limit domain of the tests' configs.
const domain = "interop"

// env is one test's management server and xDS servers.
type env struct {
	t       *testing.T
	ms      *e2e.ManagementServer
	servers []*server
	version int
}

// server is one xDS server and what it served.
type server struct {
	node    string
	srv     *xds.GRPCServer
	addr    *net.TCPAddr
	modes   chan xds.ServingModeChangeArgs
	serveCh chan error
}

// newEnv starts a management server and n xDS servers on 127.0.0.1 whose
// bootstrap lists rlsTarget in allowed_grpc_services with insecure channel
// credentials. The servers serve nothing until publish.
func newEnv(t *testing.T, n int, rlsTarget string) *env {
	t.Helper()
	e := &env{t: t, ms: e2e.StartManagementServer(t, e2e.ManagementServerOptions{})}
	for i := range n {
		s := &server{node: serverNodeID + "-" + strconv.Itoa(i), modes: make(chan xds.ServingModeChangeArgs, 100), serveCh: make(chan error, 1)}
		// A node of its own per server, so that each one's ACK is seen.
		bootstrap := e2e.Bootstrap(t, e2e.BootstrapOptions{
			ServerURIs:                         []string{e.ms.Address},
			NodeID:                             s.node,
			ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
			// gRFC A102: the side channel's target, with insecure credentials.
			AllowedGRPCServices: map[string]json.RawMessage{rlsTarget: json.RawMessage(`{"channel_creds": [{"type": "insecure"}]}`)},
		})
		var err error
		s.srv, err = xds.NewGRPCServer(
			grpc.Creds(insecure.NewCredentials()),
			xds.BootstrapContents(bootstrap),
			xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) { s.modes <- args }),
		)
		if err != nil {
			t.Fatalf("xds.NewGRPCServer: %v", err)
		}
		testgrpc.RegisterTestServiceServer(s.srv, testutils.TestService{})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("net.Listen: %v", err)
		}
		s.addr = lis.Addr().(*net.TCPAddr)
		go func() { s.serveCh <- s.srv.Serve(lis) }()
		t.Cleanup(func() { s.stop(t) })
		e.servers = append(e.servers, s)
	}
	return e
}

// stop stops the server and checks that Serve returned nil.
func (s *server) stop(t *testing.T) {
	s.srv.Stop()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case err := <-s.serveCh:
		if err != nil {
			t.Errorf("Serve returned %v, want nil after Stop", err)
		}
	case <-timer.C:
		t.Error("Serve did not return within 10s of Stop")
	}
}

// filterConfig is the filter's config: domain "interop", the service at
// target with timeout, and the failure mode.
func filterConfig(target string, timeout time.Duration, failureModeDeny bool) *rlpb.RateLimit {
	return &rlpb.RateLimit{
		Domain:          domain,
		Timeout:         durationpb.New(timeout),
		FailureModeDeny: failureModeDeny,
		RateLimitService: &rlconfpb.RateLimitServiceConfig{
			TransportApiVersion: corepb.ApiVersion_V3,
			GrpcService: &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{
				TargetUri: target, StatPrefix: "ratelimit", // required by Envoy; ignored by gRPC
			}}},
		},
	}
}

// Actions of the tests' rate limits.
func headerAction(name, key string) *routepb.RateLimit_Action {
	return &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_RequestHeaders_{RequestHeaders: &routepb.RateLimit_Action_RequestHeaders{HeaderName: name, DescriptorKey: key}}}
}

func genericAction(value string) *routepb.RateLimit_Action {
	return &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_GenericKey_{GenericKey: &routepb.RateLimit_Action_GenericKey{DescriptorValue: value}}}
}

var remoteAction = &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_RemoteAddress_{RemoteAddress: &routepb.RateLimit_Action_RemoteAddress{}}}

// routes is the tests' RouteConfiguration. gRPC server routes have no
// RouteAction, so rate limits come from RateLimitPerRoute or the virtual
// host: EmptyCall with x-kind: fleet has the virtual host's (one generic
// key, shared by every caller), other EmptyCalls are limited per x-tenant
// header, UnaryCalls per peer address, and anything else ignores the
// virtual host's (vh_rate_limits IGNORE).
func routes(t *testing.T) *routepb.RouteConfiguration {
	t.Helper()
	route := func(method string, pr *rlpb.RateLimitPerRoute) *routepb.Route {
		r := &routepb.Route{
			Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: "/grpc.testing.TestService/" + method}},
			Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
		}
		if pr != nil {
			a, err := anypb.New(pr)
			if err != nil {
				t.Fatal(err)
			}
			r.TypedPerFilterConfig = map[string]*anypb.Any{filterName: a}
		}
		return r
	}
	own := func(actions ...*routepb.RateLimit_Action) *rlpb.RateLimitPerRoute {
		return &rlpb.RateLimitPerRoute{RateLimits: []*routepb.RateLimit{{Actions: actions}}}
	}
	fleet := route("EmptyCall", nil)
	fleet.Match.Headers = []*routepb.HeaderMatcher{{Name: "x-kind", HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: "fleet"}}}
	rest := route("", &rlpb.RateLimitPerRoute{VhRateLimits: rlpb.RateLimitPerRoute_IGNORE})
	rest.Match = &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}}
	return &routepb.RouteConfiguration{
		Name: "interop-routes",
		VirtualHosts: []*routepb.VirtualHost{{
			Name:       "all",
			Domains:    []string{"*"},
			RateLimits: []*routepb.RateLimit{{Actions: []*routepb.RateLimit_Action{genericAction("fleet")}}},
			Routes: []*routepb.Route{
				fleet,
				route("EmptyCall", own(headerAction("x-tenant", "tenant"))),
				route("UnaryCall", own(remoteAction)),
				rest,
			},
		}},
	}
}

// listener returns s's Listener: one filter chain whose
// HttpConnectionManager has http_filters [ratelimit, router] and routes
// inline.
func (e *env) listener(s *server, cfg *rlpb.RateLimit) *listenerpb.Listener {
	e.t.Helper()
	cfgAny, err := anypb.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return e2e.ServerListenerWithFilters(s.addr.IP.String(), uint32(s.addr.Port), routes(e.t),
		&hcmpb.HttpFilter{Name: filterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: cfgAny}})
}

// publish makes the Listeners of the servers, the i-th with cfg(i), the
// management server's resources, and waits until every server ACKs and,
// the first time, serves. A NACK fails the test.
func (e *env) publish(ctx context.Context, cfg func(i int) *rlpb.RateLimit) {
	e.t.Helper()
	var ls []*listenerpb.Listener
	for i, s := range e.servers {
		ls = append(ls, e.listener(s, cfg(i)))
	}
	seen := len(e.ms.Requests())
	if err := e.ms.Update(ctx, e2e.Resources{Listeners: ls}); err != nil {
		e.t.Fatalf("ms.Update: %v", err)
	}
	e.version++
	isNACK := e2e.IsNACK(resourcev3.ListenerType)
	isACK := e2e.IsACK(resourcev3.ListenerType, strconv.Itoa(e.version))
	for _, s := range e.servers {
		skip := seen
		r, err := e.ms.WaitForRequest(ctx, func(r *discoverypb.DiscoveryRequest) bool {
			if skip > 0 {
				skip--
				return false
			}
			return r.GetNode().GetId() == s.node && (isACK(r) || isNACK(r))
		})
		if err != nil {
			e.t.Fatalf("waiting for %s to answer the Listeners: %v", s.node, err)
		}
		if isNACK(r) {
			e.t.Fatalf("%s NACKed its Listener: %s", s.node, r.GetErrorDetail().GetMessage())
		}
		if e.version > 1 {
			continue
		}
		for serving := false; !serving; {
			select {
			case args := <-s.modes:
				serving = args.Mode == connectivity.ServingModeServing
			case <-ctx.Done():
				e.t.Fatalf("the server on %v did not become SERVING", s.addr)
			}
		}
	}
}

// client returns a client of s whose connections come from srcIP (a
// loopback address: 127.0.0.0/8 is all loopback on Linux).
func client(t *testing.T, s *server, srcIP string) testgrpc.TestServiceClient {
	t.Helper()
	local := net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(srcIP), 0))
	cc, err := grpc.NewClient(s.addr.String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, target string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: local}
			return d.DialContext(ctx, "tcp", target)
		}))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}
