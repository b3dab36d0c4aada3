package globalratelimit

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
)

func overLimitStatus(d *durationpb.Duration) *rlspb.RateLimitResponse_DescriptorStatus {
	return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OVER_LIMIT, DurationUntilReset: d}
}

// TestRetryAfterSeconds: Envoy's retry-after of an over-limit answer, the
// largest duration_until_reset of the over-limit statuses in seconds, at
// least 1, for every Duration a service can send, without overflow.
func TestRetryAfterSeconds(t *testing.T) {
	okStatus := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, DurationUntilReset: durationpb.New(time.Hour)}
	for _, tc := range []struct {
		name     string
		statuses []*rlspb.RateLimitResponse_DescriptorStatus
		want     int64
		ok       bool
	}{
		{name: "none", want: 1},
		{name: "only OK", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{okStatus}, want: 1},
		{name: "whole seconds", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(durationpb.New(30 * time.Second))}, want: 30, ok: true},
		{name: "fraction rounds up", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(durationpb.New(1500 * time.Millisecond))}, want: 2, ok: true},
		{name: "a nanosecond", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(&durationpb.Duration{Nanos: 1})}, want: 1, ok: true},
		{name: "largest", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
			overLimitStatus(durationpb.New(1500 * time.Millisecond)), okStatus, overLimitStatus(durationpb.New(30 * time.Second)), overLimitStatus(durationpb.New(time.Second)),
		}, want: 30, ok: true},
		{name: "unset is 0", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(nil)}, want: 1, ok: true},
		{name: "zero", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(&durationpb.Duration{})}, want: 1, ok: true},
		{name: "negative", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(&durationpb.Duration{Seconds: -5, Nanos: -1})}, want: 1, ok: true},
		{name: "beyond time.Duration", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(&durationpb.Duration{Seconds: 315576000000})}, want: 315576000000, ok: true},
		{name: "time.Duration's largest, rounded up", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(durationpb.New(math.MaxInt64))}, want: 9223372037, ok: true},
		{name: "largest int64 (invalid Duration)", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(&durationpb.Duration{Seconds: math.MaxInt64, Nanos: 999999999})}, want: math.MaxInt64, ok: true},
		{name: "smallest int64 (invalid Duration)", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{overLimitStatus(&durationpb.Duration{Seconds: math.MinInt64})}, want: 1, ok: true},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			got, ok := retryAfterSeconds(tc.statuses)
			if got != tc.want || ok != tc.ok {
				t.Errorf("retryAfterSeconds = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestXRateLimitReset: Envoy's x-ratelimit-reset, the Duration's seconds
// field as it is.
func TestXRateLimitReset(t *testing.T) {
	for _, tc := range []struct {
		d    *durationpb.Duration
		want string
	}{
		{nil, "0"},
		{durationpb.New(2900 * time.Millisecond), "2"},
		{&durationpb.Duration{Seconds: 315576000000}, "315576000000"},
		{&durationpb.Duration{Seconds: -5}, "-5"},
		{&durationpb.Duration{Seconds: math.MaxInt64}, "9223372036854775807"},
	} {
		if got := xRateLimitReset(tc.d); got != tc.want {
			t.Errorf("xRateLimitReset(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestAddRequestHeaders: request_headers_to_add append to what the RPC has,
// in order; a header that cannot be sent is dropped.
func TestAddRequestHeaders(t *testing.T) {
	md := metadata.MD{"x-tenant": {"client"}}
	added := addRequestHeaders(md, []*corepb.HeaderValue{
		{Key: "X-Tenant", Value: "from-rls"}, {Key: "x-quota", Value: "a"}, {Key: "grpc-status", Value: "0"}, {Key: "x-quota", Value: "b"},
	})
	if !added {
		t.Error("addRequestHeaders reported nothing added")
	}
	want := metadata.MD{"x-tenant": {"client", "from-rls"}, "x-quota": {"a", "b"}}
	if !reflect.DeepEqual(md, want) {
		t.Errorf("metadata = %v, want %v", md, want)
	}
	if addRequestHeaders(md, []*corepb.HeaderValue{{Key: ":path", Value: "/x"}}) {
		t.Error("addRequestHeaders reported a reserved header added")
	}
}
