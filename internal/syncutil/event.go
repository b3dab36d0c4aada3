package syncutil

import (
	"sync"
	"sync/atomic"
)

// Event is a one-shot signal: it starts unfired and can be fired once.
// All methods are safe for concurrent use. Create one with NewEvent.
type Event struct {
	fired atomic.Bool
	once  sync.Once
	c     chan struct{}
}

// NewEvent returns an Event that has not fired.
func NewEvent() *Event {
	return &Event{c: make(chan struct{})}
}

// Fire fires the event. It returns true for the call that fired it and false
// for every later call (or concurrent call that lost the race). After Fire
// returns, HasFired is true and Done is closed.
func (e *Event) Fire() bool {
	won := false
	e.once.Do(func() {
		e.fired.Store(true)
		close(e.c)
		won = true
	})
	return won
}

// Done returns a channel that is closed when the event fires.
func (e *Event) Done() <-chan struct{} {
	return e.c
}

// HasFired reports whether Fire has been called.
func (e *Event) HasFired() bool {
	return e.fired.Load()
}
