package xds

import (
	"fmt"
	"sync"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// TestRapidUpdatesUnderLoad: 200 Listener updates, each changing the only
// filter chain (so each drains the connections), while clients run RPCs:
// no RPC fails, and every drained chainServer is gone at the end.
func TestRapidUpdatesUnderLoad(t *testing.T) {
	ctx := testCtx(t)
	env := newTestEnv(t)
	env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: "r-0", isDefault: true}))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 100)
	for range 4 {
		client := env.dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 1; i <= 200; i++ {
		env.update(ctx, t, testListener(env, chainSpec{name: "x", routeName: fmt.Sprintf("r-%d", i), isDefault: true}))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("RPC failed during updates: %v", err)
	}
	// Old chainServers go away once their clients moved to the new one.
	for {
		env.lw.mu.Lock()
		n := len(env.lw.servers)
		env.lw.mu.Unlock()
		if n == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d chainServers still alive, want 1", n)
		}
		time.Sleep(time.Millisecond)
	}
}
