package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds"
	srvstatus "github.com/proxyless-grpc/xds/internal/server/status"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

type fcm = listenerpb.FilterChainMatch

func srcMatch(prefixes ...string) *fcm {
	m := &fcm{}
	for _, p := range prefixes {
		m.SourcePrefixRanges = append(m.SourcePrefixRanges, cidr(p))
	}
	return m
}

// TestDrain_InFlightStreamCompletes checks that a Listener update drains the
// connections of a changed chain gracefully: a stream started before the
// update keeps flowing and ends with OK after it, while new connections
// (the listening socket stays open) and new RPCs of the drained client see
// the new configuration; the serving mode does not change.
func TestDrain_InFlightStreamCompletes(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A"}}, nil)
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.chainOf(ctx, t, "A", "B"); got != "A" {
		t.Fatalf("chain %q, want A", got)
	}
	st := c.startStream(ctx, t)

	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "B"}}, nil)}, nil)
	c2 := newClient(t, addr, "127.0.0.1", 0)
	c2.waitForChain(ctx, t, "B", "A", "B")

	// The old stream still flows, and ends with OK.
	for range 3 {
		st.pingPong(t)
	}
	st.finish(t)
	// The old client moves to the new configuration on a new connection.
	c.waitForChain(ctx, t, "B", "A", "B")
	if got := c.dials.Load(); got != 2 {
		t.Errorf("old client dialed %d times, want 2 (drained once)", got)
	}
	s.modes.expectNone(t, addr, defaultTestShortTimeout)
}

// TestDrain_GraceTime checks the wiring of DrainGraceTime: a drained
// connection whose stream outlives the grace time is closed, failing the
// stream, and the listening socket stays open. The timing (the stream works
// until the deadline, and is cut at it) is checked on a fake clock by
// connserver's TestDrainGrace.
func TestDrain_GraceTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		grace   time.Duration
		deleted bool // the Listener is deleted instead of changed
	}{
		{desc: "zero: closed at once", grace: 0},
		{desc: "1s", grace: time.Second},
		{desc: "1s, Listener deleted", grace: time.Second, deleted: true},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			env := newTestEnv(t)
			_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
				return testListener(a, []chainSpec{{name: "A"}}, nil)
			}, nil, xds.DrainGraceTime(test.grace))
			c := newClient(t, addr, "127.0.0.1", 0)
			st := c.startStream(ctx, t)

			if test.deleted {
				env.update(ctx, t, nil, nil)
			} else {
				env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "B"}}, nil)}, nil)
			}
			errc := make(chan error, 1)
			go func() {
				for {
					if err := st.roundTrip(); err != nil {
						errc <- err
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			select {
			case err := <-errc:
				if errors.Is(err, io.EOF) || status.Code(err) == codes.OK {
					t.Fatalf("stream ended with %v, want it failed by the closed connection", err)
				}
			case <-ctx.Done():
				t.Fatalf("stream still running after a drain with grace time %v", test.grace)
			}
			if test.deleted {
				return
			}
			// The listening socket is still open.
			c2 := newClient(t, addr, "127.0.0.1", 0)
			c2.waitForChain(ctx, t, "B", "A", "B")
		})
	}
}

