package listener

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/server/connserver"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// waitStats waits until cs's connection counts are want.
func waitStats(t *testing.T, cs *connserver.ChainServer, want connserver.Stats, what string) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for cs.Stats() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: stats %+v, want %+v", what, cs.Stats(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReuseDecision drives the reuse rule through real Listener updates: a
// chain whose ID is unchanged keeps its chain server and connections, except
// the connections the new table routes to another chain, which are drained;
// a chain whose ID changed is retired and all its connections drained.
func TestReuseDecision(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	a := chainSpec{name: "a", srcPrefix: "127.0.0.0/8", routeName: "route-a"}
	def := chainSpec{name: "def", routeName: "route-def", isDefault: true}
	cfg := env.update(ctx, t, testListener(env, a, def))
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	client := env.dial(t)
	unaryOK(ctx, t, client)
	csA := serverNamed(t, cfg, "a")
	waitStats(t, csA, connserver.Stats{Live: 1}, "chain a after the first RPC")

	// Only the default chain changes: chain a and its connection stay.
	def.routeName = "route-def-2"
	cfg = env.update(ctx, t, testListener(env, a, def))
	if got := serverNamed(t, cfg, "a"); got != csA {
		t.Fatal("chain a got a new chain server although its ID and routing did not change")
	}
	unaryOK(ctx, t, client)
	if got := csA.Stats(); got != (connserver.Stats{Live: 1}) {
		t.Fatalf("chain a after an unrelated update: %+v, want its one connection live", got)
	}
	if n := env.dials.Load(); n != 1 {
		t.Fatalf("the client opened %d connections, want 1: the unrelated update must not drain", n)
	}

	// A more specific chain now takes chain a's connection: chain a stays,
	// that connection is drained.
	c := chainSpec{name: "c", srcPrefix: "127.0.0.1/32", routeName: "route-c"}
	cfg = env.update(ctx, t, testListener(env, a, c, def))
	if serverNamed(t, cfg, "a") != csA {
		t.Fatal("chain a got a new chain server although its ID did not change")
	}
	// The client reconnects, to chain c, once the GOAWAY arrives; chain a's
	// connection drains and goes.
	csC := serverNamed(t, cfg, "c")
	for csC.Stats().Live != 1 {
		unaryOK(ctx, t, client)
		if ctx.Err() != nil {
			t.Fatal("the client did not reconnect to chain c")
		}
		time.Sleep(time.Millisecond)
	}
	waitStats(t, csA, connserver.Stats{}, "chain a once its rerouted connection is gone")

	// Chain c changes (its routes are part of its ID): retired, drained.
	c.routeName = "route-c-2"
	cfg = env.update(ctx, t, testListener(env, a, c, def))
	if serverNamed(t, cfg, "c") == csC {
		t.Fatal("chain c kept its chain server although its content changed")
	}
	if st := csC.Stats(); !st.Retired || st.Live != 0 {
		t.Fatalf("the old chain c: %+v, want retired with no live connection", st)
	}
	unaryOK(ctx, t, client)
}

// TestNotServingAndBack: a Listener that does not exist, then one with the
// wrong address, then a good one, then its deletion; each transition is
// reported once, and not serving closes connections without a byte.
func TestNotServingAndBack(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	m := env.waitMode(ctx, t, connectivity.ServingModeNotServing)
	if !errors.Is(m.err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("not serving error = %v, want does-not-exist", m.err)
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
	if env.l.cur.Load() != nil {
		t.Error("active configuration kept after the Listener was deleted")
	}
	expectClosedWithoutBytes(t, env)
	select {
	case m := <-env.modes:
		t.Fatalf("unexpected serving mode change %v", m)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestRDSNotFoundThenPublished: a Listener whose RDS resource does not exist
// applies when the does-not-exist timer fires; RPCs fail UNAVAILABLE naming
// the resource, then succeed on the same connection once it is published.
func TestRDSNotFoundThenPublished(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	if err := env.mgmt.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{e2e.DefaultServerListener(env.host, env.port, "rds-1")}}); err != nil {
		t.Fatal(err)
	}
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	client := env.dial(t)
	_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), `"rds-1"`) {
		t.Fatalf("UnaryCall = %v, want UNAVAILABLE naming rds-1", err)
	}
	cs := serverNamed(t, env.l.cur.Load(), "filter-chain-1")
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
	if st := cs.Stats(); st != (connserver.Stats{Live: 1}) || env.dials.Load() != 1 {
		t.Fatalf("after the RDS update: %+v, %d dials; want the one connection untouched", st, env.dials.Load())
	}
}

