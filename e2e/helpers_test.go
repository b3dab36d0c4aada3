package e2e_test

// Shared helpers of the end-to-end tests of package xds: a real management
// server (e2e.StartManagementServer), a real xds.GRPCServer serving the
// grpc.testing.TestService on 127.0.0.x, real grpc-go clients.
//
// Every filter chain the tests build carries its own inline
// RouteConfiguration that lets an RPC with the metadata "x-chain: <its name>"
// through and refuses one with any other "x-chain" value (a `route` action,
// which an xDS server answers with UNAVAILABLE). chainOf uses that to tell
// which filter chain serves a connection.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

const (
	defaultTestTimeout      = testutils.DefaultTimeout
	defaultTestShortTimeout = 300 * time.Millisecond

	methodEmpty  = "/grpc.testing.TestService/EmptyCall"
	methodUnary  = "/grpc.testing.TestService/UnaryCall"
	methodStream = "/grpc.testing.TestService/FullDuplexCall"

	chainHeader = "x-chain"
)

// testContext is testutils.Context, under the name this package's many
// tests already use.
func testContext(t *testing.T) context.Context {
	t.Helper()
	return testutils.Context(t)
}

// testService is the grpc.testing.TestService of every test server.
type testService = testutils.TestService

// --- management server and xDS server ---

// testEnv is one management server and the bootstrap that points at it.
type testEnv struct {
	ms        *e2e.ManagementServer
	nodeID    string
	bootstrap []byte
}

func newTestEnv(t *testing.T) *testEnv {
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
		}),
	}
}

// update pushes listeners (and routes, if not nil) as the whole state of the
// management server for those types.
func (e *testEnv) update(ctx context.Context, t *testing.T, listeners []*listenerpb.Listener, routes []*routepb.RouteConfiguration) {
	t.Helper()
	if listeners == nil {
		listeners = []*listenerpb.Listener{}
	}
	if err := e.ms.Update(ctx, e2e.Resources{Listeners: listeners, Routes: routes}); err != nil {
		t.Fatalf("ms.Update: %v", err)
	}
}

// testServer is an xds.GRPCServer serving testService, stopped at cleanup;
// the cleanup checks that every Serve returned nil.
type testServer struct {
	*xds.GRPCServer
	t     *testing.T
	modes *modeRecorder

	mu    sync.Mutex
	serve []chan error
	lis   []net.Listener
}

// newServer creates a server for env's bootstrap with a serving-mode
// recorder and opts (later options win).
func (e *testEnv) newServer(t *testing.T, opts ...grpc.ServerOption) *testServer {
	t.Helper()
	modes := newModeRecorder()
	all := append([]grpc.ServerOption{xds.BootstrapContents(e.bootstrap), modes.option()}, opts...)
	s, err := xds.NewGRPCServer(all...)
	if err != nil {
		t.Fatalf("xds.NewGRPCServer: %v", err)
	}
	testgrpc.RegisterTestServiceServer(s, testService{})
	ts := &testServer{GRPCServer: s, t: t, modes: modes}
	t.Cleanup(ts.stopAndWait)
	return ts
}

// serveOn starts Serve(lis) in a goroutine.
func (s *testServer) serveOn(lis net.Listener) {
	done := make(chan error, 1)
	s.mu.Lock()
	s.serve = append(s.serve, done)
	s.lis = append(s.lis, lis)
	s.mu.Unlock()
	go func() { done <- s.Serve(lis) }()
}

// stopAndWait stops the server and checks that every Serve returned nil.
func (s *testServer) stopAndWait() {
	s.t.Helper()
	s.Stop()
	s.waitServeReturned(nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, lis := range s.lis {
		lis.Close()
	}
}

// waitServeReturned waits for every Serve to return and checks its error.
func (s *testServer) waitServeReturned(want error) {
	s.t.Helper()
	s.mu.Lock()
	serves := s.serve
	s.serve = nil
	s.mu.Unlock()
	timer := time.NewTimer(defaultTestTimeout)
	defer timer.Stop()
	for _, done := range serves {
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				s.t.Errorf("Serve returned %v, want %v", err, want)
			}
		case <-timer.C:
			s.t.Errorf("Serve did not return within %v of Stop", defaultTestTimeout)
			return
		}
	}
}

