package e2e_test

// Chaos tests: control-plane faults under continuous RPC load. The xDS
// server reaches a real management server through a chaosproxy that cuts,
// black-holes or resets the link; the management server itself is stopped
// and restarted. Whatever happens to the control plane, the server must keep
// serving with its last good config: every scenario asserts zero failed RPCs,
// no serving-mode change, the config in force during the fault is the cached
// one, and the config converges to the latest push once the control plane is
// back. TestChaos checks that the goroutine count does not grow over all
// scenarios (and TestMain's goleak check that nothing is left at all).

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// chaosGoroutineSlack is how many more goroutines than before the scenarios
// may be left once they are over and have settled: process-wide goroutines
// that gRPC starts on first use, not growth.
const chaosGoroutineSlack = 5

func TestChaos(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("scenarios", func(t *testing.T) {
		for _, sc := range []struct {
			name string
			f    func(*testing.T)
		}{
			{"CutControlPlane", testChaosCut},
			{"RestartManagementServer", testChaosRestart},
			{"PushWhileReconnecting", testChaosPushWhileReconnecting},
			{"BlackHolePastResourceTimer", testChaosBlackHole},
			{"ResetMidResponse", testChaosResetMidResponse},
		} {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				sc.f(t)
			})
		}
	})
	// Every scenario is over and cleaned up (servers stopped, clients,
	// proxies and management servers closed); wait for their goroutines
	// to exit.
	ctx := testContext(t)
	testutils.WaitFor(ctx, t, fmt.Sprintf("at most %d goroutines (%d before the scenarios)", before+chaosGoroutineSlack, before), func() error {
		after := runtime.NumGoroutine()
		if after <= before+chaosGoroutineSlack {
			t.Logf("goroutines: %d before the scenarios, %d after", before, after)
			return nil
		}
		if ctx.Err() == nil {
			return fmt.Errorf("%d goroutines", after)
		}
		buf := make([]byte, 1<<20)
		return fmt.Errorf("%d goroutines; stacks:\n%s", after, buf[:runtime.Stack(buf, true)])
	})
}

// testChaosCut: the link to the control plane is cut for 1.5 s (the server's
// reconnections are refused), then restored; a push after the xDS client has
// reconnected is applied.
func testChaosCut(t *testing.T) {
	ctx := testContext(t)
	e := newChaosEnv(ctx, t, 0)
	load := startChaosLoad(t, e.clients)
	load.progress(t, 0, 50, "before the cut")

	seen := e.requestCount()
	e.proxy.Cut()
	start := load.ok.Load()
	e.holdVersion(ctx, t, 1, 1500*time.Millisecond, "control plane cut")
	load.progress(t, start, 50, "while the control plane is cut")
	e.proxy.Restore()
	e.waitForNewStream(ctx, t, seen)

	e.pushVersion(ctx, t, 2, false)
	e.waitForVersion(ctx, t, 2)
	load.progress(t, load.ok.Load(), 50, "after the push")
	load.finish(t)
	e.expectNoModeChange(t)
}

// testChaosRestart: the management server is stopped for 0.5 s and
// restarted with the same resources (versions carry on); two versions pushed
// after the xDS client reconnected are applied, the latest last.
func testChaosRestart(t *testing.T) {
	ctx := testContext(t)
	e := newChaosEnv(ctx, t, 0)
	load := startChaosLoad(t, e.clients)
	load.progress(t, 0, 50, "before the restart")

	seen := e.requestCount()
	e.ms.Stop()
	start := load.ok.Load()
	e.holdVersion(ctx, t, 1, 500*time.Millisecond, "management server stopped")
	load.progress(t, start, 20, "while the management server is stopped")
	e2e.RestartManagementServer(t, e.ms)
	e.waitForNewStream(ctx, t, seen)
	e.expectVersion(ctx, t, 1, "after the restart, same resources")

	e.pushVersion(ctx, t, 2, false)
	e.pushVersion(ctx, t, 3, false)
	e.waitForVersion(ctx, t, 3)
	load.progress(t, load.ok.Load(), 50, "after the pushes")
	load.finish(t)
	e.expectNoModeChange(t)
}

