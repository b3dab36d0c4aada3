// Package backoff computes retry delays for reconnecting to the xDS
// management server.
package backoff

import (
	"math"
	"math/rand/v2"
	"time"
)

// Exponential is gRPC's connection backoff
// (https://github.com/grpc/grpc/blob/master/doc/connection-backoff.md):
// the delay starts at BaseDelay, is multiplied by Multiplier after each
// failed attempt, is capped at MaxDelay, and is then spread by a random factor
// in [1-Jitter, 1+Jitter].
//
// An Exponential is an immutable value; its methods are safe for concurrent use.
type Exponential struct {
	// BaseDelay is the delay before the first retry (before jitter).
	BaseDelay time.Duration
	// Multiplier is the factor applied after each failed retry; values below 1
	// are treated as 1 (the delay never shrinks).
	Multiplier float64
	// Jitter is the relative spread of the delay, in [0, 1]; values outside are clamped.
	Jitter float64
	// MaxDelay caps the delay before jitter is applied.
	MaxDelay time.Duration
}

// DefaultExponential holds the parameters the gRPC connection backoff document
// recommends.
var DefaultExponential = Exponential{
	BaseDelay:  time.Second,
	Multiplier: 1.6,
	Jitter:     0.2,
	MaxDelay:   120 * time.Second,
}

// Backoff returns the delay before retry number retries (0-based; a negative
// value counts as 0). The result is never negative and never above
// MaxDelay*(1+Jitter). It is safe for concurrent use.
func (e Exponential) Backoff(retries int) time.Duration {
	base, maxDelay := float64(e.BaseDelay), float64(e.MaxDelay)
	if base < 0 {
		base = 0
	}
	if maxDelay < 0 {
		maxDelay = 0
	}
	mult := e.Multiplier
	if !(mult >= 1) { // also catches NaN
		mult = 1
	}
	jitter := e.Jitter
	switch {
	case !(jitter >= 0):
		jitter = 0
	case jitter > 1:
		jitter = 1
	}

	d := min(base, maxDelay)
	for ; retries > 0 && d < maxDelay; retries-- {
		d *= mult
	}
	d = min(d, maxDelay)
	d *= 1 + jitter*(2*rand.Float64()-1)
	if d < 0 {
		return 0
	}
	// Guard the float-to-int conversion against rounding above the bound.
	if limit := maxDelay * (1 + jitter); d > limit {
		d = limit
	}
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}
