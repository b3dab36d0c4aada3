package listener

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/server/connserver"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/xdsfake"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

const defaultTestTimeout = 10 * time.Second

var logs *testutils.Logs

func TestMain(m *testing.M) {
	logs = testutils.InstallLogs(true)
	testutils.VerifyNoLeaks(m)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// testEnv is one Listener on a pipeListener (no socket), configured
// through a fake xDS client, serving the grpc.testing service.
type testEnv struct {
	xds   *xdsfake.Client
	lis   *pipeListener
	l     *Listener
	host  string
	port  uint32
	name  string // of the Listener resource
	modes chan modeChange
	svc   blockingService
	dials atomic.Int32 // connections opened by the clients of dial
}

type modeChange struct {
	mode connectivity.ServingMode
	err  error
}

// envOptions configure newTestEnv; the zero value is a 10-minute drain
// grace time, no jitter, no metrics, no ModeObserver.
type envOptions struct {
	grace, jitter time.Duration
	metrics       *metrics.Listener
	observe       func(connectivity.ServingMode) // the ModeObserver
}

// lastPort gives each test environment a listening port of its own, so
// that the log lines of one test (prefixed with the address) are told apart
// from another's.
var lastPort atomic.Uint32

// newTestEnv starts a Listener watching its Listener resource through a
// fake xDS client, on a pipeListener at 127.0.0.1 with a port of its own;
// its clients connect from 127.0.0.1. Everything is stopped at cleanup;
// Serve must then have returned nil.
func newTestEnv(t *testing.T, o envOptions) *testEnv {
	t.Helper()
	env := newEnvNoListener(t)
	env.l = env.newListener(t, env.xds, o)
	return env
}

// newEnvNoListener is newTestEnv without the Listener, for a test that
// starts it with another client (newListener).
func newEnvNoListener(t *testing.T) *testEnv {
	t.Helper()
	env := &testEnv{
		xds:   xdsfake.NewClient(&bootstrap.Config{}),
		host:  "127.0.0.1",
		port:  8000 + lastPort.Add(1),
		modes: make(chan modeChange, 100),
		svc:   blockingService{started: make(chan struct{}, 100)},
	}
	env.name = e2e.ServerListenerName(env.host, env.port)
	addr := netip.AddrPortFrom(netip.MustParseAddr(env.host), uint16(env.port))
	env.lis = newPipeListener(net.TCPAddrFromAddrPort(addr), net.IPv4(127, 0, 0, 1))
	return env
}

// newListener starts a Listener on env.lis watching env.name with client,
// and stops it at cleanup.
func (env *testEnv) newListener(t *testing.T, client XDSClient, o envOptions) *Listener {
	t.Helper()
	if o.grace == 0 {
		o.grace = 10 * time.Minute
	}
	addr := env.lis.addr.AddrPort()
	l := New(Params{
		Lis:    env.lis,
		Addr:   netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()),
		Name:   env.name,
		Client: client,
		ModeCallback: func(_ net.Addr, mode connectivity.ServingMode, err error) {
			env.modes <- modeChange{mode, err}
		},
		Conns: connserver.Options{
			Services:    []connserver.Service{{Desc: &testgrpc.TestService_ServiceDesc, Impl: env.svc}},
			DrainGrace:  o.grace,
			DrainJitter: o.jitter,
		},
		ModeObserver: o.observe,
		Metrics:      o.metrics,
	})
	serveErr := make(chan error, 1)
	go func() { serveErr <- l.Serve() }()
	t.Cleanup(func() {
		l.Close(false)
		if err := <-serveErr; err != nil {
			t.Errorf("Serve returned %v after Close, want nil", err)
		}
		if ws := env.xds.WatchedNames(xdsresource.ListenerType); len(ws) != 0 {
			t.Errorf("Listener watches %v left after Close", ws)
		}
		if ws := env.xds.WatchedNames(xdsresource.RouteConfigType); len(ws) != 0 {
			t.Errorf("RouteConfiguration watches %v left after Close", ws)
		}
	})
	return l
}

