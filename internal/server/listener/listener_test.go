package listener

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/server/connserver"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/xdsfake"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

// checkStats checks cs's connection counts. The listener's changes to them
// are made before a delivery of the fake xDS client returns, and a
// connection is counted before gRPC serves it, so they can be checked at
// once after a delivery or an RPC.
func checkStats(t *testing.T, cs *connserver.ChainServer, want connserver.Stats, what string) {
	t.Helper()
	if got := cs.Stats(); got != want {
		t.Fatalf("%s: stats %+v, want %+v", what, got, want)
	}
}

// TestFirstListenerServes: connections are closed without a byte until the
// first Listener arrives; then the listener serves, and says so once.
func TestFirstListenerServes(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	if n := env.xds.Watching(xdsresource.ListenerType, env.name); n != 1 {
		t.Fatalf("%d watches of Listener %q, want 1", n, env.name)
	}
	expectClosedWithoutBytes(ctx, t, env)
	env.noModeChange(t)

	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true}))
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	unaryOK(ctx, t, env.dial(t))
	if st := env.l.Status(); st.Mode != connectivity.ServingModeServing || len(st.Chains) != 1 {
		t.Errorf("status: mode %v, %d chain(s); want serving with 1 chain", st.Mode, len(st.Chains))
	}
	// The same Listener again (the real client drops identical re-sends,
	// but a new version may compile to the same chains): nothing drains.
	cs := serverNamed(t, env.l.cur.Load(), "x")
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true}))
	if serverNamed(t, env.l.cur.Load(), "x") != cs {
		t.Error("an unchanged chain got a new chain server")
	}
	checkStats(t, cs, connserver.Stats{Live: 1}, "the unchanged chain")
	env.noModeChange(t)
}

// TestReuseDecision drives the reuse rule through Listener updates: a chain
// whose ID is unchanged keeps its chain server and connections, except the
// connections the new table routes to another chain, which are drained; a
// chain whose ID changed is retired and all its connections drained.
func TestReuseDecision(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	a := chainSpec{name: "a", srcPrefix: "127.0.0.0/8", routeName: "route-a"}
	def := chainSpec{name: "def", routeName: "route-def", isDefault: true}
	cfg := env.update(ctx, t, testListener(env, a, def))
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	client := env.dial(t)
	unaryOK(ctx, t, client)
	connA := env.lastConn(t)
	csA := serverNamed(t, cfg, "a")
	checkStats(t, csA, connserver.Stats{Live: 1}, "chain a after the first RPC")

	// Only the default chain changes: chain a and its connection stay.
	def.routeName = "route-def-2"
	cfg = env.update(ctx, t, testListener(env, a, def))
	if got := serverNamed(t, cfg, "a"); got != csA {
		t.Fatal("chain a got a new chain server although its ID and routing did not change")
	}
	checkStats(t, csA, connserver.Stats{Live: 1}, "chain a after an unrelated update")
	unaryOK(ctx, t, client)
	if n := env.dials.Load(); n != 1 || connA.isClosed() {
		t.Fatalf("the client opened %d connections (first closed: %v), want 1 still open: the unrelated update must not drain", n, connA.isClosed())
	}

	// A more specific chain now takes chain a's connection: chain a stays,
	// that connection is drained.
	c := chainSpec{name: "c", srcPrefix: "127.0.0.1/32", routeName: "route-c"}
	cfg = env.update(ctx, t, testListener(env, a, c, def))
	if serverNamed(t, cfg, "a") != csA {
		t.Fatal("chain a got a new chain server although its ID did not change")
	}
	if st := csA.Stats(); st.Live != 0 || st.Retired {
		t.Fatalf("chain a after its connection was rerouted: %+v, want it kept with no live connection", st)
	}
	waitClosed(ctx, t, connA, "chain a's rerouted connection")
	checkStats(t, csA, connserver.Stats{}, "chain a once its rerouted connection is gone")
	// The client reconnects, to chain c.
	csC := serverNamed(t, cfg, "c")
	unaryOK(ctx, t, client)
	checkStats(t, csC, connserver.Stats{Live: 1}, "chain c after the client reconnected")

	// Chain c changes (its routes are part of its ID): retired, drained;
	// chain a is untouched.
	c.routeName = "route-c-2"
	cfg = env.update(ctx, t, testListener(env, a, c, def))
	if serverNamed(t, cfg, "c") == csC {
		t.Fatal("chain c kept its chain server although its content changed")
	}
	if st := csC.Stats(); !st.Retired || st.Live != 0 {
		t.Fatalf("the old chain c: %+v, want retired with no live connection", st)
	}
	waitClosed(ctx, t, env.lastConn(t), "the old chain c's connection")
	if serverNamed(t, cfg, "a") != csA {
		t.Error("chain a got a new chain server when only chain c changed")
	}
	unaryOK(ctx, t, client)
	env.noModeChange(t)
}

