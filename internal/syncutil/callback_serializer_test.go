package syncutil

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const (
	defaultTestTimeout      = 10 * time.Second
	defaultTestShortTimeout = 50 * time.Millisecond
)

// closeAndWait closes s and waits for its goroutine to exit.
func closeAndWait(t *testing.T, s *CallbackSerializer) {
	t.Helper()
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("timeout waiting for the serializer's goroutine to exit")
	}
}

func TestCallbackSerializer_RunsInScheduleOrder(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := NewCallbackSerializer()
	defer closeAndWait(t, s)

	const n = 1000
	var got []int // only touched by callbacks
	ran := make(chan struct{})
	for i := range n {
		if !s.TrySchedule(func(context.Context) {
			got = append(got, i)
			if i == n-1 {
				close(ran)
			}
		}) {
			t.Fatalf("TrySchedule(#%d) = false on an open serializer", i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	select {
	case <-ran:
	case <-ctx.Done():
		t.Fatal("timeout waiting for the callbacks")
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("callbacks ran in the wrong order (-got, +want):\n%s", diff)
	}
}

// Callbacks scheduled concurrently never overlap, and the callbacks of each
// scheduling goroutine run in that goroutine's order.
func TestCallbackSerializer_FIFOUnderConcurrentScheduling(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := NewCallbackSerializer()
	defer closeAndWait(t, s)

	const goroutines, perG = 8, 500
	var running atomic.Int32
	var overlap atomic.Bool
	last := make([]int, goroutines) // only touched by callbacks
	for i := range last {
		last[i] = -1
	}
	var outOfOrder []int // only touched by callbacks
	var done sync.WaitGroup
	done.Add(goroutines * perG)

	var start sync.WaitGroup
	start.Add(goroutines)
	for g := range goroutines {
		go func() {
			start.Done()
			start.Wait()
			for i := range perG {
				s.TrySchedule(func(context.Context) {
					defer done.Done()
					if running.Add(1) != 1 {
						overlap.Store(true)
					}
					if last[g] != i-1 {
						outOfOrder = append(outOfOrder, g)
					}
					last[g] = i
					running.Add(-1)
				})
			}
		}()
	}
	waitGroupWithTimeout(t, &done)
	if overlap.Load() {
		t.Error("two callbacks ran at the same time")
	}
	if len(outOfOrder) > 0 {
		t.Errorf("callbacks of scheduling goroutines %v ran out of order", outOfOrder)
	}
}

func waitGroupWithTimeout(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	timer := time.NewTimer(defaultTestTimeout)
	defer timer.Stop()
	select {
	case <-c:
	case <-timer.C:
		t.Fatal("timeout waiting for the callbacks")
	}
}

func TestCallbackSerializer_ScheduleAfterClose(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := NewCallbackSerializer()
	closeAndWait(t, s)

	if s.TrySchedule(func(context.Context) { t.Error("callback scheduled after Close ran") }) {
		t.Error("TrySchedule after Close = true, want false")
	}
	failed := false
	s.ScheduleOr(func(context.Context) { t.Error("callback scheduled after Close ran") }, func() { failed = true })
	if !failed {
		t.Error("ScheduleOr after Close did not call onFailure synchronously")
	}
	s.ScheduleOr(func(context.Context) {}, nil) // nil onFailure must not panic
	s.Close()                                   // a second Close is harmless
}

func TestCallbackSerializer_ScheduleOrOnOpenSerializer(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := NewCallbackSerializer()
	defer closeAndWait(t, s)

	ran := make(chan struct{})
	s.ScheduleOr(func(context.Context) { close(ran) }, func() { t.Error("onFailure called on an open serializer") })
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	select {
	case <-ran:
	case <-ctx.Done():
		t.Fatal("timeout waiting for the callback")
	}
}

// Callbacks queued before Close still run, with a cancelled context, and Done
// is closed only after the last of them returned.
func TestCallbackSerializer_CloseRunsQueuedCallbacks(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := NewCallbackSerializer()
	block := make(chan struct{})
	s.TrySchedule(func(context.Context) { <-block })
	var ctxErrs []error // only touched by callbacks
	const n = 10
	for range n {
		s.TrySchedule(func(ctx context.Context) { ctxErrs = append(ctxErrs, ctx.Err()) })
	}
	s.Close()

	select {
	case <-s.Done():
		t.Fatal("Done closed while callbacks were still queued")
	case <-time.After(defaultTestShortTimeout):
	}
	close(block)
	closeAndWait(t, s)
	if len(ctxErrs) != n {
		t.Fatalf("%d queued callbacks ran after Close, want %d", len(ctxErrs), n)
	}
	for i, err := range ctxErrs {
		if err != context.Canceled {
			t.Errorf("callback #%d ran with ctx.Err() = %v, want %v", i, err, context.Canceled)
		}
	}
}

func TestCallbackSerializer_CloseFromCallback(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := NewCallbackSerializer()
	var afterClose atomic.Bool
	var errInCallback error
	// The first callback closes the serializer only once the second is
	// queued: "queued before Close" must be true, not a race.
	queued := make(chan struct{})
	s.TrySchedule(func(ctx context.Context) {
		<-queued
		s.Close()
		errInCallback = ctx.Err()
		if s.TrySchedule(func(context.Context) {}) {
			t.Error("TrySchedule from a callback after Close = true, want false")
		}
	})
	if !s.TrySchedule(func(context.Context) { afterClose.Store(true) }) {
		t.Fatal("TrySchedule before Close = false, want true")
	}
	close(queued)
	closeAndWait(t, s)
	if errInCallback != context.Canceled {
		t.Errorf("ctx.Err() right after Close in a callback = %v, want %v", errInCallback, context.Canceled)
	}
	if !afterClose.Load() {
		t.Error("the callback queued before Close did not run")
	}
}

func TestCallbackSerializer_CallbackSchedulesCallback(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := NewCallbackSerializer()
	defer closeAndWait(t, s)

	var got []string // only touched by callbacks
	done := make(chan struct{})
	s.TrySchedule(func(context.Context) {
		got = append(got, "outer")
		s.TrySchedule(func(context.Context) {
			got = append(got, "inner")
			close(done)
		})
		got = append(got, "outer end")
	})
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("timeout waiting for the nested callback")
	}
	if diff := cmp.Diff(got, []string{"outer", "outer end", "inner"}); diff != "" {
		t.Errorf("callbacks (-got, +want):\n%s", diff)
	}
}

// Done closes after Close even when nothing was ever scheduled, and the
// serializer keeps working after being idle.
func TestCallbackSerializer_IdleThenClose(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := NewCallbackSerializer()
	select {
	case <-s.Done():
		t.Fatal("Done closed before Close")
	case <-time.After(defaultTestShortTimeout):
	}
	ran := make(chan struct{})
	s.TrySchedule(func(context.Context) { close(ran) })
	<-ran
	closeAndWait(t, s)
}

// Concurrent Close and TrySchedule: every callback for which TrySchedule
// returned true runs; the others never do.
func TestCallbackSerializer_CloseRacesSchedule(t *testing.T) {
	testutils.CheckGoroutines(t)
	for range 50 {
		s := NewCallbackSerializer()
		var accepted, ran atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					if s.TrySchedule(func(context.Context) { ran.Add(1) }) {
						accepted.Add(1)
					}
				}
			}()
		}
		s.Close()
		wg.Wait()
		closeAndWait(t, s)
		if a, r := accepted.Load(), ran.Load(); a != r {
			t.Fatalf("%d callbacks accepted, %d ran", a, r)
		}
	}
}

