package e2e_test

// Helpers of the chaos tests (chaos_ext_test.go): an xDS server whose
// management server is reached through a chaosproxy, continuous RPC load
// that counts every failed RPC, and probes of which route configuration
// version is in force.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/chaosproxy"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	pubxdsclient "github.com/proxyless-grpc/xds/xdsclient"
)

const (
	chaosRoutes  = "routes-chaos" // the RDS resource of the chaos Listener
	chaosClients = 3              // load clients per scenario
	// chaosBackoff is the xDS client's delay between failed ADS stream
	// attempts, short so that a scenario does not wait for the default
	// exponential backoff (gRPC's own reconnection backoff still applies).
	chaosBackoff = 50 * time.Millisecond
)

// chaosEnv is an xDS server serving lis, whose bootstrap points at proxy, in
// front of the management server ms. Route configuration versions are
// pushed with pushVersion and told apart with probes.
type chaosEnv struct {
	*testEnv
	proxy   *chaosproxy.Proxy
	s       *testServer
	lis     net.Listener
	clients []*testClient
	probe   *testClient
}

// newChaosEnv starts the management server, the proxy and the server (with
// its own client pool, does-not-exist timer expiry), serves a Listener with
// one chain whose routes come over RDS, waits for Serving and for route
// version 1, and creates the load and probe clients.
func newChaosEnv(ctx context.Context, t *testing.T, expiry time.Duration) *chaosEnv {
	t.Helper()
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	proxy, err := chaosproxy.New(ms.Address)
	if err != nil {
		t.Fatalf("chaosproxy.New: %v", err)
	}
	t.Cleanup(func() { proxy.Close() })
	nodeID := "node-" + testutils.RunName(t)
	env := &testEnv{
		ms:     ms,
		nodeID: nodeID,
		bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
			ServerURIs:                         []string{proxy.Addr()},
			NodeID:                             nodeID,
			ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		}),
	}
	pool := xdsclient.NewPool(xdsclient.Options{
		WatchExpiryTimeout: expiry,
		Backoff:            func(int) time.Duration { return chaosBackoff },
	})
	s := env.newServer(t, xds.ClientPool(xdsclient.WrapPool(pool).(*pubxdsclient.Pool)))
	lis, _ := listen(t, "127.0.0.1")
	e := &chaosEnv{testEnv: env, proxy: proxy, s: s, lis: lis}
	env.update(ctx, t, []*listenerpb.Listener{e.listener()}, []*routepb.RouteConfiguration{chaosRouteConfig(1, false)})
	s.serveOn(lis)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	for range chaosClients {
		e.clients = append(e.clients, newClient(t, lis.Addr(), "127.0.0.1", 0))
	}
	e.probe = newClient(t, lis.Addr(), "127.0.0.1", 0)
	e.waitForVersion(ctx, t, 1)
	return e
}

// listener is the Listener of e.lis: one chain "A" routed by chaosRoutes.
func (e *chaosEnv) listener() *listenerpb.Listener {
	return testListener(e.lis.Addr(), []chainSpec{{name: "A", rds: chaosRoutes}}, nil)
}

// chaosRouteConfig is version v of chaosRoutes: an RPC with "x-chain: v<v>"
// goes through and one with another x-chain value is refused, so a probe
// tells which version is in force. RPCs without x-chain go through, except
// UnaryCall if refuseUnary is set. The load uses EmptyCall and
// FullDuplexCall only, which every version lets through.
func chaosRouteConfig(v int, refuseUnary bool) *routepb.RouteConfiguration {
	var allowed []string
	if refuseUnary {
		allowed = []string{methodEmpty, methodStream}
	}
	return routeConfig(chaosRoutes, chainRoutes(fmt.Sprintf("v%d", v), allowed...))
}

// pushVersion pushes version v of chaosRoutes (the Listener is unchanged).
func (e *chaosEnv) pushVersion(ctx context.Context, t *testing.T, v int, refuseUnary bool) {
	t.Helper()
	if err := e.ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{chaosRouteConfig(v, refuseUnary)}}); err != nil {
		t.Fatalf("ms.Update(routes v%d): %v", v, err)
	}
}

// probeVersion returns the code of an EmptyCall tagged with version v: OK
// if and only if v is the version in force. Its deadline is generous: on a
// starved CPU with -race an RPC can take more than a second, and a slow
// probe says nothing about the config.
func (e *chaosEnv) probeVersion(ctx context.Context, v int) codes.Code {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return e.probe.emptyCall(metadata.AppendToOutgoingContext(ctx, chainHeader, fmt.Sprintf("v%d", v)))
}

// waitForVersion waits until version v is in force.
func (e *chaosEnv) waitForVersion(ctx context.Context, t *testing.T, v int) {
	t.Helper()
	waitForCode(ctx, t, fmt.Sprintf("probe of route version v%d", v), codes.OK, func(ctx context.Context) codes.Code {
		return e.probeVersion(ctx, v)
	})
}

