package e2e_test

import (
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/connectivity"
)

// TestStop_DuringGracefulStop checks that, as with grpc.Server, a Stop
// called while GracefulStop waits for an in-flight stream ends that stream,
// and both calls return: "GracefulStop, then Stop after a timeout" is how
// servers bound their shutdown.
func TestStop_DuringGracefulStop(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	st := c.startStream(ctx, t)

	graceful := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(graceful)
	}()
	select {
	case <-graceful:
		t.Fatal("GracefulStop returned while a stream was in flight")
	case <-time.After(defaultTestShortTimeout):
	}

	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	for name, ch := range map[string]chan struct{}{"Stop": stopped, "GracefulStop": graceful} {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s did not return after Stop was called during GracefulStop", name)
		}
	}
	if _, err := st.Recv(); err == nil {
		t.Fatal("stream Recv after Stop succeeded, want an error")
	}
	s.waitServeReturned(nil)
}