// TestNotServingAndBack: a Listener that does not exist, then one with the
// wrong address, then a good one, then its deletion; each transition is
// reported once, not serving closes new connections without a byte, and the
// deletion drains the connections served.
func TestNotServingAndBack(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	env.xds.SendListenerError(ctx, t, env.name, xdsfake.DoesNotExist(xdsresource.ListenerType, env.name))
	m := env.waitMode(ctx, t, connectivity.ServingModeNotServing)
	if !errors.Is(m.err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("not serving error = %v, want does-not-exist", m.err)
	}
	if !strings.Contains(m.err.Error(), fmt.Sprintf("%q", env.name)) {
		t.Errorf("not serving error = %q, want it to name the Listener requested, %q", m.err, env.name)
	}
	expectClosedWithoutBytes(ctx, t, env)

	wrong := testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true})
	wrong.Address.GetSocketAddress().PortSpecifier = &corepb.SocketAddress_PortValue{PortValue: env.port + 1}
	env.send(ctx, t, wrong)
	env.noModeChange(t) // a mismatch while not serving: no extra call
	if env.l.cur.Load() != nil {
		t.Fatal("a Listener with another port was applied")
	}

	cfg := env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true}))
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	unaryOK(ctx, t, env.dial(t))
	conn, cs := env.lastConn(t), serverNamed(t, cfg, "x")

	env.xds.SendListenerError(ctx, t, env.name, xdsfake.DoesNotExist(xdsresource.ListenerType, env.name))
	env.waitMode(ctx, t, connectivity.ServingModeNotServing)
	if env.l.cur.Load() != nil {
		t.Error("active configuration kept after the Listener was deleted")
	}
	if st := cs.Stats(); !st.Retired || st.Live != 0 {
		t.Errorf("the chain after the deletion: %+v, want retired with no live connection", st)
	}
	waitClosed(ctx, t, conn, "the connection served before the deletion")
	expectClosedWithoutBytes(ctx, t, env)
	env.noModeChange(t)
}

// TestFlapsReportEveryTransition: the Listener deleted, re-added (with
// inline routes, or with RDS, whose answer comes in a delivery of its own),
// replaced by one for another address, each sometimes twice in a row,
// between ambient errors. Each transition reaches the ModeObserver
// (ReadinessHealth), then the serving-mode callback, once, before the
// listener lets the xDS client go on (onDone; a delivery of the fake
// client returns only then), and updates that change nothing reach
// neither. So the last transition is never lost or overtaken, and once the
// xDS client reads the next response, the callbacks of the one before have
// returned: what e2e's TestServingModes_RapidFlaps relies on.
func TestFlapsReportEveryTransition(t *testing.T) {
	ctx := testCtx(t)
	var (
		env      *testEnv
		mu       sync.Mutex
		observed []connectivity.ServingMode
	)
	observe := func(mode connectivity.ServingMode) {
		mu.Lock()
		defer mu.Unlock()
		observed = append(observed, mode)
		// The test reads every callback after each delivery, so one
		// recorded now came before the observer.
		if n := len(env.modes); n != 0 {
			t.Errorf("ModeObserver told of %v after the serving-mode callback, want before", mode)
		}
	}
	env = newTestEnv(t, envOptions{observe: observe})

	deleted := func() {
		env.xds.SendListenerError(ctx, t, env.name, xdsfake.DoesNotExist(xdsresource.ListenerType, env.name))
	}
	inline := func() { env.send(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true})) }
	otherAddr := func() {
		l := testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true})
		l.Address.GetSocketAddress().Address = "127.0.0.2"
		env.send(ctx, t, l)
	}
	withRDS := func() { // only after a step that stopped serving
		env.send(ctx, t, testListener(env, chainSpec{name: "x", rdsName: "rds", isDefault: true}))
		env.noModeChange(t)
		if env.l.cur.Load() != nil {
			t.Fatal("a Listener was applied before its RouteConfiguration answered")
		}
		env.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, e2e.DefaultRouteConfig("rds")))
	}
	ambient := func() {
		env.xds.SendListenerAmbient(ctx, t, env.name, xdsfake.ConnectionError(errors.New("connection refused")))
	}
	const (
		serving    = connectivity.ServingModeServing
		notServing = connectivity.ServingModeNotServing
	)
	steps := []struct {
		desc string
		do   func()
		want connectivity.ServingMode
	}{
		{"deleted", deleted, notServing},
		{"deleted again", deleted, notServing},
		{"re-added", inline, serving},
		{"re-added again", inline, serving},
		{"ambient error", ambient, serving},
		{"another address", otherAddr, notServing},
		{"re-added with RDS", withRDS, serving},
		{"deleted", deleted, notServing},
		{"ambient error", ambient, notServing},
		{"re-added with RDS", withRDS, serving},
		{"another address", otherAddr, notServing},
		{"another address again", otherAddr, notServing},
		{"re-added", inline, serving},
	}
	inline()
	env.waitMode(ctx, t, serving)
	mode, want := serving, []connectivity.ServingMode{serving}
	for round := range 3 {
		for _, s := range steps {
			s.do()
			// The delivery has returned: the listener has made every
			// report of it.
			if s.want != mode {
				mode = s.want
				want = append(want, mode)
				select {
				case m := <-env.modes:
					if m.mode != mode {
						t.Fatalf("round %d, %s: serving-mode callback to %v (err %v), want %v", round, s.desc, m.mode, m.err, mode)
					}
				default:
					t.Fatalf("round %d, %s: no serving-mode callback once the update was handled, want one to %v", round, s.desc, mode)
				}
			}
			env.noModeChange(t)
			mu.Lock()
			got := slices.Clone(observed)
			mu.Unlock()
			if !slices.Equal(got, want) {
				t.Fatalf("round %d, %s: ModeObserver told of %v, want %v", round, s.desc, got, want)
			}
		}
	}
	unaryOK(ctx, t, env.dial(t))
}

