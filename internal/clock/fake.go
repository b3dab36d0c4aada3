package clock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Fake is a Clock whose time moves only when Advance is called. Its timers
// fire during Advance, in the order of their due times (ties in the order
// they were made); an AfterFunc function runs on the goroutine calling
// Advance, with no lock held, so when Advance returns every function due by
// then has returned. A timer made with a non-positive duration fires on the
// next Advance (Advance(0) included).
//
// Fake is for tests, but lives here so that any package's tests can use it;
// production code never makes one. Safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time    // guarded by mu
	seq     uint64       // guarded by mu; creation order of timers
	pending []*fakeTimer // guarded by mu; not fired nor stopped
	// changed is closed, and replaced, whenever pending changes. Guarded by
	// mu.
	changed chan struct{}
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake whose time is start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

type fakeTimer struct {
	f   *Fake          // immutable
	due time.Time      // immutable
	seq uint64         // immutable
	fn  func()         // immutable; nil for NewTimer
	ch  chan time.Time // immutable; nil for AfterFunc, else buffered (1)
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer implements Clock.
func (f *Fake) NewTimer(d time.Duration) Timer {
	return f.add(d, nil, make(chan time.Time, 1))
}

// AfterFunc implements Clock.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	return f.add(d, fn, nil)
}

func (f *Fake) add(d time.Duration, fn func(), ch chan time.Time) *fakeTimer {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	t := &fakeTimer{f: f, due: f.now.Add(max(d, 0)), seq: f.seq, fn: fn, ch: ch}
	f.pending = append(f.pending, t)
	f.notifyLocked()
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.removeLocked(t)
}

// removeLocked removes t from pending, reporting whether it was there.
func (f *Fake) removeLocked(t *fakeTimer) bool {
	i := slices.Index(f.pending, t)
	if i < 0 {
		return false
	}
	f.pending = slices.Delete(f.pending, i, i+1)
	f.notifyLocked()
	return true
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Advance moves the time forward by d, firing every timer due by then, one
// at a time, earliest first; Now, seen from a timer's function, is the
// timer's due time. A function that makes a timer due by the end of the
// advance sees it fire in the same Advance.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(max(d, 0))
	f.mu.Unlock()
	for {
		f.mu.Lock()
		var next *fakeTimer
		for _, t := range f.pending {
			if !t.due.After(end) && (next == nil || t.due.Before(next.due) || t.due.Equal(next.due) && t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			if f.now.Before(end) {
				f.now = end
				f.notifyLocked() // the pending durations changed
			}
			f.mu.Unlock()
			return
		}
		f.removeLocked(next)
		if next.due.After(f.now) {
			f.now = next.due
		}
		now := f.now
		f.mu.Unlock()
		if next.fn != nil {
			next.fn()
		} else {
			next.ch <- now // buffered, and fires once
		}
	}
}

// Pending returns, earliest first, how long from now each timer not yet
// fired nor stopped is due.
func (f *Fake) Pending() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pendingLocked()
}

func (f *Fake) pendingLocked() []time.Duration {
	out := make([]time.Duration, len(f.pending))
	for i, t := range f.pending {
		out[i] = t.due.Sub(f.now)
	}
	slices.Sort(out)
	return out
}

// WaitPending waits until ok, called with what Pending returns, reports
// true, and returns nil; or returns ctx's error. ok is checked now and each
// time a timer is made, stopped or fires and each time Advance moves the
// time, so a test can wait for the code under test to reach a wait without
// sleeping.
func (f *Fake) WaitPending(ctx context.Context, ok func(pending []time.Duration) bool) error {
	for {
		f.mu.Lock()
		p, changed := f.pendingLocked(), f.changed
		f.mu.Unlock()
		if ok(p) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
