// Package syncutil holds small concurrency primitives used across the module:
// a FIFO callback serializer and a one-shot event.
package syncutil

import (
	"context"
	"sync"
)

// CallbackSerializer runs scheduled callbacks one at a time, in the order they
// were scheduled, on a single goroutine that it owns. A callback never runs
// concurrently with another callback of the same serializer, so state touched
// only from callbacks needs no lock.
//
// All methods are safe for concurrent use, including from inside a callback.
// The zero value is not usable; create one with NewCallbackSerializer.
type CallbackSerializer struct {
	ctx    context.Context    // passed to every callback; cancelled by Close
	cancel context.CancelFunc // immutable after creation
	done   chan struct{}      // closed when run returns
	wake   chan struct{}      // capacity 1; a token means "the queue may be non-empty"

	mu     sync.Mutex
	closed bool                    // guarded by mu
	queue  []func(context.Context) // guarded by mu
}

// NewCallbackSerializer returns a serializer and starts its goroutine. The
// goroutine exits after Close, once every callback queued before Close ran.
func NewCallbackSerializer() *CallbackSerializer {
	ctx, cancel := context.WithCancel(context.Background())
	s := &CallbackSerializer{
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		wake:   make(chan struct{}, 1),
	}
	go s.run()
	return s
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
	s.mu.Unlock()
	s.signal()
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
// callbacks. Callbacks queued before Close still run, in order, and then the
// goroutine exits; Done is closed at that point. Close does not wait for that
// (it may be called from inside a callback); wait on Done to know the
// goroutine is gone. Calling Close more than once is harmless.
func (s *CallbackSerializer) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.signal()
}

// Done returns a channel that is closed when the serializer's goroutine has
// exited, that is after Close was called and every queued callback returned.
func (s *CallbackSerializer) Done() <-chan struct{} {
	return s.done
}

// signal leaves a wake-up token for run unless one is already pending.
func (s *CallbackSerializer) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run is the serializer's goroutine.
func (s *CallbackSerializer) run() {
	defer close(s.done)
	for {
		<-s.wake
		for {
			f, closed, ok := s.next()
			if !ok {
				if closed {
					return
				}
				break
			}
			f(s.ctx)
		}
	}
}

// next pops the oldest queued callback. ok is false when the queue is empty;
// closed then tells whether no more callbacks can ever be queued.
func (s *CallbackSerializer) next() (f func(context.Context), closed, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		// Let the backing array go once drained, so a burst does not pin memory.
		s.queue = nil
		return nil, s.closed, false
	}
	f = s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	return f, s.closed, true
}
