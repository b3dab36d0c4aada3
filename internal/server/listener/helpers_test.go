package listener

import (
	"context"
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
	"github.com/proxyless-grpc/xds/internal/xdsclient"
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

// testEnv is one Listener on a loopback socket, configured by a real
// management server through a real xDS client, serving the grpc.testing
// service.
type testEnv struct {
	mgmt  *e2e.ManagementServer
	l     *Listener
	host  string
	port  uint32
	modes chan modeChange
	svc   blockingService
	dials atomic.Int32 // connections opened by the clients of dial
}

type modeChange struct {
	mode connectivity.ServingMode
	err  error
}

// envOptions configure newTestEnv; the zero value is a 10-minute drain
// grace time, no jitter, no metrics.
type envOptions struct {
	grace, jitter time.Duration
	metrics       *metrics.Listener
}

// newTestEnv starts a management server, an xDS client with a short
// does-not-exist timer, and a Listener on 127.0.0.1:0. Everything is
// stopped at cleanup; Serve must then have returned nil.
func newTestEnv(t *testing.T, o envOptions) *testEnv {
	t.Helper()
	env := &testEnv{
		mgmt:  e2e.StartManagementServer(t, e2e.ManagementServerOptions{}),
		modes: make(chan modeChange, 100),
		svc:   blockingService{started: make(chan struct{}, 100)},
	}
	cfg, err := bootstrap.Parse(e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{env.mgmt.Address},
		NodeID:                             "node-" + testutils.RunName(t),
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
	}))
	if err != nil {
		t.Fatal(err)
	}
	client, err := xdsclient.New(cfg, xdsclient.Options{WatchExpiryTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().(*net.TCPAddr).AddrPort()
	env.host, env.port = addr.Addr().String(), uint32(addr.Port())
	name, err := cfg.ServerListenerName(addr)
	if err != nil {
		t.Fatal(err)
	}
	if o.grace == 0 {
		o.grace = 10 * time.Minute
	}
	env.l = New(Params{
		Lis:    lis,
		Addr:   netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()),
		Name:   name,
		Client: client,
		ModeCallback: func(_ net.Addr, mode connectivity.ServingMode, err error) {
			env.modes <- modeChange{mode, err}
		},
		Conns: connserver.Options{
			Services:    []connserver.Service{{Desc: &testgrpc.TestService_ServiceDesc, Impl: env.svc}},
			DrainGrace:  o.grace,
			DrainJitter: o.jitter,
		},
		Metrics: o.metrics,
	})
	serveErr := make(chan error, 1)
	go func() { serveErr <- env.l.Serve() }()
	t.Cleanup(func() {
		env.l.Close(false)
		if err := <-serveErr; err != nil {
			t.Errorf("Serve returned %v after Close, want nil", err)
		}
		client.Close()
	})
	return env
}

// waitMode waits for the next serving-mode callback and checks its mode.
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

// update pushes l and waits until the listener has applied a new
// configuration (the active pointer changed).
func (env *testEnv) update(ctx context.Context, t *testing.T, l *listenerpb.Listener) *active {
	t.Helper()
	old := env.l.cur.Load()
	if err := env.mgmt.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{l}}); err != nil {
		t.Fatal(err)
	}
	for {
		if cfg := env.l.cur.Load(); cfg != nil && cfg != old {
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
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		env.dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	cc, err := grpc.NewClient(net.JoinHostPort(env.host, strconv.Itoa(int(env.port))),
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

// expectClosedWithoutBytes dials the listener and checks that the
// connection is closed without a byte written.
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
