package extauthz

// The end-to-end environment: one in-process management server
// (internal/testutils/e2e: go-control-plane), this library's xDS server
// (xds.NewGRPCServer, insecure credentials) on 127.0.0.1 serving grpc-go's
// interop TestService, and a plain grpc-go client. The server's Listener has
// an HttpConnectionManager with the ext_authz filter and the router; the
// filter's authorization server is OPA (opa_test.go), listed in the
// bootstrap's allowed_grpc_services (gRFC A102).

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extauthzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// testTimeout bounds a whole end-to-end test.
const testTimeout = 20 * time.Second

const serverNodeID = "interop-extauthz-server"

// extAuthzFilterName is the HttpFilter's name (any name does; this is
// Envoy's usual one).
const extAuthzFilterName = "envoy.filters.http.ext_authz"

// env is one test's management server, xDS server and client.
type env struct {
	t       *testing.T
	ms      *e2e.ManagementServer
	srv     *xds.GRPCServer
	svc     *testService
	addr    *net.TCPAddr
	modes   chan xds.ServingModeChangeArgs
	serveCh chan error
	client  testgrpc.TestServiceClient
}

// newEnv starts a management server and an xDS server on 127.0.0.1 whose
// bootstrap lists authzTarget in allowed_grpc_services with insecure
// channel credentials. The server serves nothing until publish.
func newEnv(t *testing.T, authzTarget string) *env {
	t.Helper()
	e := &env{
		t:       t,
		ms:      e2e.StartManagementServer(t, e2e.ManagementServerOptions{}),
		svc:     newTestService(),
		modes:   make(chan xds.ServingModeChangeArgs, 100),
		serveCh: make(chan error, 1),
	}
	bootstrap := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{e.ms.Address},
		NodeID:                             serverNodeID,
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		// gRFC A102: the side channel's target, with insecure credentials.
		AllowedGRPCServices: map[string]json.RawMessage{authzTarget: json.RawMessage(`{"channel_creds": [{"type": "insecure"}]}`)},
	})
	var err error
	e.srv, err = xds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
		xds.BootstrapContents(bootstrap),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) { e.modes <- args }),
	)
	if err != nil {
		t.Fatalf("xds.NewGRPCServer: %v", err)
	}
	testgrpc.RegisterTestServiceServer(e.srv, e.svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen: %v", err)
	}
	e.addr = lis.Addr().(*net.TCPAddr)
	go func() { e.serveCh <- e.srv.Serve(lis) }()
	t.Cleanup(e.stop)

	cc, err := grpc.NewClient(e.addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	e.client = testgrpc.NewTestServiceClient(cc)
	return e
}

// stop stops the server and checks that Serve returned nil.
func (e *env) stop() {
	e.srv.Stop()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case err := <-e.serveCh:
		if err != nil {
			e.t.Errorf("Serve returned %v, want nil after Stop", err)
		}
	case <-timer.C:
		e.t.Error("Serve did not return within 10s of Stop")
	}
}

// extAuthzConfig is the filter's config: a google_grpc side channel to
// target with a 2s timeout, and the failure mode.
func extAuthzConfig(target string, failureModeAllow, headerAdd bool) *extauthzpb.ExtAuthz {
	return &extauthzpb.ExtAuthz{
		Services: &extauthzpb.ExtAuthz_GrpcService{GrpcService: &corepb.GrpcService{
			TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{
				TargetUri:  target,
				StatPrefix: "ext_authz", // required by Envoy; ignored by gRPC
			}},
			Timeout: durationpb.New(2 * time.Second),
		}},
		FailureModeAllow:          failureModeAllow,
		FailureModeAllowHeaderAdd: headerAdd,
	}
}

// listener returns the server's Listener: e2e's default one (one filter
// chain, inline routes with a non_forwarding_action) whose
// HttpConnectionManager has http_filters [ext_authz, router].
func (e *env) listener(cfg *extauthzpb.ExtAuthz) *listenerpb.Listener {
	e.t.Helper()
	cfgAny, err := anypb.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return e2e.ServerListenerWithFilters(e.addr.IP.String(), uint32(e.addr.Port), nil,
		&hcmpb.HttpFilter{Name: extAuthzFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: cfgAny}})
}

// publish makes the Listener with cfg the management server's only
// resource, and waits until the server ACKs it and serves. A NACK fails the
// test with the server's error.
func (e *env) publish(ctx context.Context, cfg *extauthzpb.ExtAuthz) {
	e.t.Helper()
	if err := e.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{e.listener(cfg)}}); err != nil {
		e.t.Fatalf("ms.Update: %v", err)
	}
	isACK := e2e.IsACK(resourcev3.ListenerType, strconv.Itoa(1))
	isNACK := e2e.IsNACK(resourcev3.ListenerType)
	r, err := e.ms.WaitForRequest(ctx, func(r *discoverypb.DiscoveryRequest) bool {
		return r.GetNode().GetId() == serverNodeID && (isACK(r) || isNACK(r))
	})
	if err != nil {
		e.t.Fatalf("waiting for the server to answer the Listener: %v", err)
	}
	if isNACK(r) {
		e.t.Fatalf("the server NACKed the Listener with the ext_authz filter: %s", r.GetErrorDetail().GetMessage())
	}
	for {
		select {
		case args := <-e.modes:
			if args.Mode == connectivity.ServingModeServing {
				return
			}
			e.t.Logf("serving mode of %v: %v (%v)", e.addr, args.Mode, args.Err)
		case <-ctx.Done():
			e.t.Fatalf("the server on %v did not become SERVING", e.addr)
		}
	}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// testService is grpc-go's interop TestService: UnaryCall and EmptyCall
// answer at once and hand the request headers their handler saw to seen.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
	seen chan handled
}

// handled is one call that reached a handler.
type handled struct {
	method string
	md     metadata.MD
}

func newTestService() *testService { return &testService{seen: make(chan handled, 100)} }

func (s *testService) record(ctx context.Context, method string) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.seen <- handled{method: method, md: md.Copy()}
}

func (s *testService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.record(ctx, "UnaryCall")
	return &testgrpc.SimpleResponse{}, nil
}

func (s *testService) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.record(ctx, "EmptyCall")
	return &testgrpc.Empty{}, nil
}

// nextHandled returns the next call that reached a handler; the test fails
// if none does before ctx ends.
func (s *testService) nextHandled(ctx context.Context, t *testing.T) handled {
	t.Helper()
	select {
	case h := <-s.seen:
		return h
	case <-ctx.Done():
		t.Fatal("no call reached the handler")
		return handled{}
	}
}

// noneHandled fails the test if a call reached a handler. A handler runs
// before its RPC's status is sent, so after an RPC returned, its handler's
// call is already in seen if there was one.
func (s *testService) noneHandled(t *testing.T) {
	t.Helper()
	select {
	case h := <-s.seen:
		t.Errorf("%s reached its handler (headers %v), want it stopped by ext_authz", h.method, h.md)
	default:
	}
}