// listen listens on ip:0 and returns the listener and its port. Closing it
// is up to Serve (Stop closes it) or the caller.
func listen(t *testing.T, ip string) (net.Listener, uint32) {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("net.Listen(%q): %v", ip, err)
	}
	return lis, uint32(lis.Addr().(*net.TCPAddr).Port)
}

// --- serving modes ---

// modeRecorder records the serving-mode callbacks, per listener address.
type modeRecorder struct {
	mu    sync.Mutex
	chs   map[string]chan xds.ServingModeChangeArgs
	holds map[string]*modeHold // by address; set by holdNext, removed by releaseHold
}

// modeHold is a callback held back by holdNext until release is closed.
type modeHold struct {
	mode    connectivity.ServingMode
	taken   bool // a callback waits for release; guarded by modeRecorder.mu
	release chan struct{}
	once    sync.Once
}

func (h *modeHold) open() { h.once.Do(func() { close(h.release) }) }

func newModeRecorder() *modeRecorder {
	return &modeRecorder{chs: make(map[string]chan xds.ServingModeChangeArgs), holds: make(map[string]*modeHold)}
}

func (r *modeRecorder) ch(addr string) chan xds.ServingModeChangeArgs {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.chs[addr]
	if c == nil {
		c = make(chan xds.ServingModeChangeArgs, 1000)
		r.chs[addr] = c
	}
	return c
}

func (r *modeRecorder) option() grpc.ServerOption {
	return xds.ServingModeCallback(func(addr net.Addr, args xds.ServingModeChangeArgs) {
		if h := r.takeHold(addr.String(), args.Mode); h != nil {
			<-h.release
		}
		r.ch(addr.String()) <- args
	})
}

// holdNext makes the next serving-mode callback of addr to mode wait,
// before it is recorded, until the test waits for a change of addr (wait,
// waitSettled) or ends: the latest a callback can be recorded, as when the
// listener's goroutine is not scheduled for that long. The callback runs
// on the listener's serializer, so the listener does nothing else
// meanwhile; what does not wait for it (the xDS client's ACK, the
// connections the new configuration serves) can be seen to happen before
// it.
func (r *modeRecorder) holdNext(t *testing.T, addr net.Addr, mode connectivity.ServingMode) {
	t.Helper()
	h := &modeHold{mode: mode, release: make(chan struct{})}
	r.mu.Lock()
	r.holds[addr.String()] = h
	r.mu.Unlock()
	t.Cleanup(h.open) // before the server's Stop, which waits for the callback
}

// takeHold returns the hold armed for addr's next callback to mode, or
// nil; only the first such callback takes it.
func (r *modeRecorder) takeHold(addr string, mode connectivity.ServingMode) *modeHold {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.holds[addr]
	if h == nil || h.mode != mode || h.taken {
		return nil
	}
	h.taken = true
	return h
}

// releaseHold lets a callback of addr held by holdNext be recorded, now or
// as soon as it comes: the test is about to wait for it.
func (r *modeRecorder) releaseHold(addr string) {
	r.mu.Lock()
	h := r.holds[addr]
	delete(r.holds, addr)
	r.mu.Unlock()
	if h != nil {
		h.open()
	}
}

