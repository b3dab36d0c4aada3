// Package clock is the seam between code that waits and the time it waits
// on: production code takes a Clock (Real by default), and tests pass a
// Fake, whose time moves only when the test advances it, so that timers fire
// at exactly the instants the test chooses and in a known order.
package clock

import "time"

// Clock tells the time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d
	// has passed, as time.NewTimer does.
	NewTimer(d time.Duration) Timer
	// AfterFunc returns a timer that calls f once d has passed, as
	// time.AfterFunc does; its channel is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending event of a Clock: what a *time.Timer offers, with its
// channel behind a method.
type Timer interface {
	// C returns the channel a NewTimer timer fires on; nil for AfterFunc.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped
	// it, false if it had already fired or been stopped. As with
	// time.Timer, Stop does not wait for an AfterFunc function already
	// started.
	Stop() bool
}

// Real is the wall clock of package time.
var Real Clock = realClock{}

// Or returns c, or Real when c is nil: what a consumer's zero-valued Clock
// option means.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

// realTimer is a *time.Timer; being pointer-shaped, it is stored in a Timer
// interface without an allocation.
type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
