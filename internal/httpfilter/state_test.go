package httpfilter

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestConnState(t *testing.T) {
	var c ConnState
	k1, k2 := new(int), new(int)
	if v := c.Get(k1); v != nil {
		t.Fatalf("Get on an empty ConnState = %v, want nil", v)
	}
	v1 := c.GetOrInit(k1, func() any { return "one" })
	if v1 != "one" || c.Get(k1) != "one" {
		t.Fatalf("GetOrInit(k1) = %v, Get(k1) = %v; want one", v1, c.Get(k1))
	}
	if v := c.GetOrInit(k1, func() any { return "again" }); v != "one" {
		t.Errorf("GetOrInit(k1) a second time = %v, want the first value", v)
	}
	if v := c.GetOrInit(k2, func() any { return "two" }); v != "two" || c.Get(k1) != "one" {
		t.Errorf("GetOrInit(k2) = %v and Get(k1) = %v, want two and one", v, c.Get(k1))
	}
	if n := testing.AllocsPerRun(100, func() { c.Get(k2) }); n != 0 {
		t.Errorf("Get allocates %v times, want 0", n)
	}
	init := func() any { return "x" }
	if n := testing.AllocsPerRun(100, func() { c.GetOrInit(k1, init) }); n != 0 {
		t.Errorf("GetOrInit of a stored key allocates %v times, want 0", n)
	}
}

// TestConnStateConcurrent: racing initializations of one key agree.
func TestConnStateConcurrent(t *testing.T) {
	var c ConnState
	keys := []*int{new(int), new(int), new(int)}
	var wg sync.WaitGroup
	got := make([][]any, 8)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range keys {
				got[g] = append(got[g], c.GetOrInit(k, func() any { return new(int) }))
			}
		}()
	}
	wg.Wait()
	for g := range got {
		for i := range keys {
			if got[g][i] != got[0][i] {
				t.Errorf("goroutine %d got %p for key %d, goroutine 0 got %p", g, got[g][i], i, got[0][i])
			}
		}
	}
}

type retainedA struct{ n int }
type retainedB struct{ n int }

// TestRetain: a key gives one value while it is held; another key, another
// type under the same key, or another State, another value; and an unheld
// value is dropped once collected.
func TestRetain(t *testing.T) {
	var s State
	builds := 0
	build := func() *retainedA { builds++; return &retainedA{n: builds} }
	a1 := Retain(&s, "a", build)
	a2 := Retain(&s, "a", build)
	if a1 != a2 || builds != 1 {
		t.Fatalf("Retain of one key twice: %p and %p after %d builds, want one value built once", a1, a2, builds)
	}
	if other := Retain(&s, "other", build); other == a1 {
		t.Errorf("Retain of another key returned the same value")
	}
	if b := Retain(&s, "a", func() *retainedB { return &retainedB{} }); b == nil {
		t.Fatal("Retain of another type returned nil")
	}
	var s2 State
	if elsewhere := Retain(&s2, "a", build); elsewhere == a1 {
		t.Errorf("Retain in another State returned the same value")
	}
	if p1, p2 := Retain(nil, t.Name(), build), Retain(nil, t.Name(), build); p1 != p2 {
		t.Errorf("Retain in the process-wide State: %p then %p, want one value", p1, p2)
	}
	runtime.KeepAlive(a1)

	// Nothing holds the values any more: once collected, their keys go.
	testutils.WaitFor(testutils.Context(t), t, "the keys of collected values to go", func() error {
		runtime.GC()
		if n := s.len(); n > 0 {
			return fmt.Errorf("%d keys retained", n)
		}
		return nil
	})
	builds = 0
	if a := Retain(&s, "a", build); a.n != 1 || builds != 1 {
		t.Errorf("Retain after collection: value %d after %d builds, want a new value", a.n, builds)
	}
}

func TestParseFraction(t *testing.T) {
	def := Fraction{num: 3, den: 7}
	tests := []struct {
		desc    string
		in      *typepb.FractionalPercent
		want    Fraction
		wantErr string
	}{
		{desc: "nil is the default", in: nil, want: def},
		{desc: "hundred", in: &typepb.FractionalPercent{Numerator: 25}, want: Fraction{num: 25, den: 100}},
		{desc: "ten thousand", in: &typepb.FractionalPercent{Numerator: 1, Denominator: typepb.FractionalPercent_TEN_THOUSAND}, want: Fraction{num: 1, den: 10_000}},
		{desc: "million", in: &typepb.FractionalPercent{Numerator: 5, Denominator: typepb.FractionalPercent_MILLION}, want: Fraction{num: 5, den: 1_000_000}},
		{desc: "numerator above denominator is all", in: &typepb.FractionalPercent{Numerator: 250}, want: Fraction{num: 100, den: 100}},
		{desc: "unknown denominator", in: &typepb.FractionalPercent{Numerator: 1, Denominator: 9}, wantErr: "f.denominator: unknown value 9, want HUNDRED, TEN_THOUSAND or MILLION"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := ParseFraction("f", tc.in, def)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("ParseFraction error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ParseFraction = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestFractionHit(t *testing.T) {
	const n = 20000
	count := func(f Fraction) int {
		hits := 0
		for range n {
			if f.Hit() {
				hits++
			}
		}
		return hits
	}
	if got := count(Fraction{}); got != 0 {
		t.Errorf("0%% hit %d of %d", got, n)
	}
	if got := count(FractionAll); got != n {
		t.Errorf("100%% hit %d of %d", got, n)
	}
	half := Fraction{num: 50, den: 100}
	// Binomial(20000, 0.5): the standard deviation is about 71; 10 of them
	// is a bound a correct draw never crosses.
	if got := count(half); got < n/2-710 || got > n/2+710 {
		t.Errorf("50%% hit %d of %d", got, n)
	}
	if got := half.Capped(0); !got.Never() {
		t.Errorf("50%% capped at 0 = %v, want 0%%", got)
	}
	if got := half.Capped(70); got != half {
		t.Errorf("50%% capped at 70 = %v, want unchanged", got)
	}
	if n := testing.AllocsPerRun(100, func() { half.Hit() }); n != 0 {
		t.Errorf("Hit allocates %v times, want 0", n)
	}
}

func TestGRPCCodeOfHTTP(t *testing.T) {
	for http, want := range map[int]uint32{200: 2, 400: 13, 401: 16, 403: 7, 404: 12, 429: 14, 502: 14, 503: 14, 504: 14, 418: 2, 500: 2} {
		if got := GRPCCodeOfHTTP(http); got != want {
			t.Errorf("GRPCCodeOfHTTP(%d) = %d, want %d", http, got, want)
		}
	}
}
