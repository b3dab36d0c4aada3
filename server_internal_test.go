package xds

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/xdsclient"
)

// testEnv is one GRPCServer serving one loopback listener, configured by a
// real management server.
type testEnv struct {
	mgmt  *e2e.ManagementServer
	srv   *GRPCServer
	lw    *listenerWrapper
	host  string
	port  uint32
	modes chan ServingModeChangeArgs
	svc   blockingService
}

// newTestEnv starts a management server and a GRPCServer listening on
// 127.0.0.1:0, with a short does-not-exist timer. Everything is stopped at
// cleanup.
func newTestEnv(t *testing.T, opts ...grpc.ServerOption) *testEnv {
	t.Helper()
	return newTestEnvWith(t, blockingService{started: make(chan struct{}, 100)}, opts...)
}

// newTestEnvWith is newTestEnv serving svc.
func newTestEnvWith(t *testing.T, svc blockingService, opts ...grpc.ServerOption) *testEnv {
	t.Helper()
	env := &testEnv{mgmt: e2e.StartManagementServer(t, e2e.ManagementServerOptions{}), modes: make(chan ServingModeChangeArgs, 100)}
	bs := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{env.mgmt.Address},
		NodeID:                             "node-" + t.Name(),
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
	})
	opts = append([]grpc.ServerOption{
		BootstrapContents(bs),
		ClientPool(xdsclient.NewPool(xdsclient.Options{WatchExpiryTimeout: 500 * time.Millisecond})),
		ServingModeCallback(func(_ net.Addr, a ServingModeChangeArgs) { env.modes <- a }),
	}, opts...)
	s, err := NewGRPCServer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	env.srv = s
	env.svc = svc
	testgrpc.RegisterTestServiceServer(s, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := lis.Addr().(*net.TCPAddr).AddrPort()
	env.host, env.port = ap.Addr().String(), uint32(ap.Port())
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-serveErr; err != nil {
			t.Errorf("Serve returned %v after Stop, want nil", err)
		}
	})
	deadline := time.Now().Add(defaultTestTimeout)
	for env.lw == nil {
		s.mu.Lock()
		for lw := range s.lis {
			env.lw = lw
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("Serve did not start")
		}
		time.Sleep(time.Millisecond)
	}
	return env
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitMode waits for the next serving-mode callback and checks its mode.
func (env *testEnv) waitMode(ctx context.Context, t *testing.T, want connectivity.ServingMode) ServingModeChangeArgs {
	t.Helper()
	select {
	case a := <-env.modes:
		if a.Mode != want {
			t.Fatalf("serving mode = %v (err %v), want %v", a.Mode, a.Err, want)
		}
		return a
	case <-ctx.Done():
		t.Fatalf("no serving mode change to %v", want)
	}
	return ServingModeChangeArgs{}
}

// update pushes l and waits until the listener has applied a new
// configuration (the active pointer changed).
func (env *testEnv) update(ctx context.Context, t *testing.T, l *listenerpb.Listener) *activeConfig {
	t.Helper()
	old := env.lw.active.Load()
	if err := env.mgmt.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{l}}); err != nil {
		t.Fatal(err)
	}
	for {
		if cfg := env.lw.active.Load(); cfg != nil && cfg != old {
			return cfg
		}
		if ctx.Err() != nil {
			t.Fatal("the listener did not apply the update")
		}
		time.Sleep(time.Millisecond)
	}
}

// chainSpec describes one filter chain of testListener.
type chainSpec struct {
	name      string
	srcPrefix string // "" for none
	routeName string // inline route_config name; part of the chain's ID
	isDefault bool
}

