package xds_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/grpclog"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// logRecorder is a grpclog.LoggerV2 (and DepthLoggerV2) that records the
// warnings it is given.
type logRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (l *logRecorder) warn(args ...any) {
	l.mu.Lock()
	l.warnings = append(l.warnings, fmt.Sprint(args...))
	l.mu.Unlock()
}

// count returns how many warnings contain every one of words.
func (l *logRecorder) count(words ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, w := range l.warnings {
		for _, word := range words {
			if !strings.Contains(w, word) {
				continue next
			}
		}
		n++
	}
	return n
}

func (l *logRecorder) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.warnings...)
}

// waitCount waits until count(words...) >= n.
func (l *logRecorder) waitCount(ctx context.Context, t *testing.T, n int, words ...string) {
	t.Helper()
	for l.count(words...) < n {
		if ctx.Err() != nil {
			t.Fatalf("timeout waiting for %d warning(s) containing %q; warnings: %q", n, words, l.all())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *logRecorder) Info(...any)                         {}
func (l *logRecorder) Infoln(...any)                       {}
func (l *logRecorder) Infof(string, ...any)                {}
func (l *logRecorder) Warning(args ...any)                 { l.warn(args...) }
func (l *logRecorder) Warningln(args ...any)               { l.warn(args...) }
func (l *logRecorder) Warningf(format string, args ...any) { l.warn(fmt.Sprintf(format, args...)) }
func (l *logRecorder) Error(...any)                        {}
func (l *logRecorder) Errorln(...any)                      {}
func (l *logRecorder) Errorf(string, ...any)               {}
func (l *logRecorder) Fatal(args ...any)                   { panic(fmt.Sprint(args...)) }
func (l *logRecorder) Fatalln(args ...any)                 { panic(fmt.Sprint(args...)) }
func (l *logRecorder) Fatalf(format string, args ...any)   { panic(fmt.Sprintf(format, args...)) }
func (l *logRecorder) V(int) bool                          { return false }
func (l *logRecorder) InfoDepth(int, ...any)               {}
func (l *logRecorder) WarningDepth(_ int, args ...any)     { l.warn(args...) }
func (l *logRecorder) ErrorDepth(int, ...any)              {}
func (l *logRecorder) FatalDepth(_ int, args ...any)       { panic(fmt.Sprint(args...)) }

// installLogRecorder makes a logRecorder the process's gRPC logger for the
// rest of the test. grpclog's logger is a global that is not safe to swap
// while other goroutines log, so tests using this must not be parallel (and
// run before the parallel tests start).
func installLogRecorder(t *testing.T) *logRecorder {
	l := &logRecorder{}
	grpclog.SetLoggerV2(l)
	t.Cleanup(func() { grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr)) })
	return l
}

// TestLogging_ServingModeWithoutCallback checks that without a serving-mode
// callback every transition is logged at warning level, with the reason for
// not serving (gRFC A36).
func TestLogging_ServingModeWithoutCallback(t *testing.T) {
	logs := installLogRecorder(t) // first: restored after the server stopped
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

	// Warnings about serving, and about not serving ("not serving" also
	// contains "serving").
	modeLogs := func() (serving, notServing int) {
		notServing = logs.count("not serving", name)
		return logs.count("serving", name) - notServing, notServing
	}
	waitModeLogs := func(wantServing, wantNotServing int) {
		t.Helper()
		for {
			s, ns := modeLogs()
			if s >= wantServing && ns >= wantNotServing {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("timeout waiting for %d serving and %d not-serving warnings about %q; warnings: %q", wantServing, wantNotServing, name, logs.all())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	waitModeLogs(1, 0)
	env.update(ctx, t, nil, nil)
	waitModeLogs(1, 1)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	waitModeLogs(2, 1)
	time.Sleep(defaultTestShortTimeout)
	if s, ns := modeLogs(); s != 2 || ns != 1 {
		t.Errorf("%d serving and %d not-serving warnings, want one per transition (2 and 1); warnings: %q", s, ns, logs.all())
	}
}

// TestLogging_ConfigurationErrors checks gRFC A36 configuration error
// logging: while an RDS resource makes RPCs fail (here: a route whose action
// is not non_forwarding_action) every update of it logs a warning; when it
// is fixed one warning says so, and good updates log nothing more.
func TestLogging_ConfigurationErrors(t *testing.T) {
	logs := installLogRecorder(t)
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
	time.Sleep(defaultTestShortTimeout)
	if n := logs.count(rdsName); n != 3 {
		t.Errorf("%d warnings about %s after it was fixed, want 3 (one per bad update, one for the fix); warnings: %q", n, rdsName, logs.all())
	}
	updateRoutes(good("vh2"))
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	waitForCode(ctx, t, "EmptyCall", codes.OK, c.emptyCallNoOpts)
	time.Sleep(defaultTestShortTimeout)
	if n := logs.count(rdsName); n != 3 {
		t.Errorf("%d warnings about %s after a second good update, want still 3; warnings: %q", n, rdsName, logs.all())
	}
}
