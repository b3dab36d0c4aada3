package e2e_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/proxyless-grpc/xds"
)

const (
	notServing = healthpb.HealthCheckResponse_NOT_SERVING
	serving    = healthpb.HealthCheckResponse_SERVING
)

// adminHealth is a grpc.health.v1 server on a plain grpc.Server of its own
// (an "admin port", as a pod would have), and a client of it.
type adminHealth struct {
	hs     *health.Server
	client healthgrpc.HealthClient
}

func startAdminHealth(t *testing.T) *adminHealth {
	t.Helper()
	hs := health.NewServer()
	srv := grpc.NewServer()
	healthgrpc.RegisterHealthServer(srv, hs)
	lis, _ := listen(t, "127.0.0.1")
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return &adminHealth{hs: hs, client: healthgrpc.NewHealthClient(cc)}
}

// check returns the status of service by a Check RPC.
func (a *adminHealth) check(ctx context.Context, t *testing.T, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := a.client.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("Health.Check(%q): %v", service, err)
	}
	return resp.GetStatus()
}

// healthWatch is a Health.Watch stream, read into a channel; the channel is
// closed when the stream ends.
type healthWatch chan healthpb.HealthCheckResponse_ServingStatus

func (a *adminHealth) watch(ctx context.Context, t *testing.T, service string) healthWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	stream, err := a.client.Watch(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		cancel()
		t.Fatalf("Health.Watch(%q): %v", service, err)
	}
	w := make(healthWatch, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(w)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			w <- resp.GetStatus()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// next returns the next status the watch reports.
func (w healthWatch) next(ctx context.Context, t *testing.T) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	select {
	case st, ok := <-w:
		if !ok {
			t.Fatal("Health.Watch stream ended")
		}
		return st
	case <-ctx.Done():
		t.Fatal("timed out waiting for a Health.Watch update")
		return 0
	}
}

// expect checks that the next status the watch reports is want.
func (w healthWatch) expect(ctx context.Context, t *testing.T, what string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	if got := w.next(ctx, t); got != want {
		t.Fatalf("%s: Health.Watch reported %v, want %v", what, got, want)
	}
}

// expectAfterUnknown is expect, past a first SERVICE_UNKNOWN (the service
// not registered yet when the watch began).
func (w healthWatch) expectAfterUnknown(ctx context.Context, t *testing.T, what string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	got := w.next(ctx, t)
	if got == healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		got = w.next(ctx, t)
	}
	if got != want {
		t.Fatalf("%s: Health.Watch reported %v, want %v", what, got, want)
	}
}

// expectNone checks that the watch reports nothing for d.
func (w healthWatch) expectNone(t *testing.T, what string, d time.Duration) {
	t.Helper()
	select {
	case st := <-w:
		t.Fatalf("%s: Health.Watch reported %v, want no change", what, st)
	case <-time.After(d):
	}
}

