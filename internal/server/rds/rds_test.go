package rds_test

import (
	"context"
	"errors"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds/internal/server/rds"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
	"github.com/proxyless-grpc/xds/internal/syncutil"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/xdsfake"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

const defaultTestTimeout = 10 * time.Second

var logs *testutils.Logs

func TestMain(m *testing.M) {
	logs = testutils.InstallLogs(false)
	testutils.VerifyNoLeaks(m)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// env is an rds.Handler on a serializer of its own, as a listener runs it,
// watching through a fake xDS client.
type env struct {
	xds     *xdsfake.Client
	h       *rds.Handler
	ser     *syncutil.CallbackSerializer
	answers chan struct{} // one per OnAnswer
	logTag  string        // in each line the handler logs, "[rds <run name>]"
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{xds: xdsfake.NewClient(nil), ser: syncutil.NewCallbackSerializer(), answers: make(chan struct{}, 100)}
	name := testutils.RunName(t)
	e.logTag = "[rds " + name + "]"
	e.h = rds.New(rds.Params{
		Client: e.xds,
		Schedule: func(f func(), onDone func()) {
			e.ser.ScheduleOr(func(ctx context.Context) {
				if ctx.Err() == nil {
					f()
				}
				onDone()
			}, onDone)
		},
		OnAnswer: func() { e.answers <- struct{}{} },
		Log:      serverlog.New("[rds %s]", name),
	})
	t.Cleanup(func() {
		e.do(t, e.h.Close)
		if n := len(e.xds.WatchedNames(xdsresource.RouteConfigType)); n != 0 {
			t.Errorf("%d RouteConfiguration watch(es) left after Close", n)
		}
		e.ser.Close()
		<-e.ser.Done()
	})
	return e
}

// do runs f on the serializer and waits for it.
func (e *env) do(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	if !e.ser.TrySchedule(func(context.Context) { f(); close(done) }) {
		t.Fatal("serializer closed")
	}
	<-done
}

// ready calls Ready(l) on the serializer.
func (e *env) ready(t *testing.T, l *xdsresource.Listener) bool {
	t.Helper()
	var ready bool
	e.do(t, func() { ready = e.h.Ready(l) })
	return ready
}

// answered checks that exactly n OnAnswer calls were made since the last
// check. Deliveries return once handled, so the calls have been made.
func (e *env) answered(t *testing.T, n int) {
	t.Helper()
	if got := len(e.answers); got != n {
		t.Fatalf("%d OnAnswer call(s), want %d", got, n)
	}
	for range n {
		<-e.answers
	}
}

// listenerNaming decodes a server Listener with one filter chain per name,
// each taking its routes from the RouteConfiguration of that name.
func listenerNaming(t *testing.T, names ...string) *xdsresource.Listener {
	t.Helper()
	l := e2e.DefaultServerListener("127.0.0.1", 1, names[0])
	for i, n := range names[1:] {
		fc := proto.Clone(e2e.DefaultServerListener("127.0.0.1", 1, n).FilterChains[0]).(*listenerpb.FilterChain)
		fc.Name = fc.Name + "-" + n
		fc.FilterChainMatch = &listenerpb.FilterChainMatch{SourcePorts: []uint32{uint32(i + 1)}}
		l.FilterChains = append(l.FilterChains, fc)
	}
	return xdsfake.DecodeListener(t, l)
}

// routeWithVHost is the default RouteConfiguration called name, with its
// virtual host called vh: a way to tell two versions apart.
func routeWithVHost(t *testing.T, name, vh string) *xdsresource.RouteConfig {
	t.Helper()
	rc := e2e.DefaultRouteConfig(name)
	rc.VirtualHosts[0].Name = vh
	return xdsfake.DecodeRoute(t, rc)
}

// vhostOf returns the virtual host of the first route of src's routes, or
// "" when they have none.
func vhostOf(src *rpcpath.Source) string {
	r := src.Load().Router()
	if r == nil || len(r.Routes()) == 0 {
		return ""
	}
	return r.Routes()[0].VirtualHost
}

// sources returns the sources of the chains of l, in order.
func (e *env) sources(t *testing.T, l *xdsresource.Listener) []*rpcpath.Source {
	t.Helper()
	var out []*rpcpath.Source
	e.do(t, func() {
		for _, fc := range l.Table.Chains() {
			src, _ := e.h.Source(fc.HCM)
			out = append(out, src)
		}
	})
	return out
}

// TestReadyAfterFirstAnswers: a Listener is ready once each of its
// RouteConfigurations has had a first answer (gRFC A36), whether routes or
// a resource error; a chain whose RouteConfiguration does not exist fails
// its RPCs with that error.
func TestReadyAfterFirstAnswers(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	l := listenerNaming(t, "rds-a", "rds-b")
	e.do(t, func() { e.h.Watch(l) })
	if got := e.xds.WatchedNames(xdsresource.RouteConfigType); len(got) != 2 || !got["rds-a"] || !got["rds-b"] {
		t.Fatalf("watched %v, want rds-a and rds-b", got)
	}
	if e.ready(t, l) {
		t.Fatal("Ready before any answer")
	}

	e.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, e2e.DefaultRouteConfig("rds-a")))
	e.answered(t, 1)
	if e.ready(t, l) {
		t.Fatal("Ready with rds-b unanswered")
	}
	e.xds.SendRouteError(ctx, t, "rds-b", xdsfake.DoesNotExist(xdsresource.RouteConfigType, "rds-b"))
	e.answered(t, 1)
	if !e.ready(t, l) {
		t.Fatal("not Ready after both answered")
	}

	srcs := e.sources(t, l)
	if r := srcs[0].Load(); r.Err() != nil || r.Router().Name() != "rds-a" {
		t.Errorf("rds-a source: router %v, err %v; want rds-a's routes", r.Router(), r.Err())
	}
	if err := srcs[1].Load().Err(); !errors.Is(err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("rds-b source error = %v, want does-not-exist", err)
	}

	// Watching the same Listener again starts no second watch.
	e.do(t, func() { e.h.Watch(l) })
	if n := e.xds.Watching(xdsresource.RouteConfigType, "rds-a"); n != 1 {
		t.Errorf("%d watches of rds-a, want 1", n)
	}
}

