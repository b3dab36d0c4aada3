package testutils

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// DefaultTimeout bounds every wait of a test: long enough for a loaded CI
// machine running the race detector, short enough that a hung test reports
// what it waited for instead of being killed by go test's own timeout.
const DefaultTimeout = 10 * time.Second

// pollInterval is how often WaitFor checks its condition: short against
// the events awaited (a serializer callback, an ADS round trip), long
// enough that polling does not compete with the code under test.
const pollInterval = 2 * time.Millisecond

// Context returns a context that ends after DefaultTimeout, cancelled when
// t and its subtests have finished.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor calls cond every few milliseconds until it returns nil, and fails
// t when ctx ends first, saying what it waited for and cond's last error
// (which describes the state seen, such as "2 of 3 lines").
//
// Use it where the code under test gives no event to wait on; a channel, a
// serving-mode change or a watch callback, when there is one, says more.
func WaitFor(ctx context.Context, t testing.TB, what string, cond func() error) {
	t.Helper()
	err := cond()
	if err == nil {
		return
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// One last look: the condition may have become true while
			// the context ended.
			if err = cond(); err == nil {
				return
			}
			t.Fatalf("timed out waiting for %s: %v", what, err)
		case <-tick.C:
			if err = cond(); err == nil {
				return
			}
		}
	}
}

// CheckGoroutines fails t if, when t ends, a goroutine started during t
// is still running, so that a leak names its test rather than the package.
// Goroutines already running when it is called are ignored, as are the
// process-wide ones VerifyNoLeaks ignores.
//
// Call it first in the test, before anything registers a cleanup: cleanups
// run last-registered first, and this check must run after all of them.
// Do not use it in a test that runs in parallel with others (t.Parallel, or
// any test of a package with parallel tests running at the same time):
// their goroutines would be reported as this test's.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	opts := append(ignores(), goleak.IgnoreCurrent())
	t.Cleanup(func() {
		if err := goleak.Find(opts...); err != nil {
			t.Errorf("goroutines started by %s still running: %v", t.Name(), err)
		}
	})
}