// waitMode checks that the listener reported a serving-mode change to
// want. Deliveries of the fake client return once handled, so the change
// has been reported by then; ctx bounds the wait when the change comes from
// elsewhere.
func (env *testEnv) waitMode(ctx context.Context, t *testing.T, want connectivity.ServingMode) modeChange {
	t.Helper()
	select {
	case m := <-env.modes:
		if m.mode != want {
			t.Fatalf("serving mode = %v (err %v), want %v", m.mode, m.err, want)
		}
		return m
	case <-ctx.Done():
		t.Fatalf("no serving mode change to %v", want)
	}
	return modeChange{}
}

// noModeChange checks that no serving-mode change was reported.
func (env *testEnv) noModeChange(t *testing.T) {
	t.Helper()
	select {
	case m := <-env.modes:
		t.Fatalf("unexpected serving mode change to %v (err %v)", m.mode, m.err)
	default:
	}
}

// send delivers l; it returns once the listener has handled it.
func (env *testEnv) send(ctx context.Context, t *testing.T, l *listenerpb.Listener) {
	t.Helper()
	env.xds.SendListener(ctx, t, xdsfake.DecodeListener(t, l))
}

// update delivers l and returns the configuration the listener applied
// for it (a new one, which the test fails without).
func (env *testEnv) update(ctx context.Context, t *testing.T, l *listenerpb.Listener) *active {
	t.Helper()
	old := env.l.cur.Load()
	env.send(ctx, t, l)
	cfg := env.l.cur.Load()
	if cfg == nil || cfg == old {
		t.Fatal("the listener did not apply the update")
	}
	return cfg
}

// waitConns waits until cond holds, checking it again each time a
// connection of the listener is handed to gRPC or closed: for conditions
// on connection counts, which change on those events.
func (env *testEnv) waitConns(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-env.lis.events:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// lastConn returns the server end of the last connection accepted.
func (env *testEnv) lastConn(t *testing.T) *pipeConn {
	t.Helper()
	n := env.lis.numAccepted()
	if n == 0 {
		t.Fatal("no connection accepted")
	}
	return env.lis.conn(n - 1)
}

// waitClosed waits until the listener closed c.
func waitClosed(ctx context.Context, t *testing.T, c *pipeConn, what string) {
	t.Helper()
	select {
	case <-c.closed:
	case <-ctx.Done():
		t.Fatalf("%s: the connection was not closed", what)
	}
}

// chainSpec describes one filter chain of testListener.
type chainSpec struct {
	name      string
	srcPrefix string // "" for none
	routeName string // inline route_config name; part of the chain's ID
	rdsName   string // when set, the chain takes its routes from this RouteConfiguration instead
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
		if c.rdsName != "" {
			hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
				RouteConfigName: c.rdsName,
				ConfigSource:    &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}, ResourceApiVersion: corepb.ApiVersion_V3},
			}}
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

// serverNamed returns the chain server of the chain called name in cfg.
func serverNamed(t *testing.T, cfg *active, name string) *connserver.ChainServer {
	t.Helper()
	for fc, cs := range cfg.servers {
		if fc.Name == name {
			return cs
		}
	}
	t.Fatalf("no filter chain %q in the active configuration", name)
	return nil
}

// dial returns a client of the listener; every connection it opens is
// counted in env.dials.
func (env *testEnv) dial(t *testing.T) testgrpc.TestServiceClient {
	t.Helper()
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		env.dials.Add(1)
		return env.lis.dial(ctx)
	}
	cc, err := grpc.NewClient("passthrough:///"+env.name,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer))
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

// blockingService holds every FullDuplexCall open until its client or the
// server ends it.
type blockingService struct {
	testutils.TestService
	started chan struct{}
}

func (s blockingService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	s.started <- struct{}{}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// expectClosedWithoutBytes connects to the listener and checks that the
// connection is closed without a byte written.
func expectClosedWithoutBytes(ctx context.Context, t *testing.T, env *testEnv) {
	t.Helper()
	c, err := env.lis.dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		c.SetReadDeadline(d)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read from a not-serving listener: %d bytes, err %v; want 0 bytes and the connection closed", n, err)
	}
}
