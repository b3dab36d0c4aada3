package backoff

import (
	"math"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// samples is how many random delays each bound is checked on.
const samples = 2000

func TestExponential_Bounds(t *testing.T) {
	tests := []struct {
		desc    string
		e       Exponential
		retries int
		// min and max bound every delay (inclusive).
		min, max time.Duration
	}{
		{desc: "default first retry", e: DefaultExponential, retries: 0, min: 800 * time.Millisecond, max: 1200 * time.Millisecond},
		{desc: "default second retry", e: DefaultExponential, retries: 1, min: 1280 * time.Millisecond, max: 1920 * time.Millisecond},
		{desc: "default fifth retry", e: DefaultExponential, retries: 4, min: time.Duration(0.8 * 6.5536 * float64(time.Second)), max: time.Duration(1.2 * 6.5536 * float64(time.Second))},
		{desc: "default capped", e: DefaultExponential, retries: 20, min: 96 * time.Second, max: 144 * time.Second},
		{desc: "default huge retry count", e: DefaultExponential, retries: math.MaxInt, min: 96 * time.Second, max: 144 * time.Second},
		{desc: "negative retries count as 0", e: DefaultExponential, retries: -5, min: 800 * time.Millisecond, max: 1200 * time.Millisecond},
		{desc: "no jitter is exact", e: Exponential{BaseDelay: time.Second, Multiplier: 2, MaxDelay: time.Minute}, retries: 3, min: 8 * time.Second, max: 8 * time.Second},
		{desc: "base above max is capped", e: Exponential{BaseDelay: time.Hour, Multiplier: 2, MaxDelay: time.Minute}, retries: 0, min: time.Minute, max: time.Minute},
		{desc: "multiplier below 1 never shrinks", e: Exponential{BaseDelay: time.Second, Multiplier: 0.5, MaxDelay: time.Minute}, retries: 5, min: time.Second, max: time.Second},
		{desc: "jitter above 1 is clamped", e: Exponential{BaseDelay: time.Second, Multiplier: 1, Jitter: 3, MaxDelay: time.Minute}, retries: 0, min: 0, max: 2 * time.Second},
		{desc: "negative jitter is 0", e: Exponential{BaseDelay: time.Second, Multiplier: 1, Jitter: -1, MaxDelay: time.Minute}, retries: 0, min: time.Second, max: time.Second},
		{desc: "negative base is 0", e: Exponential{BaseDelay: -time.Second, Multiplier: 2, Jitter: 0.2, MaxDelay: time.Minute}, retries: 3, min: 0, max: 0},
		{desc: "zero value", e: Exponential{}, retries: 3, min: 0, max: 0},
		{desc: "NaN parameters", e: Exponential{BaseDelay: time.Second, Multiplier: math.NaN(), Jitter: math.NaN(), MaxDelay: time.Minute}, retries: 3, min: time.Second, max: time.Second},
		{desc: "max duration does not overflow", e: Exponential{BaseDelay: time.Second, Multiplier: 10, Jitter: 0.5, MaxDelay: math.MaxInt64}, retries: 100, min: 0, max: math.MaxInt64},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			for range samples {
				got := test.e.Backoff(test.retries)
				if got < test.min || got > test.max {
					t.Fatalf("%+v.Backoff(%d) = %v, want in [%v, %v]", test.e, test.retries, got, test.min, test.max)
				}
			}
		})
	}
}

// Without jitter the delay grows by Multiplier per retry until MaxDelay, and
// never decreases.
func TestExponential_Growth(t *testing.T) {
	e := DefaultExponential
	e.Jitter = 0
	prev := time.Duration(0)
	want := float64(e.BaseDelay)
	for retries := range 30 {
		got := e.Backoff(retries)
		wantD := time.Duration(math.Min(want, float64(e.MaxDelay)))
		if diff := got - wantD; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("Backoff(%d) = %v, want %v", retries, got, wantD)
		}
		if got < prev {
			t.Errorf("Backoff(%d) = %v, less than Backoff(%d) = %v", retries, got, retries-1, prev)
		}
		prev = got
		want *= e.Multiplier
	}
	if prev != e.MaxDelay {
		t.Errorf("Backoff(29) = %v, want MaxDelay %v", prev, e.MaxDelay)
	}
}

// With jitter the delays spread over the whole allowed range: not all equal,
// some below and some above the unjittered value.
func TestExponential_JitterSpreads(t *testing.T) {
	const center = time.Second
	var below, above int
	for range samples {
		d := DefaultExponential.Backoff(0)
		switch {
		case d < center*9/10:
			below++
		case d > center*11/10:
			above++
		}
	}
	// Each side holds about a quarter of the samples; a few percent is a
	// bound that random chance will not miss.
	if below < samples/20 || above < samples/20 {
		t.Errorf("of %d delays, %d were below 0.9s and %d above 1.1s; want jitter spread on both sides", samples, below, above)
	}
}