// TestDrain_OnlyChangedChains checks that a Listener update drains only the
// connections whose chain changed; a connection whose chain is unchanged
// keeps running on the same TCP connection.
func TestDrain_OnlyChangedChains(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	chainA := chainSpec{name: "A", match: srcMatch("127.0.0.0/8")}
	chainB := chainSpec{name: "B", match: srcMatch("127.0.0.2/32"), allowed: []string{methodEmpty, methodUnary, methodStream}}
	chainB2 := chainSpec{name: "B", match: srcMatch("127.0.0.2/32"), allowed: []string{methodEmpty, methodStream}}
	names := []string{"A", "B"}
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{chainA, chainB}, nil)
	}, nil)

	c1 := newClient(t, addr, "127.0.0.1", 0) // A
	c2 := newClient(t, addr, "127.0.0.2", 0) // B, which changes
	c3 := newClient(t, addr, "127.0.0.3", 0) // A
	for _, tc := range []struct {
		c    *testClient
		want string
	}{{c1, "A"}, {c2, "B"}, {c3, "A"}} {
		if got := tc.c.chainOf(ctx, t, names...); got != tc.want {
			t.Fatalf("initial chain %q, want %q", got, tc.want)
		}
	}
	st1, st2, st3 := c1.startStream(ctx, t), c2.startStream(ctx, t), c3.startStream(ctx, t)

	// Chain B changes (UnaryCall no longer allowed); A does not.
	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{chainA, chainB2}, nil)}, nil)
	probe := newClient(t, addr, "127.0.0.2", 0)
	waitForCode(ctx, t, "UnaryCall on a new connection to the changed chain B", codes.Unavailable, probe.unaryCallNoOpts)
	// The update drained c2's connection; a wrong drain of chain A's would
	// have been started before (the listener drains rerouted connections,
	// then retired chains, after storing the new table): once the first is
	// visible, chain A must still have both of its connections in service.
	waitForChainConns(ctx, t, s, "B", true, chainConns{draining: 1})
	waitForChainConns(ctx, t, s, "A", false, chainConns{live: 2})
	for _, st := range []*stream{st1, st2, st3} {
		st.pingPong(t)
	}
	st2.finish(t) // drained, but the in-flight stream ends with OK
	waitForCode(ctx, t, "UnaryCall of the client of the changed chain B", codes.Unavailable, c2.unaryCallNoOpts)
	if got := c2.dials.Load(); got != 2 {
		t.Errorf("client of the changed chain B dialed %d times, want 2 (drained once)", got)
	}
	for i, c := range []*testClient{c1, c3} {
		if got := c.unaryCall(ctx); got != codes.OK {
			t.Errorf("UnaryCall of client %d of the unchanged chain A: %v, want OK", i, got)
		}
		if got := c.dials.Load(); got != 1 {
			t.Errorf("client %d of the unchanged chain A dialed %d times, want 1 (same connection)", i, got)
		}
	}
	st1.finish(t)
	st3.finish(t)

	s.modes.expectNone(t, addr, defaultTestShortTimeout)
}

// TestDrain_RerouteDrainsOnlyReroutedConnections checks that a Listener
// update that adds a chain, leaving the others unchanged, drains only the
// connections the new table routes to the new chain: another connection of
// the same unchanged chain keeps running on the same TCP connection.
func TestDrain_RerouteDrainsOnlyReroutedConnections(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	chainA := chainSpec{name: "A", match: srcMatch("127.0.0.0/8")}
	chainB := chainSpec{name: "B", match: srcMatch("127.0.0.2/32")}
	chainC := chainSpec{name: "C", match: srcMatch("127.0.0.1/32")}
	names := []string{"A", "B", "C"}
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{chainA, chainB}, nil)
	}, nil)
	c1 := newClient(t, addr, "127.0.0.1", 0) // A, then rerouted to C
	c2 := newClient(t, addr, "127.0.0.2", 0) // B throughout
	c3 := newClient(t, addr, "127.0.0.3", 0) // A throughout
	for _, tc := range []struct {
		c    *testClient
		want string
	}{{c1, "A"}, {c2, "B"}, {c3, "A"}} {
		if got := tc.c.chainOf(ctx, t, names...); got != tc.want {
			t.Fatalf("initial chain %q, want %q", got, tc.want)
		}
	}
	st1, st3 := c1.startStream(ctx, t), c3.startStream(ctx, t)

	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{chainA, chainB, chainC}, nil)}, nil)
	probe := newClient(t, addr, "127.0.0.1", 0)
	probe.waitForChain(ctx, t, "C", names...)
	// c1's connection, rerouted to C, drains; c3's stays live on A. Both
	// are decided in the same step of the update: once the drain shows, a
	// wrong one would too.
	waitForChainConns(ctx, t, s, "A", false, chainConns{live: 1, draining: 1})
	st1.pingPong(t)
	st1.finish(t) // drained, but the in-flight stream ends with OK
	c1.waitForChain(ctx, t, "C", names...)
	if got := c1.dials.Load(); got != 2 {
		t.Errorf("client rerouted to chain C dialed %d times, want 2", got)
	}
	st3.pingPong(t)
	st3.finish(t)
	for _, tc := range []struct {
		c    *testClient
		want string
	}{{c2, "B"}, {c3, "A"}} {
		if got := tc.c.chainOf(ctx, t, names...); got != tc.want {
			t.Errorf("chain %q after the update, want %q", got, tc.want)
		}
		if got := tc.c.dials.Load(); got != 1 {
			t.Errorf("client of the unchanged chain %s, still routed to it, dialed %d times, want 1 (same connection)", tc.want, got)
		}
	}
	s.modes.expectNone(t, addr, defaultTestShortTimeout)
}

