package localratelimit

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	localratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// parseAs parses m as the filter's config, or as a per-route override.
func parseAs(t *testing.T, m *localratelimitpb.LocalRateLimit, perRoute bool) (httpfilter.Config, error) {
	t.Helper()
	if perRoute {
		return Filter{}.ParseOverride(raw(t, m))
	}
	return Filter{}.ParseConfig(raw(t, m))
}

func all() *corepb.RuntimeFractionalPercent {
	return &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{Numerator: 100}}
}

func none() *corepb.RuntimeFractionalPercent {
	return &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{}}
}

// good is a valid config: 3 tokens, refilled one an hour, always enforced.
func good() *localratelimitpb.LocalRateLimit {
	return &localratelimitpb.LocalRateLimit{
		StatPrefix:     "test",
		TokenBucket:    &typepb.TokenBucket{MaxTokens: 3, TokensPerFill: wrapperspb.UInt32(1), FillInterval: durationpb.New(time.Hour)},
		FilterEnabled:  all(),
		FilterEnforced: all(),
	}
}

func raw(t testing.TB, m proto.Message) httpfilter.RawConfig {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return httpfilter.RawConfig{TypeURL: a.GetTypeUrl(), Any: a}
}

func header(key, value string) *corepb.HeaderValueOption {
	return &corepb.HeaderValueOption{Header: &corepb.HeaderValue{Key: key, Value: value}}
}

// TestParseErrors: invalid and unsupported configs are rejected with the
// field named.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		desc     string
		mutate   func(m *localratelimitpb.LocalRateLimit)
		perRoute bool
		want     string
	}{
		{desc: "empty stat_prefix", mutate: func(m *localratelimitpb.LocalRateLimit) { m.StatPrefix = "" }, want: "stat_prefix"},
		{desc: "fill_interval missing", mutate: func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket.FillInterval = nil }, want: "token_bucket.fill_interval: missing"},
		{desc: "fill_interval under 50ms", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.TokenBucket.FillInterval = durationpb.New(49 * time.Millisecond)
		}, want: "token_bucket.fill_interval: 49ms"},
		{desc: "fill_interval negative", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.TokenBucket.FillInterval = &durationpb.Duration{Seconds: -1}
		}, want: "token_bucket.fill_interval"},
		{desc: "tokens_per_fill 0", mutate: func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket.TokensPerFill = wrapperspb.UInt32(0) }, want: "token_bucket.tokens_per_fill"},
		{desc: "per-route without bucket", mutate: func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket = nil }, perRoute: true, want: "token_bucket: missing"},
		{desc: "descriptors", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.Descriptors = []*ratelimitpb.LocalRateLimitDescriptor{{}}
		}, want: "descriptors: not supported"},
		{desc: "rate_limits", mutate: func(m *localratelimitpb.LocalRateLimit) { m.RateLimits = []*routepb.RateLimit{{}} }, want: "rate_limits: not supported"},
		{desc: "local_cluster_rate_limit", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.LocalClusterRateLimit = &ratelimitpb.LocalClusterRateLimit{}
		}, want: "local_cluster_rate_limit"},
		{desc: "x-ratelimit headers", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.EnableXRatelimitHeaders = ratelimitpb.XRateLimitHeadersRFCVersion_DRAFT_VERSION_03
		}, want: "enable_x_ratelimit_headers"},
		{desc: "stage above 10", mutate: func(m *localratelimitpb.LocalRateLimit) { m.Stage = 11 }, want: "stage"},
		{desc: "max_dynamic_descriptors 0", mutate: func(m *localratelimitpb.LocalRateLimit) { m.MaxDynamicDescriptors = wrapperspb.UInt32(0) }, want: "max_dynamic_descriptors"},
		{desc: "filter_enabled without default", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.FilterEnabled = &corepb.RuntimeFractionalPercent{RuntimeKey: "k"}
		}, want: "filter_enabled.default_value: missing"},
		{desc: "filter_enforced bad denominator", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.FilterEnforced.DefaultValue.Denominator = 7
		}, want: "filter_enforced.default_value.denominator"},
		{desc: "status 0", mutate: func(m *localratelimitpb.LocalRateLimit) { m.Status = &typepb.HttpStatus{} }, want: "status.code"},
		{desc: "status undefined", mutate: func(m *localratelimitpb.LocalRateLimit) { m.Status = &typepb.HttpStatus{Code: 299} }, want: "status.code"},
		{desc: "reserved trailer", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.ResponseHeadersToAdd = []*corepb.HeaderValueOption{header("x-ok", "1"), header("grpc-status", "0")}
		}, want: "response_headers_to_add[1].header.key"},
		{desc: "binary trailer", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.ResponseHeadersToAdd = []*corepb.HeaderValueOption{header("x-bin", "1")}
		}, want: "response_headers_to_add[0].header.key"},
		{desc: "key with a space", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.ResponseHeadersToAdd = []*corepb.HeaderValueOption{header("x y", "1")}
		}, want: "response_headers_to_add[0].header.key"},
		{desc: "value with a newline", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.RequestHeadersToAddWhenNotEnforced = []*corepb.HeaderValueOption{header("x-a", "1\n2")}
		}, want: "request_headers_to_add_when_not_enforced[0].header.value"},
		{desc: "header missing", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.ResponseHeadersToAdd = []*corepb.HeaderValueOption{{}}
		}, want: "response_headers_to_add[0].header: missing"},
		{desc: "append and append_action", mutate: func(m *localratelimitpb.LocalRateLimit) {
			h := header("x-a", "1")
			h.Append = wrapperspb.Bool(true)
			h.AppendAction = corepb.HeaderValueOption_OVERWRITE_IF_EXISTS
			m.ResponseHeadersToAdd = []*corepb.HeaderValueOption{h}
		}, want: "append and append_action"},
		{desc: "11 headers", mutate: func(m *localratelimitpb.LocalRateLimit) {
			for range 11 {
				m.ResponseHeadersToAdd = append(m.ResponseHeadersToAdd, header("x-a", "1"))
			}
		}, want: "response_headers_to_add: 11 entries"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			m := good()
			tc.mutate(m)
			_, err := parseAs(t, m, tc.perRoute)
			if err == nil {
				t.Fatalf("parse succeeded, want an error mentioning %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), "localratelimit: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parse error %q, want one starting localratelimit: and mentioning %q", err, tc.want)
			}
		})
	}
}