// TestCloseLeavesNothing: Close returns at once with a drain pending behind
// a long jitter, and leaves no chain server behind.
func TestCloseLeavesNothing(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{jitter: time.Hour})
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true}))
	unaryOK(ctx, t, env.dial(t))
	// Drain with a long jitter; Close must not wait for it.
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r2", isDefault: true}))
	done := make(chan struct{})
	go func() { env.l.Close(false); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Close did not return")
	}
	if n := len(env.l.conns.ChainServers()); n != 0 {
		t.Errorf("%d chain servers left after Close", n)
	}
}

// TestCloseCutsDrainShort: a hard Close during a drain with a long grace
// time closes the draining connection at once and fails its stream.
func TestCloseCutsDrainShort(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{grace: time.Hour})
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true}))
	stream, err := env.dial(t).FullDuplexCall(ctx, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	<-env.svc.started
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r2", isDefault: true}))
	done := make(chan struct{})
	go func() { env.l.Close(false); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a draining connection's grace time")
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Errorf("stream after Close: %v, want it failed", err)
	}
}

// TestRapidUpdatesUnderLoad: 200 Listener updates, each changing the only
// filter chain (so each drains the connections), while clients run RPCs:
// no RPC fails, and every drained chain server is gone at the end.
func TestRapidUpdatesUnderLoad(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r-0", isDefault: true}))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 100)
	for range 4 {
		client := env.dial(t)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := 1; i <= 200; i++ {
		env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: fmt.Sprintf("r-%d", i), isDefault: true}))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("RPC failed during updates: %v", err)
	}
	// Old chain servers go away once their clients moved to the new one.
	for {
		n := len(env.l.conns.ChainServers())
		if n == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d chain servers still alive, want 1", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDrainLoggedAndCounted: a configuration change that drains
// connections logs one line and counts one drain, with the number of
// connections; one that drains none logs and counts nothing.
func TestDrainLoggedAndCounted(t *testing.T) {
	ctx := testCtx(t)
	mr := testutils.NewMetricReader(t)
	env := newTestEnv(t, envOptions{grace: time.Minute, metrics: metrics.NewServer(mr.Provider).Listener("test-drains")})
	prefix := fmt.Sprintf("[listener %s:%d]", env.host, env.port)
	lis := attribute.String(metrics.AttrListener, "test-drains")
	a := chainSpec{name: "a", srcPrefix: "127.0.0.0/8", routeName: "r"}
	b := chainSpec{name: "b", routeName: "r", isDefault: true}
	cfg := env.update(ctx, t, testListener(env, a, b))
	c1, c2 := env.dial(t), env.dial(t)
	unaryOK(ctx, t, c1)
	unaryOK(ctx, t, c2)
	waitStats(t, serverNamed(t, cfg, "a"), connserver.Stats{Live: 2}, "chain a")

	// Only the unused default chain changes: nothing drains.
	b.routeName = "r2"
	env.update(ctx, t, testListener(env, a, b))
	a.routeName = "r3"
	env.update(ctx, t, testListener(env, a, b))
	logs.WaitCount(ctx, t, 1, "I", prefix, "draining 2 connection(s) (Listener update)")
	if n := logs.Count("I", prefix, "draining"); n != 1 {
		t.Errorf("%d drain lines, want 1 (the update that drained nothing logs nothing): %q", n, logs.Matching(prefix, "draining"))
	}
	if v, _ := mr.Value(t, metrics.Drains, lis); v != 1 {
		t.Errorf("%s = %d, want 1", metrics.Drains, v)
	}
}
