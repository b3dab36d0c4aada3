package localratelimit

import (
	"math"
	"sync/atomic"
	"time"
)

// clockBase is the origin of clock: the bucket's times are nanoseconds
// since then, on the monotonic clock.
var clockBase = time.Now()

// clock returns the monotonic time in nanoseconds since clockBase. It reads
// the runtime's monotonic clock (time.Since of a time with a monotonic
// reading) and does not allocate.
func clock() int64 { return int64(time.Since(clockBase)) }

// maxSpan bounds the bucket's durations so that their sums cannot
// overflow: 2^61 ns is 73 years.
const maxSpan = math.MaxInt64 / 4

// bucketSpec is the shape of a token bucket: a token accrues every perToken
// nanoseconds (fill_interval / tokens_per_fill), and at most full
// nanoseconds' worth of tokens (max_tokens tokens) are held.
type bucketSpec struct {
	perToken int64 // > 0
	full     int64 // max_tokens * perToken; 0 when max_tokens is 0
}

func newSpec(maxTokens, tokensPerFill uint32, fillInterval time.Duration) bucketSpec {
	per := max(int64(fillInterval)/int64(tokensPerFill), 1)
	per = min(per, maxSpan)
	full := int64(maxSpan)
	if maxTokens == 0 {
		full = 0
	} else if per <= maxSpan/int64(maxTokens) {
		full = per * int64(maxTokens)
	}
	return bucketSpec{perToken: per, full: full}
}

// bucket is a token bucket refilled by arithmetic, with no timer: its
// whole state is the clock reading at which it would have been empty, had
// it not been refilled since. The tokens it holds at time t are
// min(full, t-empty) / perToken (a fraction counts as none); taking one
// moves empty forward by perToken. It starts full. Safe for concurrent use:
// take is a compare-and-swap loop, with no lock and no allocation.
type bucket struct {
	spec  bucketSpec   // immutable
	empty atomic.Int64 // see above
}

func newBucket(spec bucketSpec) *bucket {
	b := &bucket{spec: spec}
	b.empty.Store(clock() - spec.full)
	return b
}

// take takes a token at time now (a clock reading) and reports whether
// there was one.
func (b *bucket) take(now int64) bool {
	for {
		e := b.empty.Load()
		start := max(e, now-b.spec.full) // a full bucket holds no more
		if now-start < b.spec.perToken {
			return false
		}
		if b.empty.CompareAndSwap(e, start+b.spec.perToken) {
			return true
		}
	}
}

// wait returns how long after now the next token accrues (0 if there is
// one already).
func (b *bucket) wait(now int64) time.Duration {
	if b.spec.full == 0 {
		return time.Duration(maxSpan) // never
	}
	start := max(b.empty.Load(), now-b.spec.full)
	return time.Duration(max(start+b.spec.perToken-now, 0))
}