func testListener(env *testEnv, chains ...chainSpec) *listenerpb.Listener {
	l := e2e.DefaultServerListener(env.host, env.port, "")
	l.FilterChains = nil
	for _, c := range chains {
		hcm := &hcmpb.HttpConnectionManager{
			StatPrefix:     "t",
			HttpFilters:    []*hcmpb.HttpFilter{e2e.RouterHTTPFilter()},
			RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: e2e.DefaultRouteConfig(c.routeName)},
		}
		fc := &listenerpb.FilterChain{
			Name:    c.name,
			Filters: []*listenerpb.Filter{{Name: e2e.HCMFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)}}},
		}
		if c.srcPrefix != "" {
			ip, bits, _ := strings.Cut(c.srcPrefix, "/")
			n, _ := strconv.Atoi(bits)
			fc.FilterChainMatch = &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{{AddressPrefix: ip, PrefixLen: wrapperspb.UInt32(uint32(n))}}}
		}
		if c.isDefault {
			l.DefaultFilterChain = fc
		} else {
			l.FilterChains = append(l.FilterChains, fc)
		}
	}
	return l
}

// serverNamed returns the chainServer of the chain called name in cfg.
func serverNamed(t *testing.T, cfg *activeConfig, name string) *chainServer {
	t.Helper()
	for fc, cs := range cfg.servers {
		if fc.Name == name {
			return cs
		}
	}
	t.Fatalf("no filter chain %q in the active configuration", name)
	return nil
}

// snapshot returns cs's connections that are not draining, and whether cs
// is retired.
func (cs *chainServer) snapshot() (conns []*trackedConn, retired bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for c := range cs.conns {
		if !c.draining {
			conns = append(conns, c)
		}
	}
	return conns, cs.retired
}

func (c *trackedConn) isDraining() bool {
	c.cs.mu.Lock()
	defer c.cs.mu.Unlock()
	return c.draining
}

func (env *testEnv) dial(t *testing.T) testgrpc.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(net.JoinHostPort(env.host, strconv.Itoa(int(env.port))), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

func unaryOK(ctx context.Context, t *testing.T, c testgrpc.TestServiceClient) {
	t.Helper()
	if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("UnaryCall: %v", err)
	}
}

// TestReuseDecision drives the reuse rule through real Listener updates: a
// chain whose ID is unchanged keeps its chainServer and connections, except
// the connections the new table routes to another chain, which are drained;
// a chain whose ID changed is retired and all its connections drained.
func TestReuseDecision(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t)
	a := chainSpec{name: "a", srcPrefix: "127.0.0.0/8", routeName: "route-a"}
	def := chainSpec{name: "def", routeName: "route-def", isDefault: true}
	cfg := env.update(ctx, t, testListener(env, a, def))
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	client := env.dial(t)
	unaryOK(ctx, t, client)
	csA := serverNamed(t, cfg, "a")
	conns, _ := csA.snapshot()
	if len(conns) != 1 {
		t.Fatalf("chain a has %d connections, want 1", len(conns))
	}

	// Only the default chain changes: chain a and its connection stay.
	def.routeName = "route-def-2"
	cfg = env.update(ctx, t, testListener(env, a, def))
	if got := serverNamed(t, cfg, "a"); got != csA {
		t.Fatal("chain a got a new chainServer although its ID and routing did not change")
	}
	if got, draining := csA.snapshot(); draining || len(got) != 1 || got[0] != conns[0] {
		t.Fatalf("chain a after an unrelated update: draining %v, connections %v, want the same one connection", draining, got)
	}
	unaryOK(ctx, t, client)
	if got, _ := csA.snapshot(); len(got) != 1 || got[0] != conns[0] {
		t.Fatal("the RPC after an unrelated update did not use the same connection")
	}

	// A more specific chain now takes chain a's connection: chain a stays,
	// that connection is drained.
	c := chainSpec{name: "c", srcPrefix: "127.0.0.1/32", routeName: "route-c"}
	cfg = env.update(ctx, t, testListener(env, a, c, def))
	if serverNamed(t, cfg, "a") != csA {
		t.Fatal("chain a got a new chainServer although its ID did not change")
	}
	if !conns[0].isDraining() {
		t.Fatal("the connection rerouted to chain c is not draining")
	}
	// The client reconnects, to chain c, once the GOAWAY arrives.
	csC := serverNamed(t, cfg, "c")
	for {
		unaryOK(ctx, t, client)
		if conns, _ := csC.snapshot(); len(conns) == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the client did not reconnect to chain c")
		}
		time.Sleep(time.Millisecond)
	}

	// Chain c changes (its routes are part of its ID): retired, drained.
	cConns, _ := csC.snapshot()
	c.routeName = "route-c-2"
	cfg = env.update(ctx, t, testListener(env, a, c, def))
	if serverNamed(t, cfg, "c") == csC {
		t.Fatal("chain c kept its chainServer although its content changed")
	}
	if _, retired := csC.snapshot(); !retired || !cConns[0].isDraining() {
		t.Fatal("the old chain c is not retired with its connection draining")
	}
	unaryOK(ctx, t, client)
}