// TestParse: valid configs, and what they become.
func TestParse(t *testing.T) {
	tests := []struct {
		desc        string
		mutate      func(m *localratelimitpb.LocalRateLimit)
		perRoute    bool
		wantCode    codes.Code
		wantBucket  bool
		wantTrailer metadata.MD
	}{
		{desc: "defaults", mutate: func(*localratelimitpb.LocalRateLimit) {}, wantCode: codes.Unavailable, wantBucket: true},
		{desc: "max_tokens 0", mutate: func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket.MaxTokens = 0 }, wantCode: codes.Unavailable, wantBucket: true},
		{desc: "no bucket at the top level", mutate: func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket = nil }, wantCode: codes.Unavailable},
		{desc: "resource exhausted", mutate: func(m *localratelimitpb.LocalRateLimit) { m.RateLimitedAsResourceExhausted = true }, wantCode: codes.ResourceExhausted, wantBucket: true},
		{desc: "status 401", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.Status = &typepb.HttpStatus{Code: typepb.StatusCode_Unauthorized}
		}, wantCode: codes.Unauthenticated, wantBucket: true},
		{desc: "status 503", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.Status = &typepb.HttpStatus{Code: typepb.StatusCode_ServiceUnavailable}
		}, wantCode: codes.Unavailable, wantBucket: true},
		{desc: "status 500 is UNKNOWN", mutate: func(m *localratelimitpb.LocalRateLimit) {
			m.Status = &typepb.HttpStatus{Code: typepb.StatusCode_InternalServerError}
		}, wantCode: codes.Unknown, wantBucket: true},
		{desc: "status below 400 is 429", mutate: func(m *localratelimitpb.LocalRateLimit) { m.Status = &typepb.HttpStatus{Code: typepb.StatusCode_OK} }, wantCode: codes.Unavailable, wantBucket: true},
		{desc: "per-route", mutate: func(*localratelimitpb.LocalRateLimit) {}, perRoute: true, wantCode: codes.Unavailable, wantBucket: true},
		{desc: "trailers", mutate: func(m *localratelimitpb.LocalRateLimit) {
			keepEmpty := header("x-empty", "")
			keepEmpty.KeepEmptyValue = true
			overwrite := header("x-a", "3")
			overwrite.Append = wrapperspb.Bool(false)
			ifAbsent := header("x-b", "2")
			ifAbsent.AppendAction = corepb.HeaderValueOption_ADD_IF_ABSENT
			onlyIfExists := header("x-c", "1")
			onlyIfExists.AppendAction = corepb.HeaderValueOption_OVERWRITE_IF_EXISTS
			m.ResponseHeadersToAdd = []*corepb.HeaderValueOption{
				header("X-A", "1"), header("x-a", "2"), header("x-b", "1"), ifAbsent,
				header("x-dropped", ""), keepEmpty, overwrite, onlyIfExists,
			}
		}, wantCode: codes.Unavailable, wantBucket: true, wantTrailer: metadata.MD{"x-a": {"3"}, "x-b": {"1"}, "x-empty": {""}}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			m := good()
			tc.mutate(m)
			cfg, err := parseAs(t, m, tc.perRoute)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			c := cfg.(*Config)
			if got := status.Code(c.err); got != tc.wantCode {
				t.Errorf("code of a refused RPC = %v, want %v", got, tc.wantCode)
			}
			if c.hasBucket != tc.wantBucket {
				t.Errorf("has bucket = %v, want %v", c.hasBucket, tc.wantBucket)
			}
			if diff := cmp.Diff(c.trailers, tc.wantTrailer); diff != "" {
				t.Errorf("trailers (-got, +want):\n%s", diff)
			}
		})
	}
}