// wait returns the next serving-mode change of addr and fails the test if it
// is not to mode or if there is none before ctx ends. A change to Serving
// must carry no error, one to NotServing must say why.
func (r *modeRecorder) wait(ctx context.Context, t *testing.T, addr net.Addr, mode connectivity.ServingMode) xds.ServingModeChangeArgs {
	t.Helper()
	r.releaseHold(addr.String())
	select {
	case args := <-r.ch(addr.String()):
		if args.Mode != mode {
			t.Fatalf("serving mode of %v changed to %v (err: %v), want %v", addr, args.Mode, args.Err, mode)
		}
		switch mode {
		case connectivity.ServingModeServing:
			if args.Err != nil {
				t.Errorf("serving mode of %v changed to Serving with error %v, want nil", addr, args.Err)
			}
		case connectivity.ServingModeNotServing:
			if args.Err == nil {
				t.Errorf("serving mode of %v changed to NotServing with a nil error, want one that says why", addr)
			}
		}
		return args
	case <-ctx.Done():
		t.Fatalf("timeout waiting for the serving mode of %v to change to %v", addr, mode)
	}
	return xds.ServingModeChangeArgs{}
}

// waitSettled reads the serving-mode changes of addr recorded after one
// to from, until the last one read is to want and no other is recorded
// yet, and returns how many it read; while the last one is not to want it
// waits for the next, failing the test if none comes before ctx ends. Each
// change must be a transition (never to the mode before it) and carry an
// error exactly when it is to NotServing.
//
// It is for a test that knows the listener ends in want and that at most
// the last change is still to come, as after the ACK of the last update
// (TestServingModes_CallbackAfterACK); its return does not say that no
// other change is on its way.
func (r *modeRecorder) waitSettled(ctx context.Context, t *testing.T, addr net.Addr, from, want connectivity.ServingMode) int {
	t.Helper()
	ch := r.ch(addr.String())
	last, n := from, 0
	for {
		var args xds.ServingModeChangeArgs
		select {
		case args = <-ch:
		default:
			if last == want {
				return n
			}
			r.releaseHold(addr.String())
			select {
			case args = <-ch:
			case <-ctx.Done():
				t.Fatalf("%d serving-mode change(s) of %v, the last to %v; timed out waiting for one to %v", n, addr, last, want)
			}
		}
		n++
		if args.Mode == last {
			t.Fatalf("serving-mode change %d of %v: to %v again, want one call per transition", n, addr, args.Mode)
		}
		if (args.Mode == connectivity.ServingModeNotServing) != (args.Err != nil) {
			t.Errorf("serving-mode change %d of %v: to %v with error %v", n, addr, args.Mode, args.Err)
		}
		last = args.Mode
	}
}

// expectNone fails the test if addr's serving mode changes within d.
func (r *modeRecorder) expectNone(t *testing.T, addr net.Addr, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case args := <-r.ch(addr.String()):
		t.Errorf("serving mode of %v changed to %v (err: %v), want no change", addr, args.Mode, args.Err)
	case <-timer.C:
	}
}

// expectNoneBy fails the test if addr's serving mode changed by the time
// the xDS client answered (ACKed or NACKed) the last update of each of
// typeURLs (the Listener type if none). Unlike expectNone, it waits for
// progress, not for a length of time. It catches a change caused by an
// earlier update, but not always one the last update causes: the client
// answers before the listener has handled that update
// (TestServingModes_CallbackAfterACK).
func (r *modeRecorder) expectNoneBy(ctx context.Context, t *testing.T, ms *e2e.ManagementServer, addr net.Addr, typeURLs ...string) {
	t.Helper()
	if len(typeURLs) == 0 {
		typeURLs = []string{resourcev3.ListenerType}
	}
	for _, u := range typeURLs {
		if err := ms.WaitForAnswer(ctx, u); err != nil {
			t.Fatalf("waiting for the answer to the last update of %s: %v", u, err)
		}
	}
	select {
	case args := <-r.ch(addr.String()):
		t.Errorf("serving mode of %v changed to %v (err: %v), want no change", addr, args.Mode, args.Err)
	default:
	}
}

// --- clients ---

// testClient is a grpc-go client of one server address whose connections
// come from a chosen source address and are counted.
type testClient struct {
	*grpc.ClientConn
	testgrpc.TestServiceClient
	dials atomic.Int32
}

