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
	canceled bool // guarded by mu; set by cancel, never cleared

	// Only touched on the serializer: where the entry is registered (nil
	// before registration and for watches that failed at once).
	auth  *authority
	state *resourceState
}

// cancel implements the cancel function returned by WatchResource: it marks
// the entry, so that call starts no callback any more, and schedules its
// removal. It never blocks.
func (e *watcherEntry) cancel() {
	e.mu.Lock()
	first := !e.canceled
	e.canceled = true
	e.mu.Unlock()
	if first {
		e.c.serializer.TrySchedule(func(context.Context) { e.c.handleCancel(e) })
	}
}

// call runs f (one callback of w) unless the watch was cancelled or the
// client shut down. Only called from serializer callbacks; no lock is held
// while f runs.
func (e *watcherEntry) call(fc *flowControl, f func(onDone func())) {
	e.mu.Lock()
	skip := e.canceled || e.c.closed.HasFired()
	e.mu.Unlock()
	if !skip {
		f(fc.hold())
	}
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