// TestDrain_NoChangeNoDrain checks updates that change nothing that matters
// to a connection: the identical Listener re-sent, and the same chains in
// another order. Neither drains a connection nor calls the serving-mode
// callback.
func TestDrain_NoChangeNoDrain(t *testing.T) {
	t.Parallel()
	chains := []chainSpec{
		{name: "A", match: srcMatch("127.0.0.1/32")},
		{name: "B", match: srcMatch("127.0.0.2/32")},
	}
	tests := []struct {
		desc   string
		update []chainSpec
	}{
		{desc: "identical Listener", update: chains},
		{desc: "chains reordered", update: []chainSpec{chains[1], chains[0]}},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			env := newTestEnv(t)
			s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
				return testListener(a, chains, nil)
			}, nil)
			c := newClient(t, addr, "127.0.0.1", 0)
			if got := c.chainOf(ctx, t, "A", "B"); got != "A" {
				t.Fatalf("chain %q, want A", got)
			}
			st := c.startStream(ctx, t)
			// Listener version "1" was the first; this is "2".
			env.update(ctx, t, []*listenerpb.Listener{testListener(addr, test.update, nil)}, nil)
			if _, err := env.ms.WaitForRequest(ctx, e2e.IsACK(resourcev3.ListenerType, "2")); err != nil {
				t.Fatalf("waiting for the ACK of the update: %v", err)
			}
			s.modes.expectNone(t, addr, defaultTestShortTimeout)
			st.pingPong(t)
			st.finish(t)
			if got := c.chainOf(ctx, t, "A", "B"); got != "A" {
				t.Errorf("chain %q after the update, want A", got)
			}
			if got := c.dials.Load(); got != 1 {
				t.Errorf("client dialed %d times, want 1 (no drain)", got)
			}
		})
	}
}

// TestDrain_Jitter checks the wiring of DrainJitter: with it set, every
// client of a changed chain still gets its GOAWAY. How the GOAWAYs spread
// over the window is checked on a fake clock by connserver's
// TestDrainJitter.
func TestDrain_Jitter(t *testing.T) {
	t.Parallel()
	const (
		jitter  = time.Second
		clients = 16
	)
	ctx := testContext(t)
	env := newTestEnv(t)
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A"}}, nil)
	}, nil, xds.DrainJitter(jitter))
	var cs []*testClient
	for range clients {
		c := newClient(t, addr, "127.0.0.1", 0)
		if got := c.emptyCall(ctx); got != codes.OK {
			t.Fatalf("EmptyCall: %v", got)
		}
		cs = append(cs, c)
	}
	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "B"}}, nil)}, nil)
	drained := make([]bool, clients)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			drained[i] = c.WaitForStateChange(ctx, connectivity.Ready)
		}()
	}
	wg.Wait()
	for i, ok := range drained {
		if !ok {
			t.Errorf("client %d: connection still READY, want it drained (GOAWAY)", i)
		}
	}
}

// TestManagementServerOutage checks that losing and regaining the
// management server changes nothing: same serving mode, same connections,
// RPCs keep working (gRFC A36: communication failures do not impact the
// configuration).
func TestManagementServerOutage(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A", rds: "rds-A"}}, nil)
	}, []*routepb.RouteConfiguration{routeConfig("rds-A", chainRoutes("A"))})
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v", got)
	}
	st := c.startStream(ctx, t)

	env.ms.Stop()
	s.modes.expectNone(t, addr, 2*defaultTestShortTimeout)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall during the outage: %v, want OK", got)
	}
	st.pingPong(t)
	c2 := newClient(t, addr, "127.0.0.1", 0)
	if got := c2.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall of a new client during the outage: %v, want OK", got)
	}

	seen := len(env.ms.Requests())
	e2e.RestartManagementServer(t, env.ms)
	// The server re-subscribes and ACKs the same resources again.
	if _, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsACK(resourcev3.ListenerType, "1"))); err != nil {
		t.Fatalf("waiting for a Listener ACK after the restart: %v", err)
	}
	if _, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsACK(resourcev3.RouteType, "1"))); err != nil {
		t.Fatalf("waiting for a RouteConfiguration ACK after the restart: %v", err)
	}
	s.modes.expectNone(t, addr, defaultTestShortTimeout)
	st.pingPong(t)
	st.finish(t)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall after the restart: %v, want OK", got)
	}
	if got := c.dials.Load(); got != 1 {
		t.Errorf("client dialed %d times, want 1 (an outage must not drain connections)", got)
	}
}

