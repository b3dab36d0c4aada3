package rds_test

import (
	"context"
	"strings"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/server/rds"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
	"github.com/proxyless-grpc/xds/internal/syncutil"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

var logs *testutils.Logs

func TestMain(m *testing.M) {
	logs = testutils.InstallLogs(false)
	testutils.VerifyNoLeaks(m)
}

// env is an rds.Handler on a serializer of its own, as a listener runs it,
// with a real xDS client and management server.
type env struct {
	ms      *e2e.ManagementServer
	h       *rds.Handler
	ser     *syncutil.CallbackSerializer
	answers chan struct{} // one per OnAnswer
	logTag  string        // in each line the handler logs, "[rds <run name>]"
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{ms: e2e.StartManagementServer(t, e2e.ManagementServerOptions{}), ser: syncutil.NewCallbackSerializer(), answers: make(chan struct{}, 100)}
	name := testutils.RunName(t)
	e.logTag = "[rds " + name + "]"
	cfg, err := bootstrap.Parse(e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{e.ms.Address}, NodeID: "node-" + name}))
	if err != nil {
		t.Fatal(err)
	}
	client, err := xdsclient.New(cfg, xdsclient.Options{WatchExpiryTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.h = rds.New(rds.Params{
		Client: client,
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
		e.ser.Close()
		<-e.ser.Done()
		client.Close()
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

func (e *env) waitAnswer(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-e.answers:
	case <-ctx.Done():
		t.Fatal("no RDS answer")
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
	b, err := proto.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	_, d, err := xdsresource.ListenerType.Decode(xdsclient.DecodeInput{Resource: &anypb.Any{TypeUrl: xdsresource.ListenerTypeURL, Value: b}})
	if err != nil {
		t.Fatal(err)
	}
	return d.(*xdsresource.Listener)
}

// TestHandler: a Listener is ready once each of its RouteConfigurations has
// answered; chains of one HttpConnectionManager share a source, which
// each answer updates; a name no Listener uses any more is unwatched, while
// the sources still in use keep their last routes.
func TestHandler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := newEnv(t)
	l := listenerNaming(t, "rds-a", "rds-b")
	var ready bool
	e.do(t, func() { e.h.Watch(l); ready = e.h.Ready(l) })
	if ready {
		t.Fatal("Ready before any answer")
	}
	if err := e.ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{e2e.DefaultRouteConfig("rds-a")}}); err != nil {
		t.Fatal(err)
	}
	e.waitAnswer(ctx, t)
	e.do(t, func() { ready = e.h.Ready(l) })
	if ready {
		t.Fatal("Ready with rds-b unanswered")
	}
	e.waitAnswer(ctx, t) // rds-b: the does-not-exist timer
	e.do(t, func() { ready = e.h.Ready(l) })
	if !ready {
		t.Fatal("not Ready after both answered")
	}

	chains := l.Table.Chains()
	var srcA, srcA2, srcB *rpcpath.Source
	var releaseA func()
	e.do(t, func() {
		srcA, releaseA = e.h.Source(chains[0].HCM)
		srcA2, _ = e.h.Source(chains[0].HCM)
		srcB, _ = e.h.Source(chains[1].HCM)
	})
	if srcA != srcA2 {
		t.Error("two chains with one HttpConnectionManager got different sources")
	}
	if r := srcA.Load(); r.Err() != nil || r.Router().Name() != "rds-a" {
		t.Errorf("rds-a source: router %v, err %v; want rds-a's routes", r.Router(), r.Err())
	}
	if r := srcB.Load(); r.Err() == nil || !strings.Contains(r.Err().Error(), `"rds-b" does not exist`) {
		t.Errorf("rds-b source error = %v, want it does not exist", r.Err())
	}

	// An update replaces the routes of the source in use.
	rc := e2e.DefaultRouteConfig("rds-a")
	rc.VirtualHosts[0].Name = "updated"
	if err := e.ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{rc, e2e.DefaultRouteConfig("rds-b")}}); err != nil {
		t.Fatal(err)
	}
	for srcB.Load().Err() != nil || srcA.Load().Router() == nil || srcA.Load().Router().Routes()[0].VirtualHost != "updated" {
		if ctx.Err() != nil {
			t.Fatal("the sources did not get the updated routes")
		}
		time.Sleep(time.Millisecond)
	}

	// No Listener uses rds-a and rds-b any more: both are unwatched; the
	// sources keep their last routes.
	e.do(t, func() { e.h.Retain(listenerNaming(t, "rds-c")) })
	if _, err := e.ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.RouteType)); err != nil {
		t.Fatalf("waiting for the unsubscription: %v", err)
	}
	if r := srcA.Load(); r.Router() == nil {
		t.Error("a source still in use lost its routes when its watch was cancelled")
	}
	releaseA()
}

// TestConfigErrorLogging: gRFC A36 configuration error logging: a warning
// for each answer whose routes fail RPCs, one when they are fixed.
func TestConfigErrorLogging(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := newEnv(t)
	const name = "rds-logging"
	l := listenerNaming(t, name)
	e.do(t, func() { e.h.Watch(l) })
	bad := e2e.DefaultRouteConfig(name)
	bad.VirtualHosts[0].Routes[0].Action = &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"}}}
	for _, rc := range []*routepb.RouteConfiguration{bad, e2e.DefaultRouteConfig(name)} {
		if err := e.ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{rc}}); err != nil {
			t.Fatal(err)
		}
		e.waitAnswer(ctx, t)
	}
	if n := logs.Count("W", e.logTag, "configuration error:", `"`+name+`"`, "non_forwarding_action"); n != 1 {
		t.Errorf("%d configuration error warnings, want 1: %q", n, logs.Matching(e.logTag))
	}
	if n := logs.Count("W", e.logTag, "configuration error fixed", `"`+name+`"`); n != 1 {
		t.Errorf("%d 'fixed' warnings, want 1: %q", n, logs.Matching(e.logTag))
	}
}