func BenchmarkCallbackSerializer(b *testing.B) {
	s := NewCallbackSerializer()
	defer func() { s.Close(); <-s.Done() }()
	var wg sync.WaitGroup
	f := func(context.Context) { wg.Done() }
	b.ReportAllocs()
	for b.Loop() {
		wg.Add(1)
		s.TrySchedule(f)
	}
	wg.Wait()
}

// TestCallbackSerializer_NoGoroutineWhenIdle: the serializer's goroutine
// exists only while callbacks are queued or running.
func TestCallbackSerializer_NoGoroutineWhenIdle(t *testing.T) {
	testutils.CheckGoroutines(t)
	before := runtime.NumGoroutine()
	s := NewCallbackSerializer()
	if n := runtime.NumGoroutine(); n != before {
		t.Errorf("a new serializer added %d goroutine(s), want none", n-before)
	}
	release := make(chan struct{})
	ran := make(chan struct{})
	s.TrySchedule(func(context.Context) { <-release })
	s.TrySchedule(func(context.Context) { close(ran) })
	if n := runtime.NumGoroutine(); n != before+1 {
		t.Errorf("a serializer with work has %d goroutine(s), want 1", n-before)
	}
	close(release)
	<-ran
	testutils.WaitFor(testutils.Context(t), t, "the idle serializer's goroutine to exit", func() error {
		if n := runtime.NumGoroutine() - before; n != 0 {
			return fmt.Errorf("%d goroutine(s) left", n)
		}
		return nil
	})
	s.Close()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after Close of an idle serializer")
	}
}

// TestCallbackSerializer_RunOrSchedule: on an idle serializer the callback
// runs on the caller's goroutine, followed by what was queued meanwhile; on
// a busy one it is queued behind the running callback, in order.
func TestCallbackSerializer_RunOrSchedule(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := NewCallbackSerializer()
	defer func() { s.Close(); <-s.Done() }()
	var order []int
	caller := make(chan struct{})
	ran := s.RunOrSchedule(func(context.Context) {
		order = append(order, 1)
		// Queued while this runs: the caller runs it before returning.
		s.TrySchedule(func(context.Context) { order = append(order, 2); close(caller) })
	})
	select {
	case <-caller:
	default:
		t.Fatal("RunOrSchedule on an idle serializer returned before the callbacks it ran and queued")
	}
	if !ran || len(order) != 2 || order[0] != 1 || order[1] != 2 {
		t.Fatalf("RunOrSchedule = %v, order %v; want true and [1 2]", ran, order)
	}

	release, busy := make(chan struct{}), make(chan struct{})
	got := make(chan int, 2)
	s.TrySchedule(func(context.Context) { close(busy); <-release; got <- 1 })
	<-busy
	if !s.RunOrSchedule(func(context.Context) { got <- 2 }) {
		t.Fatal("RunOrSchedule on an open serializer returned false")
	}
	close(release)
	if a, b := <-got, <-got; a != 1 || b != 2 {
		t.Errorf("callbacks ran in order %d, %d; want 1, 2", a, b)
	}
}