// expectVersion fails t unless version v is in force now.
func (e *chaosEnv) expectVersion(ctx context.Context, t *testing.T, v int, when string) bool {
	t.Helper()
	if got := e.probeVersion(ctx, v); got != codes.OK {
		t.Errorf("%s: probe of route version v%d: %v, want OK (the cached config in force)", when, v, got)
		return false
	}
	return true
}

// holdVersion checks every 100 ms for d that version v stays in force; it
// reports the first failure only.
func (e *chaosEnv) holdVersion(ctx context.Context, t *testing.T, v int, d time.Duration, when string) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if !e.expectVersion(ctx, t, v, when) {
			return
		}
		// Pacing: the hold is a length of time under fault by design;
		// this spaces its samples, it does not wait for anything.
		time.Sleep(100 * time.Millisecond)
	}
}

// requestCount returns how many DiscoveryRequests the management server
// has received, for waitForNewStream.
func (e *chaosEnv) requestCount() int { return len(e.ms.Requests()) }

// waitForNewStream waits for the first request of a new ADS stream (a
// Listener request without a response nonce) after the first seen requests.
func (e *chaosEnv) waitForNewStream(ctx context.Context, t *testing.T, seen int) {
	t.Helper()
	isFirst := func(r *discoverypb.DiscoveryRequest) bool {
		return r.GetTypeUrl() == resourcev3.ListenerType && r.GetResponseNonce() == ""
	}
	if _, err := e.ms.WaitForRequest(ctx, after(seen, isFirst)); err != nil {
		t.Fatalf("waiting for the xDS client to open a new ADS stream: %v", err)
	}
}

// expectNoModeChange fails t if the serving mode of e.lis changed since it
// became Serving.
func (e *chaosEnv) expectNoModeChange(t *testing.T) {
	t.Helper()
	e.s.modes.expectNone(t, e.lis.Addr(), 50*time.Millisecond)
}

// --- load ---

// chaosLoad runs, per client, a loop of EmptyCalls and a loop of
// FullDuplexCall streams (a few round trips each, then a clean close), all
// without WaitForReady, and records every failure. Stopping it lets every
// RPC in flight finish: no RPC is cancelled by the test.
type chaosLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	ok   atomic.Int64
	max  atomic.Int64 // the longest RPC, in nanoseconds

	mu       sync.Mutex
	failures []string
	failed   int
}

func startChaosLoad(t *testing.T, clients []*testClient) *chaosLoad {
	l := &chaosLoad{stop: make(chan struct{})}
	for i, c := range clients {
		l.wg.Add(2)
		go l.loop(func() error { return chaosUnaryOnce(c) }, fmt.Sprintf("client %d EmptyCall", i))
		go l.loop(func() error { return streamOnce(context.Background(), c, 3) }, fmt.Sprintf("client %d FullDuplexCall", i))
	}
	t.Cleanup(l.halt)
	return l
}

func (l *chaosLoad) loop(rpc func() error, what string) {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		start := time.Now()
		err := rpc()
		if d := int64(time.Since(start)); d > l.max.Load() {
			l.max.Store(d) // racy maximum: good enough for a log line
		}
		if err != nil {
			l.mu.Lock()
			l.failed++
			if len(l.failures) < 10 {
				l.failures = append(l.failures, fmt.Sprintf("%s at %s: %v", what, time.Now().Format("15:04:05.000"), err))
			}
			l.mu.Unlock()
		} else {
			l.ok.Add(1)
		}
		// Pacing: steady load, not a busy loop that starves the server
		// of the two cores CI gives it.
		time.Sleep(2 * time.Millisecond)
	}
}

func chaosUnaryOnce(c *testClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	_, err := c.EmptyCall(ctx, &testpb.Empty{})
	return err
}

func (l *chaosLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// progress waits until the load completed n more RPCs than it had at
// start, so that a fault window is known to have carried load.
func (l *chaosLoad) progress(t *testing.T, start int64, n int64, when string) {
	t.Helper()
	testutils.WaitFor(testutils.Context(t), t, fmt.Sprintf("%s: the load to complete %d RPCs", when, n), func() error {
		if done := l.ok.Load() - start; done < n {
			return fmt.Errorf("%d completed%s", done, l.summary())
		}
		return nil
	})
}

// summary describes the failed RPCs so far, if any.
func (l *chaosLoad) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed == 0 {
		return ""
	}
	return fmt.Sprintf("; %d RPCs failed, first:\n%s", l.failed, strings.Join(l.failures, "\n"))
}

// finish stops the load and fails t if any RPC failed.
func (l *chaosLoad) finish(t *testing.T) {
	t.Helper()
	l.halt()
	if s := l.summary(); s != "" {
		t.Errorf("want no failed RPC%s", s)
	}
	t.Logf("%d RPCs succeeded, the longest took %v", l.ok.Load(), time.Duration(l.max.Load()))
}