// TestNotServingAndBack: a Listener that does not exist, then one with the
// wrong address, then a good one, then its deletion; each transition is
// reported once, and not serving closes connections without a byte.
func TestNotServingAndBack(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t)
	a := env.waitMode(ctx, t, connectivity.ServingModeNotServing)
	if !errors.Is(a.Err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("not serving error = %v, want does-not-exist", a.Err)
	}
	expectClosedWithoutBytes(t, env)

	wrong := testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true})
	wrong.Address.GetSocketAddress().PortSpecifier = &corepb.SocketAddress_PortValue{PortValue: env.port + 1}
	if err := env.mgmt.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{wrong}}); err != nil {
		t.Fatal(err)
	}
	good := testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true})
	env.update(ctx, t, good)
	env.waitMode(ctx, t, connectivity.ServingModeServing) // mismatch while not serving: no extra call
	unaryOK(ctx, t, env.dial(t))

	if err := env.mgmt.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{}}); err != nil {
		t.Fatal(err)
	}
	env.waitMode(ctx, t, connectivity.ServingModeNotServing)
	if env.lw.active.Load() != nil {
		t.Error("active configuration kept after the Listener was deleted")
	}
	expectClosedWithoutBytes(t, env)
	select {
	case a := <-env.modes:
		t.Fatalf("unexpected serving mode change %v", a)
	case <-time.After(100 * time.Millisecond):
	}
}

func expectClosedWithoutBytes(t *testing.T, env *testEnv) {
	t.Helper()
	c, err := net.Dial("tcp", net.JoinHostPort(env.host, strconv.Itoa(int(env.port))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(defaultTestTimeout))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read from a not-serving listener: %d bytes, err %v; want 0 bytes and the connection closed", n, err)
	}
}

// TestRDSNotFoundThenPublished: a Listener whose RDS resource does not exist
// applies when the does-not-exist timer fires; RPCs fail UNAVAILABLE naming
// the resource, then succeed on the same connection once it is published.
func TestRDSNotFoundThenPublished(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t)
	if err := env.mgmt.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{e2e.DefaultServerListener(env.host, env.port, "rds-1")}}); err != nil {
		t.Fatal(err)
	}
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	client := env.dial(t)
	_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), `"rds-1"`) {
		t.Fatalf("UnaryCall = %v, want UNAVAILABLE naming rds-1", err)
	}
	cs := serverNamed(t, env.lw.active.Load(), "filter-chain-1")
	conns, _ := cs.snapshot()
	if err := env.mgmt.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{e2e.DefaultRouteConfig("rds-1")}}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("RPCs still fail after the RouteConfiguration was published")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got, draining := cs.snapshot(); draining || len(got) != 1 || got[0] != conns[0] {
		t.Fatal("an RDS update changed the connection")
	}
}

// TestStopLeavesNothing: after Stop, no chainServer, goroutine or watch of
// the listener is left, and Serve after Stop fails.
func TestStopLeavesNothing(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, DrainJitter(time.Hour))
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true}))
	unaryOK(ctx, t, env.dial(t))
	// Drain with a long jitter; Stop must not wait for it.
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r2", isDefault: true}))
	done := make(chan struct{})
	go func() { env.srv.Stop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Stop did not return")
	}
	env.lw.mu.Lock()
	n := len(env.lw.servers)
	env.lw.mu.Unlock()
	if n != 0 {
		t.Errorf("%d chainServers left after Stop", n)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.srv.Serve(lis); err != grpc.ErrServerStopped {
		t.Errorf("Serve after Stop = %v, want grpc.ErrServerStopped", err)
	}
}