// TestDrain_RapidUpdatesUnderLoad pushes 200 Listener updates, alternating
// between two configurations that both allow every RPC, while several
// clients run unary and streaming RPCs. No RPC may fail. The RPCs do not use
// WaitForReady: a graceful drain (two-phase GOAWAY, in-flight RPCs finish,
// the listening socket stays open) never fails an RPC, because gRPC queues
// new RPCs while the channel reconnects and transparently retries the ones
// the GOAWAY refused before the server saw them. Goroutine leaks (of
// drained generations, grpc.Servers, watches) are caught by the package's
// TestMain.
func TestDrain_RapidUpdatesUnderLoad(t *testing.T) {
	t.Parallel()
	const updates = 200
	all := func(name string, prefixes ...string) chainSpec {
		return chainSpec{name: name, match: srcMatch(prefixes...)}
	}
	tests := []struct {
		desc string
		opts []grpc.ServerOption
		// listeners are the configurations the updates alternate between;
		// all of them let every RPC through.
		listeners func(net.Addr) [2]*listenerpb.Listener
		routes    [2]*routepb.RouteConfiguration // if set, alternated too, concurrently
	}{
		{
			desc: "alternating route configurations",
			listeners: func(a net.Addr) [2]*listenerpb.Listener {
				return [2]*listenerpb.Listener{
					testListener(a, []chainSpec{{name: "A", routes: routeConfig("x", chainRoutes("A"))}}, nil),
					testListener(a, []chainSpec{{name: "A", routes: routeConfig("y", chainRoutes("A"))}}, &chainSpec{name: "D"}),
				}
			},
		},
		{
			desc: "every connection rerouted by every update",
			listeners: func(a net.Addr) [2]*listenerpb.Listener {
				return [2]*listenerpb.Listener{
					testListener(a, []chainSpec{all("A", "127.0.0.1/32", "127.0.0.3/32"), all("B", "127.0.0.2/32", "127.0.0.4/32")}, nil),
					testListener(a, []chainSpec{all("A", "127.0.0.2/32", "127.0.0.4/32"), all("B", "127.0.0.1/32", "127.0.0.3/32")}, nil),
				}
			},
		},
		{
			desc: "with DrainJitter",
			opts: []grpc.ServerOption{xds.DrainJitter(100 * time.Millisecond)},
			listeners: func(a net.Addr) [2]*listenerpb.Listener {
				return [2]*listenerpb.Listener{
					testListener(a, []chainSpec{{name: "A", routes: routeConfig("x", chainRoutes("A"))}}, nil),
					testListener(a, []chainSpec{{name: "A", routes: routeConfig("y", chainRoutes("A"))}}, nil),
				}
			},
		},
		{
			desc: "RDS chain, with concurrent RDS updates",
			listeners: func(a net.Addr) [2]*listenerpb.Listener {
				return [2]*listenerpb.Listener{
					testListener(a, []chainSpec{{name: "A", rds: "r"}}, nil),
					testListener(a, []chainSpec{{name: "A", rds: "r"}}, &chainSpec{name: "D"}),
				}
			},
			routes: [2]*routepb.RouteConfiguration{routeConfig("r", chainRoutes("A")), routeConfig("r", chainRoutes("B"))},
		},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			env := newTestEnv(t)
			var routes []*routepb.RouteConfiguration
			if test.routes[0] != nil {
				routes = test.routes[:1]
			}
			_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener { return test.listeners(a)[0] }, routes, test.opts...)
			ls := test.listeners(addr)
			l := newLoad(ctx, t, addr, 4)
			var rdsDone chan struct{}
			if routes != nil {
				rdsDone = make(chan struct{})
				go func() {
					defer close(rdsDone)
					for i := range updates {
						if err := env.ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{test.routes[(i+1)%2]}}); err != nil {
							t.Errorf("RDS update: %v", err)
							return
						}
						time.Sleep(7 * time.Millisecond)
					}
				}()
			}
			for i := range updates {
				if err := env.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{ls[(i+1)%2]}}); err != nil {
					t.Fatalf("Listener update: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if rdsDone != nil {
				<-rdsDone
			}
			// Let the last update land, with load running.
			if _, err := env.ms.WaitForRequest(ctx, e2e.IsACK(resourcev3.ListenerType, fmt.Sprint(updates+1))); err != nil {
				t.Errorf("waiting for the ACK of the last update: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
			l.stopAndCheck(t, updates)
		})
	}
}

// load runs unary and streaming RPCs from several clients until stopped.
type load struct {
	stop       context.CancelFunc
	wg         sync.WaitGroup
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []error // the first few failures
}