// newClient returns a client of addr whose TCP connections are bound to
// srcIP (any port if srcPort is 0). Reconnection backoff is short so that
// tests need not wait for gRPC's default of 1 s and more.
func newClient(t *testing.T, addr net.Addr, srcIP string, srcPort uint16, opts ...grpc.DialOption) *testClient {
	t.Helper()
	c := &testClient{}
	local := net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(srcIP), srcPort))
	dialer := func(ctx context.Context, target string) (net.Conn, error) {
		c.dials.Add(1)
		d := net.Dialer{LocalAddr: local}
		return d.DialContext(ctx, "tcp", target)
	}
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialer),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: 2 * time.Second,
		}),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///"+addr.String(), all...)
	if err != nil {
		t.Fatalf("grpc.NewClient(%v): %v", addr, err)
	}
	t.Cleanup(func() { cc.Close() })
	c.ClientConn = cc
	c.TestServiceClient = testgrpc.NewTestServiceClient(cc)
	return c
}

// emptyCall makes an EmptyCall and returns its status code.
func (c *testClient) emptyCall(ctx context.Context, opts ...grpc.CallOption) codes.Code {
	_, err := c.EmptyCall(ctx, &testpb.Empty{}, opts...)
	return status.Code(err)
}

// unaryCall makes a UnaryCall and returns its status code.
func (c *testClient) unaryCall(ctx context.Context, opts ...grpc.CallOption) codes.Code {
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, opts...)
	return status.Code(err)
}

func (c *testClient) emptyCallNoOpts(ctx context.Context) codes.Code { return c.emptyCall(ctx) }
func (c *testClient) unaryCallNoOpts(ctx context.Context) codes.Code { return c.unaryCall(ctx) }

// chainOf returns which of the chains (by name) serves c's connection: the
// one whose probe RPC (EmptyCall with "x-chain: <name>") succeeds; "" if
// every probe fails with UNAVAILABLE. Other codes fail the test.
func (c *testClient) chainOf(ctx context.Context, t *testing.T, names ...string) string {
	t.Helper()
	for _, name := range names {
		pctx := metadata.AppendToOutgoingContext(ctx, chainHeader, name)
		_, err := c.EmptyCall(pctx, &testpb.Empty{})
		switch status.Code(err) {
		case codes.OK:
			return name
		case codes.Unavailable:
		default:
			t.Fatalf("probe of chain %q: %v, want OK or UNAVAILABLE", name, err)
		}
	}
	return ""
}

// waitForChain polls chainOf until it returns want.
func (c *testClient) waitForChain(ctx context.Context, t *testing.T, want string, names ...string) {
	t.Helper()
	testutils.WaitFor(ctx, t, fmt.Sprintf("a connection served by chain %q", want), func() error {
		if got := c.chainOf(ctx, t, names...); got != want {
			return fmt.Errorf("served by chain %q", got)
		}
		return nil
	})
}

// waitForCode polls rpc until it returns want.
func waitForCode(ctx context.Context, t *testing.T, what string, want codes.Code, rpc func(context.Context) codes.Code) {
	t.Helper()
	testutils.WaitFor(ctx, t, fmt.Sprintf("%s: code %v", what, want), func() error {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if got := rpc(rctx); got != want {
			return fmt.Errorf("got code %v", got)
		}
		return nil
	})
}

// stream is an open FullDuplexCall.
type stream struct {
	testgrpc.TestService_FullDuplexCallClient
	cancel context.CancelFunc
}

func (c *testClient) startStream(ctx context.Context, t *testing.T) *stream {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	s, err := c.FullDuplexCall(sctx)
	if err != nil {
		t.Fatalf("FullDuplexCall: %v", err)
	}
	st := &stream{TestService_FullDuplexCallClient: s, cancel: cancel}
	st.pingPong(t)
	return st
}

// pingPong sends one message and waits for its echo.
func (s *stream) pingPong(t *testing.T) {
	t.Helper()
	if err := s.roundTrip(); err != nil {
		t.Fatalf("stream round trip: %v", err)
	}
}

