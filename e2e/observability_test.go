package e2e_test

import (
	"strings"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	pubxdsclient "github.com/proxyless-grpc/xds/xdsclient"
)

// TestLogging_Once checks that each event an operator must see is logged
// once as a warning, never repeated: a NACK's reasons (by the xDS client;
// the listener adds an info line), the first connectivity error after the
// last Listener answer (retries are logged at info level), and, with a
// serving-mode callback, no warning for transitions (the callback reports
// them, and they are logged at info level).
func TestLogging_Once(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	logs := warningsOf(env.nodeID) // the xDS client's warnings carry the node ID
	fast := func(int) time.Duration { return 10 * time.Millisecond }
	s := env.newServer(t, xds.ClientPool(xdsclient.WrapPool(xdsclient.NewPool(xdsclient.Options{Backoff: fast})).(*pubxdsclient.Pool)))
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	addr := lis.Addr()
	name := e2e.ServerListenerName(hostPort(addr))
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)

	bad := simpleListener(addr)
	bad.ListenerFilters = []*listenerpb.ListenerFilter{{Name: "unsupported-filter"}}
	env.update(ctx, t, []*listenerpb.Listener{bad}, nil)
	logs.waitCount(ctx, t, 1, "listener_filters")
	time.Sleep(defaultTestShortTimeout)
	if n := logs.count("listener_filters"); n != 1 {
		t.Errorf("%d warnings about the NACK, want 1: %q", n, logs.all())
	}

	env.ms.Stop()
	lisLogs := warningsOf("[listener " + addr.String() + "]")
	lisLogs.waitCount(ctx, t, 1, "connection to management server")
	time.Sleep(defaultTestShortTimeout) // dozens of reconnection attempts
	if n := lisLogs.count("connection to management server"); n != 1 {
		t.Errorf("%d listener warnings about the unreachable management server, want 1: %q", n, lisLogs.all())
	}
	for _, w := range lisLogs.all() {
		if strings.Contains(w, "serving (Listener "+`"`+name) {
			t.Errorf("warning %q about a transition reported to the serving-mode callback, want none", w)
		}
	}
}