// TestReadiness_WatchThroughTransitions checks ReadinessHealth as a
// Kubernetes gRPC readiness probe sees it, through a real health server on
// an admin port: NOT_SERVING until every listener serves, SERVING while
// all do, NOT_SERVING when one's Listener is deleted and SERVING when it
// is re-added, and NOT_SERVING as soon as GracefulStop starts, while it
// still waits for an RPC in flight.
func TestReadiness_WatchThroughTransitions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	admin := startAdminHealth(t)
	overall := admin.watch(ctx, t, "")
	overall.expect(ctx, t, "a new health server", serving) // health.NewServer's default

	s := env.newServer(t, xds.ReadinessHealth(admin.hs, xds.ReadinessOptions{
		ListenerService: func(addr net.Addr) string { return "listener/" + addr.String() },
	}))
	overall.expect(ctx, t, "NewGRPCServer", notServing)
	lis1, _ := listen(t, "127.0.0.1")
	lis2, _ := listen(t, "127.0.0.1")
	svc1, svc2 := "listener/"+lis1.Addr().String(), "listener/"+lis2.Addr().String()
	s.serveOn(lis1)
	s.serveOn(lis2)
	l1 := admin.watch(ctx, t, svc1)
	// Serve runs on its own goroutine and registers the listener's service
	// when it starts: a watch made before that sees SERVICE_UNKNOWN first.
	l1.expectAfterUnknown(ctx, t, "listener 1 before its Listener", notServing)

	// One of two listeners serving: that listener is, the server is not.
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis1.Addr())}, nil)
	s.modes.wait(ctx, t, lis1.Addr(), connectivity.ServingModeServing)
	l1.expect(ctx, t, "listener 1 serving", serving)
	if got := admin.check(ctx, t, ""); got != notServing {
		t.Fatalf("Check(\"\") with one of two listeners serving: %v, want %v", got, notServing)
	}
	if got := admin.check(ctx, t, svc2); got != notServing {
		t.Fatalf("Check(%q) before its Listener: %v, want %v", svc2, got, notServing)
	}
	overall.expectNone(t, "one of two listeners serving", 100*time.Millisecond)

	// Both serving.
	both := []*listenerpb.Listener{simpleListener(lis1.Addr()), simpleListener(lis2.Addr())}
	env.update(ctx, t, both, nil)
	overall.expect(ctx, t, "both listeners serving", serving)
	s.modes.wait(ctx, t, lis2.Addr(), connectivity.ServingModeServing)

	// Listener 2 deleted, then re-added.
	env.update(ctx, t, both[:1], nil)
	overall.expect(ctx, t, "listener 2's Listener deleted", notServing)
	s.modes.wait(ctx, t, lis2.Addr(), connectivity.ServingModeNotServing)
	if got := admin.check(ctx, t, svc1); got != serving {
		t.Errorf("Check(%q) after the other Listener was deleted: %v, want %v", svc1, got, serving)
	}
	env.update(ctx, t, both, nil)
	overall.expect(ctx, t, "listener 2's Listener re-added", serving)

	// GracefulStop: NOT_SERVING while it waits for a stream in flight.
	st := newClient(t, lis1.Addr(), "127.0.0.1", 0).startStream(ctx, t)
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	overall.expect(ctx, t, "GracefulStop started", notServing)
	l1.expect(ctx, t, "GracefulStop started, listener 1", notServing)
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with a stream in flight")
	default:
	}
	st.pingPong(t)
	st.finish(t)
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("GracefulStop did not return once the stream finished")
	}
	overall.expectNone(t, "after GracefulStop", 100*time.Millisecond)
}

// TestReadiness_ServeFails checks that a listener whose Serve returns with
// an error (its socket was closed under it) makes the server not ready for
// good, even though its Listener resource is still there.
func TestReadiness_ServeFails(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	admin := startAdminHealth(t)
	s := env.newServer(t, xds.ReadinessHealth(admin.hs, xds.ReadinessOptions{Service: "my.Service"}))
	lis1, _ := listen(t, "127.0.0.1")
	lis2, _ := listen(t, "127.0.0.1")
	s.serveOn(lis1)
	serve2 := make(chan error, 1)
	go func() { serve2 <- s.Serve(lis2) }()
	w := admin.watch(ctx, t, "my.Service")
	w.expect(ctx, t, "before the Listeners", notServing)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis1.Addr()), simpleListener(lis2.Addr())}, nil)
	w.expect(ctx, t, "both listeners serving", serving)
	if got := admin.check(ctx, t, ""); got != serving {
		t.Errorf("Check(\"\") = %v: the server must leave services it does not report alone", got)
	}

	lis2.Close()
	select {
	case err := <-serve2:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("Serve of a closed listener returned %v, want the Accept error", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return after its listener was closed")
	}
	w.expect(ctx, t, "one listener's Serve failed", notServing)
	// A later configuration push does not bring it back.
	env.update(ctx, t, []*listenerpb.Listener{testListener(lis2.Addr(), []chainSpec{{name: "B"}}, nil), simpleListener(lis1.Addr())}, nil)
	w.expectNone(t, "a push after the failure", 200*time.Millisecond)
}

// TestReadiness_NilHealthServer checks that the option needs a health
// server.
func TestReadiness_NilHealthServer(t *testing.T) {
	env := newTestEnv(t)
	_, err := xds.NewGRPCServer(xds.BootstrapContents(env.bootstrap), xds.ReadinessHealth(nil, xds.ReadinessOptions{}))
	if err == nil || !strings.Contains(err.Error(), "ReadinessHealth") {
		t.Fatalf("NewGRPCServer with a nil health server: %v, want an error naming ReadinessHealth", err)
	}
}