// testChaosPushWhileReconnecting: two versions are pushed while the link is
// cut and the xDS client keeps trying to reconnect; the cached version stays
// in force until the link is restored, then the latest push (which refuses
// UnaryCall) is.
func testChaosPushWhileReconnecting(t *testing.T) {
	ctx := testContext(t)
	e := newChaosEnv(ctx, t, 0)
	load := startChaosLoad(t, e.clients)
	load.progress(t, 0, 50, "before the cut")
	if got := e.probe.unaryCall(ctx); got != codes.OK {
		t.Fatalf("UnaryCall under v1: %v, want OK", got)
	}

	e.proxy.Cut()
	start := load.ok.Load()
	e.holdVersion(ctx, t, 1, 300*time.Millisecond, "control plane cut")
	e.pushVersion(ctx, t, 2, false)
	e.pushVersion(ctx, t, 3, true)
	e.holdVersion(ctx, t, 1, 700*time.Millisecond, "control plane cut, pushes pending")
	load.progress(t, start, 50, "while the control plane is cut")
	e.proxy.Restore()

	e.waitForVersion(ctx, t, 3)
	if got := e.probe.unaryCall(ctx); got != codes.Unavailable {
		t.Errorf("UnaryCall under v3: %v, want UNAVAILABLE (v3 refuses it)", got)
	}
	if got := e.probeVersion(ctx, 2); got != codes.Unavailable {
		t.Errorf("probe of v2 under v3: %v, want UNAVAILABLE", got)
	}
	load.progress(t, load.ok.Load(), 50, "after the restore")
	load.finish(t)
	e.expectNoModeChange(t)
}

// testChaosBlackHole: with a 300 ms does-not-exist timer, the control plane
// is black-holed for more than three times that: first the live ADS stream
// goes silent, then the link is dropped and the reconnection hangs. The
// timer must not apply to the cached Listener and RouteConfiguration: the
// listener keeps serving them. A second listener served while the stream is
// silent subscribes to a Listener that is not cached: its timer does fire
// (NotServing, does not exist), which shows that the timer was running; it
// serves once the link is restored and the Listener arrives.
func testChaosBlackHole(t *testing.T) {
	const expiry = 300 * time.Millisecond
	ctx := testContext(t)
	e := newChaosEnv(ctx, t, expiry)
	lis2, _ := listen(t, "127.0.0.1")
	e.update(ctx, t, []*listenerpb.Listener{e.listener(), simpleListener(lis2.Addr())}, nil)
	load := startChaosLoad(t, e.clients)
	load.progress(t, 0, 50, "before the black hole")

	// The live stream goes silent; a new subscription is sent on it.
	e.proxy.BlackHole()
	blackHoled := time.Now()
	start := load.ok.Load()
	e.s.serveOn(lis2)
	args := e.s.modes.wait(ctx, t, lis2.Addr(), connectivity.ServingModeNotServing)
	if !errors.Is(args.Err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("second listener NotServing with %v, want an error matching xdsclient.ErrResourceDoesNotExist (its timer fired)", args.Err)
	}
	e.holdVersion(ctx, t, 1, 4*expiry-time.Since(blackHoled), "ADS stream black-holed")
	load.progress(t, start, 50, "while the ADS stream is black-holed")

	// The link drops and the reconnection hangs in the black hole.
	e.proxy.Cut()
	e.proxy.BlackHole()
	start = load.ok.Load()
	e.pushVersion(ctx, t, 2, false)
	e.holdVersion(ctx, t, 1, 4*expiry, "reconnection black-holed")
	load.progress(t, start, 50, "while the reconnection is black-holed")

	e.proxy.Restore()
	e.waitForVersion(ctx, t, 2)
	e.s.modes.wait(ctx, t, lis2.Addr(), connectivity.ServingModeServing)
	load.progress(t, load.ok.Load(), 50, "after the restore")
	load.finish(t)
	e.expectNoModeChange(t)
}

// testChaosResetMidResponse: twice, a push reaches the xDS client cut short
// by a TCP reset; the client reconnects and the latest push is applied.
func testChaosResetMidResponse(t *testing.T) {
	ctx := testContext(t)
	e := newChaosEnv(ctx, t, 0)
	load := startChaosLoad(t, e.clients)
	load.progress(t, 0, 50, "before the reset")

	for v := 2; v <= 3; v++ {
		e.proxy.ResetMidResponse()
		e.pushVersion(ctx, t, v, false)
		testutils.WaitFor(ctx, t, fmt.Sprintf("the proxy to reset a connection after push v%d", v), func() error {
			if n := e.proxy.Resets(); n < v-1 {
				return fmt.Errorf("%d resets", n)
			}
			return nil
		})
		e.waitForVersion(ctx, t, v)
	}
	load.progress(t, load.ok.Load(), 50, "after the resets")
	load.finish(t)
	e.expectNoModeChange(t)
}