// TestUpdateReachesSource: chains of one HttpConnectionManager share a
// source, and each answer replaces its routes in place: the connections
// reading it see the new routes on their next RPC, without a drain. A
// resource error then replaces the routes with that error.
func TestUpdateReachesSource(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	l := listenerNaming(t, "rds-a")
	e.do(t, func() { e.h.Watch(l) })
	e.xds.SendRoute(ctx, t, routeWithVHost(t, "rds-a", "v1"))
	hcm := l.Table.Chains()[0].HCM
	var src, src2 *rpcpath.Source
	var release, release2 func()
	e.do(t, func() {
		src, release = e.h.Source(hcm)
		src2, release2 = e.h.Source(hcm)
	})
	if src != src2 {
		t.Error("two chains with one HttpConnectionManager got different sources")
	}
	if got := vhostOf(src); got != "v1" {
		t.Fatalf("routes of virtual host %q, want v1", got)
	}

	e.xds.SendRoute(ctx, t, routeWithVHost(t, "rds-a", "v2"))
	if got := vhostOf(src); got != "v2" {
		t.Errorf("after an update: routes of virtual host %q, want v2", got)
	}

	e.xds.SendRouteError(ctx, t, "rds-a", xdsfake.DoesNotExist(xdsresource.RouteConfigType, "rds-a"))
	if err := src.Load().Err(); !errors.Is(err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("after does-not-exist: source error %v, want does-not-exist", err)
	}
	e.xds.SendRoute(ctx, t, routeWithVHost(t, "rds-a", "v3"))
	if got := vhostOf(src); got != "v3" {
		t.Errorf("after a new version: routes of virtual host %q, want v3", got)
	}
	e.answered(t, 4)
	release()
	release2()
}