func (s *stream) roundTrip() error {
	want := []byte("ping")
	if err := s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: want}}); err != nil {
		if errors.Is(err, io.EOF) {
			// The stream is over; Recv says how it ended.
			_, err = s.Recv()
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
		}
		return fmt.Errorf("Send: %w", err)
	}
	resp, err := s.Recv()
	if err != nil {
		return fmt.Errorf("Recv: %w", err)
	}
	if got := resp.GetPayload().GetBody(); string(got) != string(want) {
		return fmt.Errorf("Recv got payload %q, want %q", got, want)
	}
	return nil
}

// finish closes the client side and checks that the stream ends with OK.
func (s *stream) finish(t *testing.T) {
	t.Helper()
	if err := s.CloseSend(); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v, want io.EOF (status OK)", err)
	}
}

// --- raw TCP ---

// expectClosedNoBytes dials addr from srcIP and fails the test unless the
// server closes the connection without writing a single byte (a serving
// gRPC server writes its HTTP/2 SETTINGS at once).
func expectClosedNoBytes(t *testing.T, addr net.Addr, srcIP string) {
	t.Helper()
	if err := closedNoBytes(addr, srcIP); err != nil {
		t.Fatal(err)
	}
}

func closedNoBytes(addr net.Addr, srcIP string) error {
	d := net.Dialer{
		LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(srcIP), 0)),
		Timeout:   defaultTestTimeout,
	}
	conn, err := d.Dial("tcp", addr.String())
	if err != nil {
		return fmt.Errorf("dial %v: %v", addr, err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(defaultTestTimeout))
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if n > 0 {
		return fmt.Errorf("connection to %v from %s: server wrote %d bytes (%q...), want it closed without a byte", addr, srcIP, n, buf[:n])
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("connection to %v from %s: read returned %v, want EOF with 0 bytes", addr, srcIP, err)
	}
	return nil
}

// --- resources ---

func cidr(s string) *corepb.CidrRange {
	p := netip.MustParsePrefix(s)
	return &corepb.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}
}

// nonForwarding is a route action that lets an RPC through on a server.
func nonForwarding(m *routepb.RouteMatch) *routepb.Route {
	return &routepb.Route{Match: m, Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}}}
}

// clientRoute is a route with a `route` action, which an xDS server refuses
// with UNAVAILABLE (gRFC A36).
func clientRoute(m *routepb.RouteMatch) *routepb.Route {
	return &routepb.Route{Match: m, Action: &routepb.Route_Route{Route: &routepb.RouteAction{
		ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "cluster"},
	}}}
}

func prefixMatch(p string) *routepb.RouteMatch {
	return &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: p}}
}

func pathMatch(p string) *routepb.RouteMatch {
	return &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: p}}
}

// chainRoutes returns the routes of a filter chain tagged tag: an RPC with
// "x-chain: tag" goes through, one with another x-chain value is refused;
// RPCs without x-chain go through if their path is in allowed (every path if
// allowed is empty) and are refused otherwise.
func chainRoutes(tag string, allowed ...string) []*routepb.Route {
	probe := prefixMatch("/")
	probe.Headers = []*routepb.HeaderMatcher{{Name: chainHeader, HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: tag}}}
	other := prefixMatch("/")
	other.Headers = []*routepb.HeaderMatcher{{Name: chainHeader, HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}}
	routes := []*routepb.Route{nonForwarding(probe), clientRoute(other)}
	if len(allowed) == 0 {
		return append(routes, nonForwarding(prefixMatch("/")))
	}
	for _, p := range allowed {
		routes = append(routes, nonForwarding(pathMatch(p)))
	}
	return append(routes, clientRoute(prefixMatch("/")))
}

// routeConfig returns a RouteConfiguration named name with one virtual host
// for every authority holding routes.
func routeConfig(name string, routes []*routepb.Route) *routepb.RouteConfiguration {
	return &routepb.RouteConfiguration{
		Name:         name,
		VirtualHosts: []*routepb.VirtualHost{{Name: "vh-" + name, Domains: []string{"*"}, Routes: routes}},
	}
}

