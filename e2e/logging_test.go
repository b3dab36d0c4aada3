package e2e_test

import (
	"context"
	"fmt"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// logView is the warnings of one test in the process-wide log: those that
// contain scope, a string no other test's servers log (a listener address,
// an xDS node ID, a resource name of the test).
type logView struct{ scope string }

func warningsOf(scope string) logView { return logView{scope: scope} }

// count returns how many of the view's warnings contain every one of words.
func (l logView) count(words ...string) int {
	return logs.Count("W", append([]string{l.scope}, words...)...)
}

// all returns the lines of the view.
func (l logView) all() []string { return logs.Matching(l.scope) }

// waitCount waits until count(words...) >= n.
func (l logView) waitCount(ctx context.Context, t *testing.T, n int, words ...string) {
	t.Helper()
	logs.WaitCount(ctx, t, n, "W", append([]string{l.scope}, words...)...)
}

// TestLogging_ServingModeWithoutCallback checks that without a serving-mode
// callback every transition is logged at warning level, with the reason for
// not serving (gRFC A36).
func TestLogging_ServingModeWithoutCallback(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	s, err := xds.NewGRPCServer(xds.BootstrapContents(env.bootstrap))
	if err != nil {
		t.Fatalf("NewGRPCServer: %v", err)
	}
	lis, _ := listen(t, "127.0.0.1")
	ts := &testServer{GRPCServer: s, t: t}
	t.Cleanup(ts.stopAndWait)
	ts.serveOn(lis)
	name := e2e.ServerListenerName(hostPort(lis.Addr()))
	logs := warningsOf(name)

	// Warnings about serving, and about not serving ("not serving" also
	// contains "serving").
	modeLogs := func() (serving, notServing int) {
		notServing = logs.count("not serving", name)
		return logs.count("serving", name) - notServing, notServing
	}
	waitModeLogs := func(wantServing, wantNotServing int) {
		t.Helper()
		testutils.WaitFor(ctx, t, fmt.Sprintf("%d serving and %d not-serving warnings about %q", wantServing, wantNotServing, name), func() error {
			if s, ns := modeLogs(); s < wantServing || ns < wantNotServing {
				return fmt.Errorf("warnings: %q", logs.all())
			}
			return nil
		})
	}
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	waitModeLogs(1, 0)
	env.update(ctx, t, nil, nil)
	waitModeLogs(1, 1)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	waitModeLogs(2, 1)
	// The listener handles an update before the xDS client ACKs it, so by
	// the ACK of the third Listener version every line about the three
	// transitions has been written.
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsACK(resourcev3.ListenerType, "3")); err != nil {
		t.Fatalf("waiting for the ACK of the last Listener: %v", err)
	}
	if s, ns := modeLogs(); s != 2 || ns != 1 {
		t.Errorf("%d serving and %d not-serving warnings, want one per transition (2 and 1); warnings: %q", s, ns, logs.all())
	}
}

// TestLogging_ConfigurationErrors checks gRFC A36 configuration error
// logging: while an RDS resource makes RPCs fail (here: a route whose action
// is not non_forwarding_action) every update of it logs a warning; when it
// is fixed one warning says so, and good updates log nothing more.
func TestLogging_ConfigurationErrors(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	const rdsName = "rds-config-error-logging"
	bad := func(cluster string) *routepb.RouteConfiguration {
		rc := routeConfig(rdsName, []*routepb.Route{clientRoute(prefixMatch("/"))})
		rc.VirtualHosts[0].Routes[0].GetRoute().ClusterSpecifier = &routepb.RouteAction_Cluster{Cluster: cluster}
		return rc
	}
	good := func(vh string) *routepb.RouteConfiguration {
		// Only non_forwarding_action routes: nothing fails RPCs.
		rc := routeConfig(rdsName, []*routepb.Route{nonForwarding(prefixMatch("/"))})
		rc.VirtualHosts[0].Name = vh
		return rc
	}
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	logs := warningsOf("[listener " + lis.Addr().String() + "]")
	l := testListener(lis.Addr(), []chainSpec{{name: "A", rds: rdsName}}, nil)
	updateRoutes := func(rc *routepb.RouteConfiguration) {
		t.Helper()
		if err := env.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{l}, Routes: []*routepb.RouteConfiguration{rc}}); err != nil {
			t.Fatal(err)
		}
	}

	updateRoutes(bad("c1"))
	logs.waitCount(ctx, t, 1, rdsName)
	updateRoutes(bad("c2"))
	logs.waitCount(ctx, t, 2, rdsName)
	updateRoutes(good("vh1"))
	logs.waitCount(ctx, t, 3, rdsName)
	// The listener handles a RouteConfiguration before the xDS client ACKs
	// it: by the ACK of the third version its lines are written.
	waitRouteACK := func(version string) {
		t.Helper()
		if _, err := env.ms.WaitForRequest(ctx, e2e.IsACK(resourcev3.RouteType, version)); err != nil {
			t.Fatalf("waiting for the ACK of RouteConfiguration version %s: %v", version, err)
		}
	}
	waitRouteACK("3")
	if n := logs.count(rdsName); n != 3 {
		t.Errorf("%d warnings about %s after it was fixed, want 3 (one per bad update, one for the fix); warnings: %q", n, rdsName, logs.all())
	}
	updateRoutes(good("vh2"))
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	waitForCode(ctx, t, "EmptyCall", codes.OK, c.emptyCallNoOpts)
	waitRouteACK("4")
	if n := logs.count(rdsName); n != 3 {
		t.Errorf("%d warnings about %s after a second good update, want still 3; warnings: %q", n, rdsName, logs.all())
	}
}
