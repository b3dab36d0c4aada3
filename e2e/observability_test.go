package e2e_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
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
	var retries atomic.Int32       // reconnection attempts of the xDS client
	fast := func(int) time.Duration { retries.Add(1); return 10 * time.Millisecond }
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
	// The client handles responses in order: once it ACKs the next one,
	// every line about the NACKed one is written.
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil)
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsACK(resourcev3.ListenerType, "3")); err != nil {
		t.Fatalf("waiting for the ACK of the Listener after the NACK: %v", err)
	}
	if n := logs.count("listener_filters"); n != 1 {
		t.Errorf("%d warnings about the NACK, want 1: %q", n, logs.all())
	}

	env.ms.Stop()
	lisLogs := warningsOf("[listener " + addr.String() + "]")
	lisLogs.waitCount(ctx, t, 1, "connection to management server")
	// Each failed reconnection attempt (counted by the backoff) is reported
	// to the listener through FIFO serializers; wait for a dozen more
	// attempts, which must not be logged again, rather than a fixed time.
	seen := retries.Load()
	testutils.WaitFor(ctx, t, "a dozen reconnection attempts", func() error {
		if n := retries.Load() - seen; n < 12 {
			return fmt.Errorf("%d attempts", n)
		}
		return nil
	})
	if n := lisLogs.count("connection to management server"); n != 1 {
		t.Errorf("%d listener warnings about the unreachable management server, want 1: %q", n, lisLogs.all())
	}
	for _, w := range lisLogs.all() {
		if strings.Contains(w, "serving (Listener "+`"`+name) {
			t.Errorf("warning %q about a transition reported to the serving-mode callback, want none", w)
		}
	}
}