func TestBucket(t *testing.T) {
	spec := newSpec(3, 1, time.Second)
	b := &bucket{spec: spec}
	b.empty.Store(-spec.full) // full at time 0
	for i := range 3 {
		if !b.take(0) {
			t.Fatalf("take %d of a full 3-token bucket failed", i+1)
		}
	}
	if b.take(0) {
		t.Fatal("a 4th take succeeded at the same instant")
	}
	if got := b.wait(0); got != time.Second {
		t.Errorf("wait for the next token = %v, want 1s", got)
	}
	if b.take(int64(999 * time.Millisecond)) {
		t.Error("take 999ms later succeeded, want the token only after 1s")
	}
	if !b.take(int64(time.Second)) || b.take(int64(time.Second)) {
		t.Error("after 1s, want exactly one token")
	}
	// An hour later the bucket is full again, and holds no more than 3.
	hour := int64(time.Hour)
	n := 0
	for b.take(hour) {
		n++
	}
	if n != 3 {
		t.Errorf("an idle bucket gave %d tokens, want its 3", n)
	}
	empty := newBucket(newSpec(0, 1, time.Second))
	if empty.take(clock()) || empty.take(clock()+hour) {
		t.Error("a bucket of max_tokens 0 gave a token")
	}
	// tokens_per_fill: 4 per 100ms is one every 25ms.
	if got := newSpec(10, 4, 100*time.Millisecond).perToken; got != int64(25*time.Millisecond) {
		t.Errorf("perToken = %v, want 25ms", time.Duration(got))
	}
	huge := newSpec(1<<31, 1, 1<<62)
	if huge.full <= 0 || huge.perToken <= 0 {
		t.Errorf("huge spec %+v overflowed", huge)
	}
}