func TestNewGRPCServerErrors(t *testing.T) {
	mgmtAddr := "127.0.0.1:1"
	good := e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{mgmtAddr}, ServerListenerResourceNameTemplate: "%s"})
	nop := func(ctx context.Context, _ *tap.Info) (context.Context, error) { return ctx, nil }
	tests := []struct {
		desc string
		opts []grpc.ServerOption
		want string
	}{
		{desc: "no bootstrap", opts: nil, want: "no xDS bootstrap"},
		{desc: "invalid bootstrap", opts: []grpc.ServerOption{BootstrapContents([]byte("{"))}, want: "bootstrap"},
		{desc: "no template", opts: []grpc.ServerOption{BootstrapContents(e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{mgmtAddr}}))}, want: "server_listener_resource_name_template"},
		{desc: "xdstp unknown authority", opts: []grpc.ServerOption{BootstrapContents(e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{mgmtAddr}, ServerListenerResourceNameTemplate: "xdstp://other/envoy.config.listener.v3.Listener/%s"}))}, want: `authority "other"`},
		{desc: "tap handle", opts: []grpc.ServerOption{BootstrapContents(good), grpc.InTapHandle(nop)}, want: "InTapHandle"},
		{desc: "negative grace", opts: []grpc.ServerOption{BootstrapContents(good), DrainGraceTime(-time.Second)}, want: "DrainGraceTime"},
	}
	t.Setenv("GRPC_XDS_BOOTSTRAP", "")
	t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", "")
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := NewGRPCServer(tc.opts...)
			if err == nil {
				s.Stop()
				t.Fatal("NewGRPCServer succeeded, want an error")
			}
			if !strings.HasPrefix(err.Error(), "xds: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewGRPCServer error = %q, want an \"xds: \" error mentioning %q", err, tc.want)
			}
		})
	}

	// The xdstp authority listed in the bootstrap is fine.
	bs := e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{mgmtAddr}, ServerListenerResourceNameTemplate: "xdstp://auth/envoy.config.listener.v3.Listener/%s",
		Authorities: map[string]e2e.AuthorityOptions{"auth": {}}})
	s, err := NewGRPCServer(BootstrapContents(bs))
	if err != nil {
		t.Fatalf("NewGRPCServer with a listed xdstp authority: %v", err)
	}
	s.Stop()
}

// TestRegisterAfterServeIgnored: RegisterService after Serve is ignored, and
// GetServiceInfo lists what was registered before.
func TestRegisterAfterServeIgnored(t *testing.T) {
	env := newTestEnv(t)
	var once sync.Once
	once.Do(func() {
		env.srv.RegisterService(&grpc.ServiceDesc{ServiceName: "late.Service", HandlerType: (*any)(nil)}, nil)
	})
	info := env.srv.GetServiceInfo()
	if _, ok := info["late.Service"]; ok {
		t.Error("a service registered after Serve is listed")
	}
	if _, ok := info["grpc.testing.TestService"]; !ok {
		t.Errorf("GetServiceInfo = %v, want grpc.testing.TestService", info)
	}
}

// blockingService holds every FullDuplexCall open until its client or the
// server ends it.
type blockingService struct {
	testService
	started chan struct{}
}

func (s blockingService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	s.started <- struct{}{}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// TestStopCutsDrainShort: Stop during a drain with a long grace time closes
// the draining connection at once and fails its stream.
func TestStopCutsDrainShort(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnvWith(t, blockingService{started: make(chan struct{}, 1)}, DrainGraceTime(time.Hour))
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true}))
	stream, err := env.dial(t).FullDuplexCall(ctx, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	<-env.svc.started
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r2", isDefault: true}))
	done := make(chan struct{})
	go func() { env.srv.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop waited for a draining connection's grace time")
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Errorf("stream after Stop: %v, want it failed", err)
	}
}
