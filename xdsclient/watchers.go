package xdsclient

import (
	"context"
	"sync"
	"sync/atomic"
)

// watcherEntry is one call of WatchResource.
type watcherEntry struct {
	c *Client         // immutable
	w ResourceWatcher // immutable

	mu       sync.Mutex
	canceled bool          // guarded by mu; set by cancel, never cleared
	running  bool          // guarded by mu; a callback of w is running
	idle     chan struct{} // guarded by mu; closed when the running callback returns, if a canceller waits

	// Only touched on the serializer: where the entry is registered (nil
	// before registration and for watches that failed at once).
	auth  *authority
	state *resourceState
}

// cancel implements the cancel function returned by WatchResource.
func (e *watcherEntry) cancel() {
	e.mu.Lock()
	first := !e.canceled
	e.canceled = true
	var wait chan struct{}
	if e.running && !e.c.onSerializer() {
		if e.idle == nil {
			e.idle = make(chan struct{})
		}
		wait = e.idle
	}
	e.mu.Unlock()
	if first {
		e.c.serializer.TrySchedule(func(context.Context) { e.c.handleCancel(e) })
	}
	if wait != nil {
		<-wait
	}
}

// call runs f (one callback of w) unless the watch was cancelled or the
// client closed. Only called from serializer callbacks; no lock is held
// while f runs.
func (e *watcherEntry) call(fc *flowControl, f func(onDone func())) {
	e.mu.Lock()
	if e.canceled || e.c.closed.HasFired() {
		e.mu.Unlock()
		return
	}
	e.running = true
	e.mu.Unlock()

	f(fc.hold())

	e.mu.Lock()
	e.running = false
	if e.idle != nil {
		close(e.idle)
		e.idle = nil
	}
	e.mu.Unlock()
}

// deliverData calls ResourceChanged. Only called from serializer callbacks.
func (e *watcherEntry) deliverData(d ResourceData, fc *flowControl) {
	e.call(fc, func(onDone func()) { e.w.ResourceChanged(d, onDone) })
}

// deliverError calls ResourceError (resource true) or AmbientError. Only
// called from serializer callbacks.
func (e *watcherEntry) deliverError(resource bool, err error, fc *flowControl) {
	if resource {
		e.call(fc, func(onDone func()) { e.w.ResourceError(err, onDone) })
		return
	}
	e.call(fc, func(onDone func()) { e.w.AmbientError(err, onDone) })
}

// flowControl counts the watchers that have not yet called onDone for one
// ADS response; release lets the stream read the next response. A nil
// *flowControl is valid and hands out no-op onDone functions (updates not
// caused by a response: timers, new watchers, connectivity errors).
type flowControl struct {
	pending atomic.Int64
	release func() // immutable; called once when pending drops to zero
}

// newFlowControl returns a flowControl holding one count for the handler
// itself, which it gives back with done when it has notified every watcher.
func newFlowControl(release func()) *flowControl {
	fc := &flowControl{release: release}
	fc.pending.Store(1)
	return fc
}

// hold takes one count and returns the onDone that gives it back (only the
// first call of it counts).
func (fc *flowControl) hold() func() {
	if fc == nil {
		return func() {}
	}
	fc.pending.Add(1)
	var once sync.Once
	return func() { once.Do(fc.done) }
}

// done gives back one count.
func (fc *flowControl) done() {
	if fc.pending.Add(-1) == 0 {
		fc.release()
	}
}