// TestAmbientErrors: a NACK or a connectivity error keeps the last good
// routes; before any answer, it is the first answer: the Listener becomes
// ready and the chain's RPCs fail with it (gRFC A36).
func TestAmbientErrors(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	l := listenerNaming(t, "rds-a", "rds-b")
	e.do(t, func() { e.h.Watch(l) })
	e.xds.SendRoute(ctx, t, routeWithVHost(t, "rds-a", "good"))
	e.xds.SendRouteAmbient(ctx, t, "rds-b", xdsfake.ConnectionError(errors.New("connection refused")))
	e.answered(t, 2)
	if !e.ready(t, l) {
		t.Fatal("not Ready after a connectivity error answered rds-b")
	}
	srcs := e.sources(t, l)
	var xe *xdsclient.Error
	if err := srcs[1].Load().Err(); !errors.As(err, &xe) || xe.Kind != xdsclient.KindConnection {
		t.Errorf("rds-b source error = %v, want the connectivity error", err)
	}

	e.xds.SendRouteAmbient(ctx, t, "rds-a", xdsfake.NACK(xdsresource.RouteConfigType, "rds-a", errors.New("bad route")))
	e.xds.SendRouteAmbient(ctx, t, "rds-a", xdsfake.ConnectionError(errors.New("connection reset")))
	e.answered(t, 0)
	if r := srcs[0].Load(); r.Err() != nil || vhostOf(srcs[0]) != "good" {
		t.Errorf("rds-a after ambient errors: err %v, virtual host %q; want the last good routes", r.Err(), vhostOf(srcs[0]))
	}
	if n := logs.Count("W", e.logTag, `"rds-a"`, "keeping the last good version"); n != 2 {
		t.Errorf("%d 'keeping the last good version' warnings, want 2: %q", n, logs.Matching(e.logTag))
	}
}

// TestRetainCancelsUnused: Retain cancels the watches of the names no
// Listener it is given uses; the sources still held keep their last routes,
// and an answer that was already on its way when the watch was cancelled
// changes nothing.
func TestRetainCancelsUnused(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	old := listenerNaming(t, "rds-a", "rds-b")
	e.do(t, func() { e.h.Watch(old) })
	e.xds.SendRoute(ctx, t, routeWithVHost(t, "rds-a", "a1"))
	e.xds.SendRoute(ctx, t, routeWithVHost(t, "rds-b", "b1"))
	e.answered(t, 2)
	srcs := e.sources(t, old)
	// The real client may already be calling a watcher when it is
	// cancelled; keep rds-a's to play that call afterwards.
	var late []xdsclient.ResourceWatcher
	e.xds.Deliver(ctx, t, xdsresource.RouteConfigType, "rds-a", func(w xdsclient.ResourceWatcher, onDone func()) {
		late = append(late, w)
		onDone()
	})

	next := listenerNaming(t, "rds-b", "rds-c")
	e.do(t, func() {
		e.h.Watch(next)
		e.h.Retain(next)
	})
	got := e.xds.WatchedNames(xdsresource.RouteConfigType)
	if len(got) != 2 || !got["rds-b"] || !got["rds-c"] {
		t.Errorf("watched %v after Retain, want rds-b and rds-c", got)
	}
	if got := vhostOf(srcs[0]); got != "a1" {
		t.Errorf("the rds-a source still in use: virtual host %q, want its last routes (a1)", got)
	}

	xdsfake.CallWatcher(ctx, t, late[0], func(w xdsclient.ResourceWatcher, onDone func()) {
		w.ResourceChanged(routeWithVHost(t, "rds-a", "a2"), onDone)
	})
	e.answered(t, 0)
	if got := vhostOf(srcs[0]); got != "a1" {
		t.Errorf("an answer to a cancelled watch changed the routes to virtual host %q", got)
	}

	// Neither Listener: every watch goes.
	e.do(t, func() { e.h.Retain(nil) })
	if got := e.xds.WatchedNames(xdsresource.RouteConfigType); len(got) != 0 {
		t.Errorf("watched %v after Retain of no Listener, want none", got)
	}
}

// TestConfigErrorLogging: gRFC A36 configuration error logging: a warning
// for each answer whose routes fail RPCs, one when they are fixed.
func TestConfigErrorLogging(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	const name = "rds-logging"
	l := listenerNaming(t, name)
	e.do(t, func() { e.h.Watch(l) })
	bad := e2e.DefaultRouteConfig(name)
	bad.VirtualHosts[0].Routes[0].Action = &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"}}}
	for _, rc := range []*routepb.RouteConfiguration{bad, e2e.DefaultRouteConfig(name)} {
		e.xds.SendRoute(ctx, t, xdsfake.DecodeRoute(t, rc))
	}
	e.answered(t, 2)
	if n := logs.Count("W", e.logTag, "configuration error:", `"`+name+`"`, "non_forwarding_action"); n != 1 {
		t.Errorf("%d configuration error warnings, want 1: %q", n, logs.Matching(e.logTag))
	}
	if n := logs.Count("W", e.logTag, "configuration error fixed", `"`+name+`"`); n != 1 {
		t.Errorf("%d 'fixed' warnings, want 1: %q", n, logs.Matching(e.logTag))
	}
}
