// Package syncutil holds small concurrency primitives used across the module:
// a FIFO callback serializer and a one-shot event.
package syncutil

import (
	"context"
	"sync"
)

// CallbackSerializer runs scheduled callbacks one at a time, in the order they
// were scheduled, on a goroutine of its own. A callback never runs
// concurrently with another callback of the same serializer, so state touched
// only from callbacks needs no lock.
//
// The goroutine exists only while callbacks are queued or running: it starts
// with the first one scheduled and exits when the queue is empty, so an idle
// serializer costs no goroutine. (Callbacks of one burst run on one
// goroutine; the next burst may run on another.)
//
// All methods are safe for concurrent use, including from inside a callback.
// The zero value is not usable; create one with NewCallbackSerializer.
type CallbackSerializer struct {
	ctx    context.Context    // passed to every callback; cancelled by Close
	cancel context.CancelFunc // immutable after creation
	done   chan struct{}      // closed once closed and no callback is queued or running

	mu      sync.Mutex
	closed  bool                    // guarded by mu
	running bool                    // guarded by mu; a goroutine runs callbacks
	queue   []func(context.Context) // guarded by mu
}

// NewCallbackSerializer returns an idle serializer.
func NewCallbackSerializer() *CallbackSerializer {
	ctx, cancel := context.WithCancel(context.Background())
	return &CallbackSerializer{ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// TrySchedule queues f to run after every callback queued before it. It never
// blocks: the queue is unbounded. It returns false, and f never runs, if Close
// was called before.
//
// f receives a context that is cancelled once Close was called; a callback
// that runs after Close (because it was queued before) can check ctx.Err() to
// skip its work.
func (s *CallbackSerializer) TrySchedule(f func(ctx context.Context)) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, f)
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		go s.run()
	}
	return true
}

// RunOrSchedule is TrySchedule for a caller that may block for as long as
// the callbacks take: when the serializer is idle, it runs f on the calling
// goroutine, and then every callback queued meanwhile, before it returns;
// otherwise it queues f. Order and mutual exclusion are as with
// TrySchedule. It saves starting a goroutine (and growing its stack) for
// work the caller waits for anyway.
func (s *CallbackSerializer) RunOrSchedule(f func(ctx context.Context)) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, f)
	if s.running {
		s.mu.Unlock()
		return true
	}
	s.running = true
	s.mu.Unlock()
	s.run()
	return true
}

// ScheduleOr queues f like TrySchedule, or, if the serializer is closed, calls
// onFailure synchronously on the calling goroutine (f then never runs).
// onFailure may be nil.
func (s *CallbackSerializer) ScheduleOr(f func(ctx context.Context), onFailure func()) {
	if !s.TrySchedule(f) && onFailure != nil {
		onFailure()
	}
}

// Close stops accepting callbacks and cancels the context handed to
// callbacks; when any call of Close returns, the context is cancelled. Callbacks queued before Close still run, in order; Done is
// closed after the last. Close does not wait for them (it may be called from
// inside a callback); wait on Done for that. Calling Close more than once is
// harmless.
func (s *CallbackSerializer) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	// Cancelled under mu, so that no Close (a concurrent one that found
	// closed set) returns before the context is cancelled. cancel calls no
	// code of ours.
	s.cancel()
	idle := !s.running
	s.mu.Unlock()
	if idle {
		close(s.done)
	}
}

// Done returns a channel that is closed once Close was called and every
// callback queued before it has returned: no goroutine of the serializer is
// left.
func (s *CallbackSerializer) Done() <-chan struct{} {
	return s.done
}

// run runs queued callbacks until the queue is empty.
func (s *CallbackSerializer) run() {
	for {
		f := s.next()
		if f == nil {
			return
		}
		f(s.ctx)
	}
}

// next pops the oldest queued callback. When there is none it marks the
// goroutine gone (closing done if the serializer is closed) and returns
// nil.
func (s *CallbackSerializer) next() func(context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		// Let the backing array go once drained, so a burst does not pin memory.
		s.queue = nil
		s.running = false
		if s.closed {
			close(s.done)
		}
		return nil
	}
	f := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	return f
}
