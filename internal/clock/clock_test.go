package clock

import (
	"context"
	"slices"
	"testing"
	"time"
)

const defaultTestTimeout = 10 * time.Second

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestFakeOrder: timers fire during Advance, earliest first and ties in
// creation order, each seeing its due time; stopped ones never fire.
func TestFakeOrder(t *testing.T) {
	f := NewFake(epoch)
	var got []string
	var at []time.Duration
	rec := func(name string) func() {
		return func() { got, at = append(got, name), append(at, f.Now().Sub(epoch)) }
	}
	f.AfterFunc(3*time.Second, rec("c"))
	f.AfterFunc(time.Second, rec("a"))
	f.AfterFunc(time.Second, rec("b"))
	stopped := f.AfterFunc(2*time.Second, rec("stopped"))
	if !stopped.Stop() {
		t.Fatal("Stop() of a pending timer = false, want true")
	}
	if stopped.Stop() {
		t.Fatal("second Stop() = true, want false")
	}
	f.Advance(999 * time.Millisecond)
	if len(got) != 0 {
		t.Fatalf("fired %v before their time", got)
	}
	f.Advance(5 * time.Second)
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("fired %v, want %v", got, want)
	}
	if want := []time.Duration{time.Second, time.Second, 3 * time.Second}; !slices.Equal(at, want) {
		t.Errorf("Now() in the functions = %v after start, want %v", at, want)
	}
	if got, want := f.Now().Sub(epoch), 5999*time.Millisecond; got != want {
		t.Errorf("Now() = start + %v, want start + %v", got, want)
	}
}

// TestFakeNewTimer: a channel timer fires once, on its channel, when due;
// a timer made by a function during Advance fires in the same Advance if due.
func TestFakeNewTimer(t *testing.T) {
	f := NewFake(epoch)
	tm := f.NewTimer(time.Second)
	var inner Timer
	f.AfterFunc(500*time.Millisecond, func() { inner = f.NewTimer(100 * time.Millisecond) })
	f.Advance(time.Second)
	select {
	case now := <-tm.C():
		if !now.Equal(epoch.Add(time.Second)) {
			t.Errorf("timer sent %v, want %v", now, epoch.Add(time.Second))
		}
	default:
		t.Fatal("timer did not fire when due")
	}
	select {
	case <-inner.C():
	default:
		t.Fatal("timer made during Advance did not fire in it")
	}
	if tm.Stop() {
		t.Error("Stop() of a fired timer = true, want false")
	}
}

// TestFakeWaitPending: WaitPending returns once another goroutine has made
// the timer it waits for, and with the context's error otherwise.
func TestFakeWaitPending(t *testing.T) {
	f := NewFake(epoch)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tm := f.NewTimer(time.Minute)
		<-tm.C()
	}()
	if err := f.WaitPending(ctx, func(p []time.Duration) bool { return slices.Equal(p, []time.Duration{time.Minute}) }); err != nil {
		t.Fatalf("WaitPending() = %v", err)
	}
	f.Advance(time.Minute)
	<-done

	sctx, scancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer scancel()
	if err := f.WaitPending(sctx, func(p []time.Duration) bool { return len(p) > 0 }); err != context.DeadlineExceeded {
		t.Errorf("WaitPending() with no timer = %v, want %v", err, context.DeadlineExceeded)
	}
}

// TestRealTimerAllocs: a real timer in a Timer costs no more than the
// *time.Timer itself.
func TestRealTimerAllocs(t *testing.T) {
	want := testing.AllocsPerRun(100, func() { time.NewTimer(time.Hour).Stop() })
	got := testing.AllocsPerRun(100, func() { Real.NewTimer(time.Hour).Stop() })
	if got > want {
		t.Errorf("Real.NewTimer allocates %v, time.NewTimer %v", got, want)
	}
}

// TestFakeWaitPendingSeesAdvance: moving the time without firing a timer
// wakes WaitPending, since the pending durations changed.
func TestFakeWaitPendingSeesAdvance(t *testing.T) {
	f := NewFake(epoch)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	tm := f.NewTimer(time.Minute)
	defer tm.Stop()
	done := make(chan error, 1)
	go func() {
		done <- f.WaitPending(ctx, func(p []time.Duration) bool { return slices.Equal(p, []time.Duration{30 * time.Second}) })
	}()
	f.Advance(30 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("WaitPending() = %v after Advance left the timer 30s away", err)
	}
}