// newLoad starts, for each of n clients (from 127.0.0.1, .2, ...), two
// goroutines making unary RPCs and one making streams of 5 round trips. No
// RPC uses WaitForReady (see TestDrain_RapidUpdatesUnderLoad).
func newLoad(ctx context.Context, t *testing.T, addr net.Addr, n int) *load {
	l := &load{}
	loadCtx, stop := context.WithCancel(ctx)
	l.stop = stop
	for i := range n {
		c := newClient(t, addr, fmt.Sprintf("127.0.0.%d", i+1), 0)
		for range 2 {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for loadCtx.Err() == nil {
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, err := c.UnaryCall(rctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("x")}})
					cancel()
					l.record(err, "UnaryCall")
				}
			}()
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for loadCtx.Err() == nil {
				l.record(streamOnce(ctx, c, 5), "FullDuplexCall")
			}
		}()
	}
	return l
}

func (l *load) record(err error, what string) {
	if err == nil {
		l.ok.Add(1)
		return
	}
	l.failed.Add(1)
	l.mu.Lock()
	if len(l.errs) < 10 {
		l.errs = append(l.errs, fmt.Errorf("%s: %w", what, err))
	}
	l.mu.Unlock()
}

// stopAndCheck stops the load and fails the test if any RPC failed.
func (l *load) stopAndCheck(t *testing.T, updates int) {
	t.Helper()
	l.stop()
	l.wg.Wait()
	if n := l.failed.Load(); n > 0 {
		t.Errorf("%d of %d RPCs failed during %d updates; first errors: %v", n, n+l.ok.Load(), updates, l.errs)
	}
	if l.ok.Load() < 100 {
		t.Errorf("only %d RPCs succeeded: the load did not run", l.ok.Load())
	}
	t.Logf("%d RPCs during %d updates", l.ok.Load(), updates)
}

// streamOnce runs one FullDuplexCall of n round trips.
func streamOnce(ctx context.Context, c *testClient, n int) error {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := c.FullDuplexCall(sctx)
	if err != nil {
		return err
	}
	st := &stream{TestService_FullDuplexCallClient: s}
	for range n {
		if err := st.roundTrip(); err != nil {
			return err
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("end of stream: %v, want io.EOF", err)
	}
	return nil
}

// TestStopDuringDrain checks Stop and GracefulStop while a drained
// connection still has a stream in flight: GracefulStop waits for it (the
// drain grace time does not cut it short), Stop ends it at once.
func TestStopDuringDrain(t *testing.T) {
	t.Parallel()
	for _, graceful := range []bool{true, false} {
		t.Run(fmt.Sprintf("graceful=%v", graceful), func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			env := newTestEnv(t)
			s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
				return testListener(a, []chainSpec{{name: "A"}}, nil)
			}, nil)
			c := newClient(t, addr, "127.0.0.1", 0)
			st := c.startStream(ctx, t)
			env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "B"}}, nil)}, nil)
			newClient(t, addr, "127.0.0.1", 0).waitForChain(ctx, t, "B", "A", "B")

			stopped := make(chan struct{})
			go func() {
				if graceful {
					s.GracefulStop()
				} else {
					s.Stop()
				}
				close(stopped)
			}()
			if !graceful {
				select {
				case <-stopped:
				case <-ctx.Done():
					t.Fatal("Stop did not return")
				}
				if err := st.roundTrip(); err == nil {
					t.Fatal("stream still works after Stop")
				}
				s.waitServeReturned(nil)
				return
			}
			select {
			case <-stopped:
				t.Fatal("GracefulStop returned while a drained connection had a stream in flight")
			case <-time.After(defaultTestShortTimeout):
			}
			st.pingPong(t)
			st.finish(t)
			select {
			case <-stopped:
			case <-ctx.Done():
				t.Fatal("GracefulStop did not return after the last stream ended")
			}
			s.waitServeReturned(nil)
		})
	}
}

// chainConns counts a chain server's connections, as the status page does.
type chainConns struct{ live, draining int }

// waitForChainConns waits until the chain named name of s's only listener,
// in service or (retired) out of it, has exactly want connections.
func waitForChainConns(ctx context.Context, t *testing.T, s *testServer, name string, retired bool, want chainConns) {
	t.Helper()
	testutils.WaitFor(ctx, t, fmt.Sprintf("chain %q (retired: %v) with %+v connections", name, retired, want), func() error {
		st := srvstatus.ServerOf(s.GRPCServer)
		if len(st.Listeners) != 1 {
			return fmt.Errorf("%d listeners", len(st.Listeners))
		}
		chains := st.Listeners[0].Chains
		if retired {
			chains = st.Listeners[0].Retired
		}
		var got []chainConns
		for _, c := range chains {
			if c.Chain.Name == name {
				got = append(got, chainConns{live: c.Conns.Live, draining: c.Conns.Draining})
			}
		}
		if len(got) != 1 || got[0] != want {
			return fmt.Errorf("chain servers named %q: %+v", name, got)
		}
		return nil
	})
}