// TestAddressMismatchStopsServing: a Listener whose address is not the
// listener's is not served (gRFC A36): the listener stops serving, drains
// its connections, and serves again with a Listener that matches.
func TestAddressMismatchStopsServing(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	good := testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true})
	env.update(ctx, t, good)
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	client := env.dial(t)
	unaryOK(ctx, t, client)
	conn := env.lastConn(t)

	wrong := testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true})
	wrong.Address.GetSocketAddress().Address = "127.0.0.2"
	env.send(ctx, t, wrong)
	m := env.waitMode(ctx, t, connectivity.ServingModeNotServing)
	if ae := (*filterchain.AddressMismatchError)(nil); !errors.As(m.err, &ae) {
		t.Errorf("not serving error = %v, want an address mismatch", m.err)
	}
	if want := fmt.Sprintf("requested Listener %q", env.name); !strings.Contains(m.err.Error(), want) {
		t.Errorf("not serving error = %q, want it to say %s", m.err, want)
	}
	waitClosed(ctx, t, conn, "the connection served before the mismatch")
	expectClosedWithoutBytes(ctx, t, env)

	env.update(ctx, t, good)
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	unaryOK(ctx, t, client)
}

// TestAmbientErrorsKeepServing: a NACKed Listener update or a lost control
// plane leaves the last good configuration serving, its connections
// untouched (gRFC A36). The first connectivity error after a Listener answer
// is a warning, the repeats are not.
func TestAmbientErrorsKeepServing(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	cfg := env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r", isDefault: true}))
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	client := env.dial(t)
	unaryOK(ctx, t, client)
	conn := env.lastConn(t)

	env.xds.SendListenerAmbient(ctx, t, env.name, xdsfake.NACK(xdsresource.ListenerType, env.name, errors.New("bad filter chain")))
	for range 3 {
		env.xds.SendListenerAmbient(ctx, t, env.name, xdsfake.ConnectionError(errors.New("connection refused")))
	}
	env.noModeChange(t)
	if env.l.cur.Load() != cfg {
		t.Fatal("the configuration changed on an ambient error")
	}
	checkStats(t, serverNamed(t, cfg, "x"), connserver.Stats{Live: 1}, "the chain after ambient errors")
	unaryOK(ctx, t, client)
	if n := env.dials.Load(); n != 1 || conn.isClosed() {
		t.Errorf("the client opened %d connection(s) (first closed: %v), want its first one still open", n, conn.isClosed())
	}
	prefix := fmt.Sprintf("[listener %s:%d]", env.host, env.port)
	if n := logs.Count("W", prefix, "connection to management server"); n != 1 {
		t.Errorf("%d connectivity warnings, want 1: %q", n, logs.Matching(prefix))
	}
	if n := logs.Count("I", prefix, "keeping the last good configuration", "rejected"); n != 1 {
		t.Errorf("%d NACK lines, want 1: %q", n, logs.Matching(prefix))
	}
}