// TestBucketConcurrent: a burst from many goroutines gets exactly the
// bucket's tokens.
func TestBucketConcurrent(t *testing.T) {
	b := newBucket(newSpec(100, 1, time.Hour))
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if b.take(clock()) {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := ok.Load(); got != 100 {
		t.Errorf("400 takes from a 100-token bucket: %d succeeded, want 100", got)
	}
}

type countingCounter struct{ limited, shadowed atomic.Int64 }

func (c *countingCounter) Count(_ context.Context, outcome int) {
	if outcome == 0 {
		c.limited.Add(1)
	} else {
		c.shadowed.Add(1)
	}
}

// buildStep builds the step of instance with config m, its state in st
// (one State per test: a State of the process would carry spent buckets
// from one run of a test to the next with -count).
func buildStep(t *testing.T, st *httpfilter.State, instance string, m *localratelimitpb.LocalRateLimit) *Step {
	t.Helper()
	cfg, err := Filter{}.ParseConfig(raw(t, m))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Filter{}.BuildStatefulStep(st, instance, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		return nil
	}
	return s.(*Step)
}

func rpc() httpfilter.RPC {
	return httpfilter.RPC{Request: httpfilter.Request{FullMethod: "/s.S/M", Header: metadata.MD{}}}
}

// TestStep: enforced, the 4th RPC on a 3-token bucket is refused and
// counted; the allowed path allocates nothing.
func TestStep(t *testing.T) {
	st := &httpfilter.State{}
	s := buildStep(t, st, t.Name(), good())
	cnt := &countingCounter{}
	s = s.WithCounter(cnt).(*Step)
	ctx := context.Background()
	for i := range 3 {
		if _, _, err := s.Run(ctx, rpc()); err != nil {
			t.Fatalf("RPC %d: %v, want OK", i+1, err)
		}
	}
	_, _, err := s.Run(ctx, rpc())
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "local_rate_limited" {
		t.Errorf("4th RPC: %v, want UNAVAILABLE local_rate_limited", err)
	}
	if cnt.limited.Load() != 1 || cnt.shadowed.Load() != 0 {
		t.Errorf("counted %d limited, %d shadowed; want 1, 0", cnt.limited.Load(), cnt.shadowed.Load())
	}

	m := good()
	m.TokenBucket.MaxTokens = 1 << 30
	allowed := buildStep(t, st, t.Name()+"/allocs", m)
	r := rpc()
	if n := testing.AllocsPerRun(1000, func() {
		if _, _, err := allowed.Run(ctx, r); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("an allowed RPC allocates %v times, want 0", n)
	}
}

// TestStepShadow: enabled but not enforced, an RPC without a token goes
// through, counted, with the shadow headers added to its metadata.
func TestStepShadow(t *testing.T) {
	st := &httpfilter.State{}
	m := good()
	m.TokenBucket.MaxTokens = 0
	m.FilterEnforced = none()
	m.RequestHeadersToAddWhenNotEnforced = []*corepb.HeaderValueOption{header("x-rate-limited", "true")}
	s := buildStep(t, st, t.Name(), m)
	cnt := &countingCounter{}
	s = s.WithCounter(cnt).(*Step)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{"a": {"1"}})
	got, _, err := s.Run(ctx, rpc())
	if err != nil {
		t.Fatalf("Run: %v, want OK", err)
	}
	md, _ := metadata.FromIncomingContext(got)
	if diff := cmp.Diff(md, metadata.MD{"a": {"1"}, "x-rate-limited": {"true"}}); diff != "" {
		t.Errorf("metadata (-got, +want):\n%s", diff)
	}
	if cnt.shadowed.Load() != 1 || cnt.limited.Load() != 0 {
		t.Errorf("counted %d limited, %d shadowed; want 0, 1", cnt.limited.Load(), cnt.shadowed.Load())
	}
}

// TestStepDisabled: no step when the filter is enabled for no RPC or has no
// bucket.
func TestStepDisabled(t *testing.T) {
	st := &httpfilter.State{}
	m := good()
	m.FilterEnabled = nil
	if s := buildStep(t, st, t.Name(), m); s != nil {
		t.Errorf("step without filter_enabled = %v, want none (Envoy's default is 0%%)", s)
	}
	m = good()
	m.TokenBucket = nil
	if s := buildStep(t, st, t.Name(), m); s != nil {
		t.Errorf("step without a bucket = %v, want none", s)
	}
}

// TestStepTrailers: with response_headers_to_add, a refusal is left for
// after the tap, where it fails the RPC with the status; with
// enable_retry_after_header it carries the wait in seconds.
func TestStepTrailers(t *testing.T) {
	st := &httpfilter.State{}
	m := good()
	m.TokenBucket.MaxTokens = 0
	m.ResponseHeadersToAdd = []*corepb.HeaderValueOption{header("x-limited", "yes")}
	m.EnableRetryAfterHeader = true
	m.RateLimitedAsResourceExhausted = true
	s := buildStep(t, st, t.Name(), m)
	ctx, w, err := s.Run(context.Background(), rpc())
	if err != nil {
		t.Fatalf("Run: %v, want the refusal left for after the tap", err)
	}
	a, ok := w.(*refusal)
	if !ok {
		t.Fatalf("after the tap: %T, want *refusal", w)
	}
	if _, err := a.RunAfter(ctx); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("RunAfter = %v, want RESOURCE_EXHAUSTED", err)
	}
	if got := a.trailers.Get("x-limited"); len(got) != 1 || got[0] != "yes" {
		t.Errorf("x-limited trailer = %q, want yes", got)
	}
	// max_tokens 0: no token will ever come, so no retry-after.
	if got := a.trailers.Get("retry-after"); len(got) != 0 {
		t.Errorf("retry-after trailer = %q, want none", got)
	}
	m.TokenBucket.MaxTokens = 1
	m.StatPrefix = "one"
	one := buildStep(t, st, t.Name(), m)
	if _, _, err := one.Run(context.Background(), rpc()); err != nil {
		t.Fatal(err)
	}
	_, w, _ = one.Run(context.Background(), rpc())
	if got := w.(*refusal).trailers.Get("retry-after"); len(got) != 1 || got[0] != "3600" {
		t.Errorf("retry-after after the only token of an hourly bucket = %q, want 3600", got)
	}
	if got := (&refusal{}).withRetryAfter(1500 * time.Millisecond).trailers.Get("retry-after"); len(got) != 1 || got[0] != "2" {
		t.Errorf("retry-after for 1.5s = %q, want 2", got)
	}
	if got := (&refusal{}).withRetryAfter(0).trailers.Get("retry-after"); len(got) != 1 || got[0] != "1" {
		t.Errorf("retry-after for 0s = %q, want 1", got)
	}
}