// chainSpec describes one filter chain of a test Listener.
type chainSpec struct {
	name  string
	match *listenerpb.FilterChainMatch
	// allowed are the paths RPCs without x-chain may use; empty: every path.
	allowed []string
	// rds, if set, makes the chain take its routes from this
	// RouteConfiguration over RDS instead of chainRoutes inline.
	rds string
	// routes, if set, is the chain's inline RouteConfiguration.
	routes *routepb.RouteConfiguration
	// filters run before the router.
	filters []*hcmpb.HttpFilter
}

func (c chainSpec) filterChain() *listenerpb.FilterChain {
	hcm := &hcmpb.HttpConnectionManager{
		StatPrefix:  "test",
		HttpFilters: append(append([]*hcmpb.HttpFilter(nil), c.filters...), e2e.RouterHTTPFilter()),
	}
	switch {
	case c.rds != "":
		hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
			RouteConfigName: c.rds,
			ConfigSource: &corepb.ConfigSource{
				ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
				ResourceApiVersion:    corepb.ApiVersion_V3,
			},
		}}
	case c.routes != nil:
		hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: c.routes}
	default:
		hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_RouteConfig{
			RouteConfig: routeConfig("routes-"+c.name, chainRoutes(c.name, c.allowed...)),
		}
	}
	return &listenerpb.FilterChain{
		Name:             c.name,
		FilterChainMatch: c.match,
		Filters: []*listenerpb.Filter{{
			Name:       e2e.HCMFilterName,
			ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)},
		}},
	}
}

// testListener returns the Listener resource for a server listening on
// lisAddr, with the address addr (usually lisAddr), the chains and an
// optional default chain.
func testListener(lisAddr net.Addr, chains []chainSpec, def *chainSpec) *listenerpb.Listener {
	return listenerAt(lisAddr, lisAddr, chains, def)
}

// listenerAt is testListener with a Listener address that may differ from
// the address it is named after.
func listenerAt(nameAddr, addr net.Addr, chains []chainSpec, def *chainSpec) *listenerpb.Listener {
	na := nameAddr.(*net.TCPAddr).AddrPort()
	a := addr.(*net.TCPAddr).AddrPort()
	l := &listenerpb.Listener{
		Name: e2e.ServerListenerName(na.Addr().Unmap().String(), uint32(na.Port())),
		Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Protocol:      corepb.SocketAddress_TCP,
			Address:       a.Addr().Unmap().String(),
			PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: uint32(a.Port())},
		}}},
	}
	for _, c := range chains {
		l.FilterChains = append(l.FilterChains, c.filterChain())
	}
	if def != nil {
		l.DefaultFilterChain = def.filterChain()
	}
	return l
}

// simpleListener is a Listener for lisAddr with one chain "A" that lets
// every RPC through.
func simpleListener(lisAddr net.Addr) *listenerpb.Listener {
	return testListener(lisAddr, []chainSpec{{name: "A"}}, nil)
}

// hostPort splits a TCP address for e2e helpers.
func hostPort(addr net.Addr) (string, uint32) {
	ap := addr.(*net.TCPAddr).AddrPort()
	return ap.Addr().Unmap().String(), uint32(ap.Port())
}

// freePort returns a TCP port of ip that was free a moment ago.
func freePort(t *testing.T, ip string) uint16 {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("net.Listen: %v", err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).AddrPort().Port()
}

// after returns pred for WaitForRequest, skipping the first seen requests
// (those recorded before the step being waited for).
func after(seen int, pred func(*discoverypb.DiscoveryRequest) bool) func(*discoverypb.DiscoveryRequest) bool {
	return func(r *discoverypb.DiscoveryRequest) bool {
		if seen > 0 {
			seen--
			return false
		}
		return pred(r)
	}
}