// TestWaitsForRDS: a Listener naming a RouteConfiguration is applied only
// once it has had a first answer (gRFC A36), the first Listener as a later
// one: meanwhile, the last applied Listener keeps serving.
func TestWaitsForRDS(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	env.send(ctx, t, testListener(env, chainSpec{name: "x", rdsName: "rds-1", isDefault: true}))
	env.noModeChange(t)
	if env.l.cur.Load() != nil {
		t.Fatal("a Listener was applied before its RouteConfiguration answered")
	}
	if n := env.xds.Watching(xdsresource.RouteConfigType, "rds-1"); n != 1 {
		t.Fatalf("%d watches of rds-1, want 1", n)
	}
	expectClosedWithoutBytes(ctx, t, env)

	env.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, e2e.DefaultRouteConfig("rds-1")))
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	client := env.dial(t)
	unaryOK(ctx, t, client)

	// A new Listener naming another RouteConfiguration waits for it; the
	// old one serves meanwhile.
	old := env.l.cur.Load()
	env.send(ctx, t, testListener(env, chainSpec{name: "x", rdsName: "rds-2", isDefault: true}))
	if env.l.cur.Load() != old {
		t.Fatal("a Listener was applied before its new RouteConfiguration answered")
	}
	unaryOK(ctx, t, client)
	env.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, e2e.DefaultRouteConfig("rds-2")))
	if cfg := env.l.cur.Load(); cfg == old || cfg.res.Table.Chains()[0].HCM.RDSName != "rds-2" {
		t.Fatal("the Listener naming rds-2 was not applied once rds-2 answered")
	}
	unaryOK(ctx, t, client)
	env.noModeChange(t)
}

// TestRDSWatchesFollowListener: the RouteConfigurations watched are those
// the applied and the pending Listener name; the others are unwatched
// (Retain), all of them when the Listener goes.
func TestRDSWatchesFollowListener(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	watched := func(want ...string) {
		t.Helper()
		got := env.xds.WatchedNames(xdsresource.RouteConfigType)
		ok := len(got) == len(want)
		for _, n := range want {
			ok = ok && got[n]
		}
		if !ok {
			t.Fatalf("RouteConfigurations watched: %v, want %q", got, want)
		}
	}
	a := chainSpec{name: "a", srcPrefix: "127.0.0.0/8", rdsName: "rds-a"}
	def := chainSpec{name: "def", rdsName: "rds-def", isDefault: true}
	env.send(ctx, t, testListener(env, a, def))
	watched("rds-a", "rds-def")
	env.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, e2e.DefaultRouteConfig("rds-a")))
	env.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, e2e.DefaultRouteConfig("rds-def")))
	env.waitMode(ctx, t, connectivity.ServingModeServing)

	// Pending: the applied Listener's names stay watched.
	def.rdsName = "rds-def-2"
	env.send(ctx, t, testListener(env, a, def))
	watched("rds-a", "rds-def", "rds-def-2")
	env.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, e2e.DefaultRouteConfig("rds-def-2")))
	watched("rds-a", "rds-def-2")

	env.xds.SendListenerError(ctx, t, env.name, xdsfake.DoesNotExist(xdsresource.ListenerType, env.name))
	env.waitMode(ctx, t, connectivity.ServingModeNotServing)
	watched()
}

