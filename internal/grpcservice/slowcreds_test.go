package grpcservice_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

// gatedCreds are registered channel credentials whose Build blocks while a
// test holds them.
var gatedCreds = testutils.RegisterGatedCreds("grpcservice-test-gated")

// startHealthServer starts a gRPC server with opts (insecure if they set no
// credentials) on 127.0.0.1 with the health service; it stops when the test
// ends.
func startHealthServer(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestSlowCredsDoNotBlockAcquire: while the credentials of one side
// channel are being built (slowly: a registered type, or google_default
// asking a metadata server), Acquire of that channel returns at once,
// another side channel is acquired and used, and a Conn of the slow one
// waits for its credentials (until its context ends); once they are built,
// it is used too.
func TestSlowCredsDoNotBlockAcquire(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	slowTarget, fastTarget := startHealthServer(t), startHealthServer(t)
	env := &grpcservice.Env{Server: "cp", Allowed: map[string]*bootstrap.ServerConfig{
		slowTarget: {ServerURI: slowTarget, ChannelCreds: bootstrap.ChannelCreds{Type: gatedCreds.Name()}},
		fastTarget: {ServerURI: fastTarget, ChannelCreds: bootstrap.ChannelCreds{Type: bootstrap.CredsInsecure}},
	}}
	slow, err := grpcservice.Parse(env, service(slowTarget, nil))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	fast, err := grpcservice.Parse(env, service(fastTarget, nil))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}

	entered, releaseBuild := gatedCreds.Hold(t)
	slowAcquired := make(chan func(), 1)
	go func() { // a goroutine of its own: Acquire used to wait for the build
		rel, err := slow.Acquire()
		if err != nil {
			t.Errorf("Acquire of the slow channel: %v", err)
			rel = func() {}
		}
		slowAcquired <- rel
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the slow channel's credentials were never built")
	}

	fastAcquired := make(chan func(), 1)
	go func() {
		rel, err := fast.Acquire()
		if err != nil {
			t.Errorf("Acquire of the other channel: %v", err)
			rel = func() {}
		}
		fastAcquired <- rel
	}()
	var releaseFast func()
	select {
	case releaseFast = <-fastAcquired:
	case <-ctx.Done():
		t.Fatal("Acquire of another side channel waited for the slow channel's credentials")
	}
	defer releaseFast()
	cc, err := fast.Conn(ctx)
	if err != nil {
		t.Fatalf("Conn of the other channel: %v", err)
	}
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check over the other channel: %v", err)
	}

	var releaseSlow func()
	select {
	case releaseSlow = <-slowAcquired:
	case <-ctx.Done():
		t.Fatal("Acquire of the slow channel waited for its credentials")
	}
	defer releaseSlow()
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := slow.Conn(done); err == nil {
		t.Fatal("Conn of the slow channel with an ended context succeeded while its credentials are being built")
	}

	releaseBuild()
	cc, err = slow.Conn(ctx)
	if err != nil {
		t.Fatalf("Conn of the slow channel once built: %v", err)
	}
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check over the slow channel: %v", err)
	}
}