// TestBucketKept: steps built again for the same instance and bucket share
// the tokens (Listener or RDS updates); another bucket, instance or level
// does not.
func TestBucketKept(t *testing.T) {
	st := &httpfilter.State{}
	name := t.Name()
	s1 := buildStep(t, st, name, good())
	for range 3 {
		if _, _, err := s1.Run(context.Background(), rpc()); err != nil {
			t.Fatal(err)
		}
	}
	// The same bucket with other settings (status, headers) keeps the
	// tokens: spent.
	same := good()
	same.RateLimitedAsResourceExhausted = true
	if _, _, err := buildStep(t, st, name, same).Run(context.Background(), rpc()); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("rebuilt step on the spent bucket: %v, want RESOURCE_EXHAUSTED", err)
	}
	for _, tc := range []struct {
		desc     string
		instance string
		mutate   func(m *localratelimitpb.LocalRateLimit)
	}{
		{desc: "other max_tokens", instance: name, mutate: func(m *localratelimitpb.LocalRateLimit) { m.TokenBucket.MaxTokens = 4 }},
		{desc: "other stat_prefix", instance: name, mutate: func(m *localratelimitpb.LocalRateLimit) { m.StatPrefix = "other" }},
		{desc: "other instance", instance: name + "-2", mutate: func(*localratelimitpb.LocalRateLimit) {}},
	} {
		m := good()
		tc.mutate(m)
		if _, _, err := buildStep(t, st, tc.instance, m).Run(context.Background(), rpc()); err != nil {
			t.Errorf("%s: %v, want a fresh bucket", tc.desc, err)
		}
	}
	cfg, err := Filter{}.ParseOverride(raw(t, good()))
	if err != nil {
		t.Fatal(err)
	}
	route, err := Filter{}.BuildStatefulStep(st, name, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := route.Run(context.Background(), rpc()); err != nil {
		t.Errorf("per-route config equal to the filter's: %v, want a bucket of its own", err)
	}
}

// TestPerConnection: each connection has its own bucket.
func TestPerConnection(t *testing.T) {
	st := &httpfilter.State{}
	m := good()
	m.TokenBucket.MaxTokens = 1
	m.LocalRateLimitPerDownstreamConnection = true
	s := buildStep(t, st, t.Name(), m)
	c1, c2 := &httpfilter.ConnState{}, &httpfilter.ConnState{}
	run := func(c *httpfilter.ConnState) error {
		r := rpc()
		r.Conn = c
		_, _, err := s.Run(context.Background(), r)
		return err
	}
	if err := run(c1); err != nil {
		t.Fatalf("1st RPC on connection 1: %v", err)
	}
	if err := run(c1); status.Code(err) != codes.Unavailable {
		t.Errorf("2nd RPC on connection 1: %v, want UNAVAILABLE", err)
	}
	if err := run(c2); err != nil {
		t.Errorf("1st RPC on connection 2: %v, want OK", err)
	}
	r := rpc()
	r.Conn = c2
	if n := testing.AllocsPerRun(100, func() { s.Run(context.Background(), r) }); n != 0 {
		t.Errorf("an RPC on a connection with its bucket allocates %v times, want 0", n)
	}
}