// TestRDSNotFoundThenPublished: a Listener whose RouteConfiguration does not
// exist is served, its RPCs failing UNAVAILABLE naming the resource (gRFC
// A36); each RDS update then reaches the connection in place, without a
// drain.
func TestRDSNotFoundThenPublished(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t, envOptions{})
	env.send(ctx, t, testListener(env, chainSpec{name: "x", rdsName: "rds-1", isDefault: true}))
	env.xds.SendRouteError(ctx, t, "rds-1", xdsfake.DoesNotExist(xdsresource.RouteConfigType, "rds-1"))
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	client := env.dial(t)
	_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), `"rds-1"`) {
		t.Fatalf("UnaryCall = %v, want UNAVAILABLE naming rds-1", err)
	}
	cs := serverNamed(t, env.l.cur.Load(), "x")

	env.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, e2e.DefaultRouteConfig("rds-1")))
	unaryOK(ctx, t, client)

	// A route without non_forwarding_action fails RPCs (gRFC A36).
	bad := e2e.DefaultRouteConfig("rds-1")
	bad.VirtualHosts[0].Routes[0].Action = &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"}}}
	env.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, bad))
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("UnaryCall after the bad routes = %v, want UNAVAILABLE", err)
	}
	checkStats(t, cs, connserver.Stats{Live: 1}, "the chain after the RDS updates")
	if n := env.dials.Load(); n != 1 {
		t.Fatalf("%d dials, want the one connection untouched", n)
	}
	env.noModeChange(t)
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
	// Old chain servers go away once their connections are closed.
	env.waitConns(ctx, t, "only the last chain server left", func() bool { return len(env.l.conns.ChainServers()) == 1 })
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
	checkStats(t, serverNamed(t, cfg, "a"), connserver.Stats{Live: 2}, "chain a")

	// Only the unused default chain changes: nothing drains.
	b.routeName = "r2"
	env.update(ctx, t, testListener(env, a, b))
	if n := logs.Count("I", prefix, "draining"); n != 0 {
		t.Errorf("%d drain lines after an update that drained nothing, want 0: %q", n, logs.Matching(prefix, "draining"))
	}
	a.routeName = "r3"
	env.update(ctx, t, testListener(env, a, b))
	if n := logs.Count("I", prefix, "draining 2 connection(s) (Listener update)"); n != 1 {
		t.Errorf("%d drain lines, want 1: %q", n, logs.Matching(prefix, "draining"))
	}
	if v, _ := mr.Value(t, metrics.Drains, lis); v != 1 {
		t.Errorf("%s = %d, want 1", metrics.Drains, v)
	}
}

// TestNotServingErrorNamesTheListener: the error of a Listener the server
// cannot serve names the Listener requested, once, and for a socket Go
// reports as [::] says that the name has [::] and what to do; the hint is
// not given for a Listener that was found and rejected, nor for 0.0.0.0.
func TestNotServingErrorNamesTheListener(t *testing.T) {
	const hint = "the Listener's name has [::], not 0.0.0.0"
	for _, tc := range []struct {
		desc, addr string
		err        func(name string) error
		wantName   bool // the name added (not already in err)
		wantHint   bool
	}{
		{"does not exist, [::]", "[::]:50051", func(n string) error { return xdsfake.DoesNotExist(xdsresource.ListenerType, n) }, false, true},
		{"does not exist, 0.0.0.0", "0.0.0.0:50051", func(n string) error { return xdsfake.DoesNotExist(xdsresource.ListenerType, n) }, false, false},
		{"does not exist, one IP", "10.0.0.5:50051", func(n string) error { return xdsfake.DoesNotExist(xdsresource.ListenerType, n) }, false, false},
		{"timeout, [::]", "[::]:50051", func(n string) error {
			return &xdsclient.Error{Kind: xdsclient.KindTimeout, TypeName: "Listener", Name: n}
		}, false, true},
		{"NACK, [::]", "[::]:50051", func(n string) error {
			return &xdsclient.Error{Kind: xdsclient.KindNACK, TypeName: "Listener", Name: n, Err: errors.New("bad")}
		}, false, false},
		{"address mismatch, [::]", "[::]:50051", func(string) error {
			return &filterchain.AddressMismatchError{Listener: netip.MustParseAddrPort("0.0.0.0:50051"), Listening: netip.MustParseAddrPort("[::]:50051")}
		}, true, true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			name := "grpc/server?xds.resource.listening_address=" + tc.addr
			l := &Listener{p: Params{Addr: netip.MustParseAddrPort(tc.addr), Name: name}}
			in := tc.err(name)
			got := l.notServingError(in)
			if !errors.Is(got, in) {
				t.Errorf("%v does not wrap %v", got, in)
			}
			msg := got.Error()
			if n := strings.Count(msg, fmt.Sprintf("%q", name)); n != 1 {
				t.Errorf("%q names %q %d times, want once", msg, name, n)
			}
			if added := strings.Contains(msg, "requested Listener"); added != tc.wantName {
				t.Errorf("%q: says \"requested Listener\" = %v, want %v", msg, added, tc.wantName)
			}
			if has := strings.Contains(msg, hint); has != tc.wantHint {
				t.Errorf("%q: [::] hint = %v, want %v", msg, has, tc.wantHint)
			}
		})
	}
}
