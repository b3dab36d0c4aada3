package e2e_test

// End-to-end tests of behaviours checked against Envoy and the gRFCs: how
// the global rate limit filter computes retry-after and x-ratelimit-reset
// from a rate limit service's duration_until_reset, and the local rate
// limit filter's retry-after; how the global one adds the service's
// request_headers_to_add and response_headers_to_add; and the base64 form
// of a binary ("-bin") header that RBAC, the rate limit descriptors and
// ext_authz's header_map each see. Real management server, real xDS server,
// real grpc-go clients, the scriptable rate limit and authorization servers
// of globalratelimit_test.go and extauthz_test.go.

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	localratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
)

// maxProtoDuration is the longest valid google.protobuf.Duration, 10 000
// years: longer than a time.Duration holds (292 years).
var maxProtoDuration = &durationpb.Duration{Seconds: 315576000000}

// TestEnvoyParity_RetryAfter: with enable_retry_after_header, an OVER_LIMIT
// answer's retry-after is what Envoy documents: the largest
// duration_until_reset of the over-limit descriptor statuses (OK ones do
// not count), in seconds (a fraction rounds up), at least 1; a duration too
// long for a time.Duration gives its own seconds, not a negative number; a
// negative or unset one gives 1; a retry-after of the service's own
// response_headers_to_add is kept; and with a rate_limited_status other
// than 429 there is none. x-ratelimit-reset is Envoy's
// duration_until_reset.seconds(): the whole seconds, 0 when unset, however
// large.
func TestEnvoyParity_RetryAfter(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	env := authzEnv(t, false, r.addr)
	cfg := globalRL(r.addr, rlOf(rlGeneric("x")))
	cfg.EnableRetryAfterHeader = true
	cfg.EnableXRatelimitHeaders = rlpb.RateLimit_DRAFT_VERSION_03
	c, _, _, _ := startGlobalRL(ctx, t, env, cfg, allRoutes("routes"))

	limit := &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}
	over := func(d *durationpb.Duration) *rlspb.RateLimitResponse_DescriptorStatus {
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OVER_LIMIT, DurationUntilReset: d, CurrentLimit: limit}
	}
	for _, tc := range []struct {
		name     string
		statuses []*rlspb.RateLimitResponse_DescriptorStatus
		headers  []*corepb.HeaderValue // the answer's response_headers_to_add
		retry    string
		reset    string // x-ratelimit-reset, from the first status (all have limit_remaining 0)
	}{
		{name: "longest duration", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{over(maxProtoDuration)},
			retry: "315576000000", reset: "315576000000"},
		{name: "largest of the over-limit", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
			over(durationpb.New(1500 * time.Millisecond)), over(durationpb.New(30 * time.Second)),
			{Code: rlspb.RateLimitResponse_OK, DurationUntilReset: durationpb.New(time.Hour)},
		}, retry: "30", reset: "1"},
		{name: "fraction rounds up", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{over(durationpb.New(2900 * time.Millisecond))},
			retry: "3", reset: "2"},
		{name: "negative", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{over(&durationpb.Duration{Seconds: -5})},
			retry: "1", reset: "-5"},
		{name: "unset", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{over(nil)},
			retry: "1", reset: "0"},
		{name: "service's own kept", statuses: []*rlspb.RateLimitResponse_DescriptorStatus{over(durationpb.New(30 * time.Second))},
			headers: []*corepb.HeaderValue{{Key: "Retry-After", Value: "7"}}, retry: "7", reset: "30"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			r.set(func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
				return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT, Statuses: tc.statuses, ResponseHeadersToAdd: tc.headers}, nil
			})
			var tr metadata.MD
			if code, msg := statusOf(rpcResult(ctx, c, "EmptyCall", grpc.Trailer(&tr))); code != codes.Unavailable {
				t.Fatalf("EmptyCall: %v %q, want UNAVAILABLE (over the limit)", code, msg)
			}
			if got := strings.Join(tr.Get("retry-after"), ","); got != tc.retry {
				t.Errorf("trailer retry-after = %q, want %q", got, tc.retry)
			}
			if got := strings.Join(tr.Get("x-ratelimit-reset"), ","); got != tc.reset {
				t.Errorf("trailer x-ratelimit-reset = %q, want %q", got, tc.reset)
			}
			r.taken()
		})
	}

	// Envoy sends retry-after with a 429 only: a filter refusing with 503
	// sends none.
	t.Run("not_429", func(t *testing.T) {
		cfg := globalRL(r.addr, rlOf(rlGeneric("x")))
		cfg.EnableRetryAfterHeader = true
		cfg.RateLimitedStatus = &typepb.HttpStatus{Code: typepb.StatusCode_ServiceUnavailable}
		c, _, _, _ := startGlobalRL(ctx, t, env, cfg, allRoutes("routes-503"))
		r.set(func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
			return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{over(durationpb.New(30 * time.Second))}}, nil
		})
		var tr metadata.MD
		if code, msg := statusOf(rpcResult(ctx, c, "EmptyCall", grpc.Trailer(&tr))); code != codes.Unavailable {
			t.Fatalf("EmptyCall: %v %q, want UNAVAILABLE (503)", code, msg)
		}
		if got := tr.Get("retry-after"); len(got) != 0 {
			t.Errorf("trailer retry-after = %q with rate_limited_status 503, want none", got)
		}
	})
}

// TestEnvoyParity_LocalRetryAfter pins the local rate limit filter's
// retry-after for the longest fill_interval a config can give: a positive
// number of seconds (the bucket holds a token interval of at most 2^61 ns,
// 73 years, so the value is about that), never an overflowed one.
func TestEnvoyParity_LocalRetryAfter(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	cfg := &localratelimitpb.LocalRateLimit{
		StatPrefix:             "parity",
		TokenBucket:            &typepb.TokenBucket{MaxTokens: 1, FillInterval: maxProtoDuration},
		FilterEnabled:          runtimePercent(100),
		FilterEnforced:         runtimePercent(100),
		EnableRetryAfterHeader: true,
	}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, "local", cfg)}, allRoutes("routes"), "")
	}, nil)
	c := connected(ctx, t, addr)
	if err := rpcResult(ctx, c, "EmptyCall"); err != nil {
		t.Fatalf("EmptyCall with the bucket's one token: %v", err)
	}
	var tr metadata.MD
	if code, msg := statusOf(rpcResult(ctx, c, "EmptyCall", grpc.Trailer(&tr))); code != codes.Unavailable {
		t.Fatalf("EmptyCall without a token: %v %q, want UNAVAILABLE", code, msg)
	}
	got := tr.Get("retry-after")
	const span = int64(1) << 61 / int64(time.Second) // the bucket's longest token interval, in whole seconds
	if n, err := strconv.ParseInt(strings.Join(got, ","), 10, 64); err != nil || n < span || n > span+1 {
		t.Errorf("trailer retry-after = %q, want %d or %d seconds", got, span, span+1)
	}
}

// TestEnvoyParity_HeadersToAdd: the rate limit service's
// request_headers_to_add are added to the RPC's metadata after what the
// client sent for the same key, never in its place, and each repeated key
// keeps every value (Envoy copies them into the request's headers, which
// appends); its response_headers_to_add likewise reach the client with
// every value, on an allowed RPC and on a refused one.
func TestEnvoyParity_HeadersToAdd(t *testing.T) {
	ctx := testContext(t)
	r := startRLS(t)
	env := authzEnv(t, false, r.addr)
	c, rec, _, _ := startGlobalRL(ctx, t, env, globalRL(r.addr, rlOf(rlGeneric("x"))), allRoutes("routes"))
	code := rlspb.RateLimitResponse_OK
	r.set(func(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		return &rlspb.RateLimitResponse{
			OverallCode: code,
			RequestHeadersToAdd: []*corepb.HeaderValue{
				{Key: "x-tenant", Value: "from-rls"}, {Key: "x-quota", Value: "a"}, {Key: "x-quota", Value: "b"},
			},
			ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "x-rl", Value: "1"}, {Key: "x-rl", Value: "2"}},
		}, nil
	})

	var hdr metadata.MD
	if err := rpcResult(withCase(ctx, "ok", "x-tenant", "client"), c, "EmptyCall", grpc.Header(&hdr)); err != nil {
		t.Fatalf("EmptyCall: %v, want OK", err)
	}
	calls := rec.ofCase("ok")
	if len(calls) != 1 {
		t.Fatalf("%d RPCs reached the handler, want 1", len(calls))
	}
	for k, want := range map[string]string{"x-tenant": "client,from-rls", "x-quota": "a,b"} {
		if got := strings.Join(calls[0].md.Get(k), ","); got != want {
			t.Errorf("handler sees %s = %q, want %q", k, got, want)
		}
	}
	if got := strings.Join(hdr.Get("x-rl"), ","); got != "1,2" {
		t.Errorf("response header x-rl = %q, want 1,2", got)
	}

	code = rlspb.RateLimitResponse_OVER_LIMIT
	var tr metadata.MD
	if code, msg := statusOf(rpcResult(withCase(ctx, "over"), c, "EmptyCall", grpc.Trailer(&tr))); code != codes.Unavailable {
		t.Fatalf("EmptyCall: %v %q, want UNAVAILABLE", code, msg)
	}
	if got := strings.Join(tr.Get("x-rl"), ","); got != "1,2" {
		t.Errorf("trailer x-rl = %q, want 1,2", got)
	}
}

// TestEnvoyParity_BinaryHeaders: a binary header whose bytes are not a
// multiple of 3 long, the case where base64's padding shows, as each filter
// sees it. RBAC (gRFC A41: on-the-wire values, binary ones in base64) and
// the rate limit descriptors (Envoy's request_headers action: the header as
// Envoy sees it on the wire) see it as gRPC clients send it, without
// padding; ext_authz's header_map (gRFC A102: a -bin value written into a
// HeaderValue is base64-encoded) carries it with padding, as grpc-go writes
// it.
func TestEnvoyParity_BinaryHeaders(t *testing.T) {
	const (
		blob     = "\x00\x01" // two bytes
		unpadded = "AAE"      // as grpc-go, grpc-java and C-core send it
		padded   = "AAE="
	)
	ctx := testContext(t)
	withBlob := metadata.AppendToOutgoingContext(ctx, "x-blob-bin", blob)

	t.Run("rbac", func(t *testing.T) {
		env := newTestEnv(t)
		policy := func(value string) *rbacconfigpb.Policy {
			return &rbacconfigpb.Policy{
				Permissions: []*rbacconfigpb.Permission{anyPermission()},
				Principals:  []*rbacconfigpb.Principal{headerPrincipal("x-blob-bin", value)},
			}
		}
		cfg := rbacRules(rbacconfigpb.RBAC_ALLOW, map[string]*rbacconfigpb.Policy{"wire-form": policy(unpadded)})
		_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
			return rbacListener(t, a, cfg, allRoutes("r"), "")
		}, nil)
		c := connected(ctx, t, addr)
		if code, msg := statusOf(rpcResult(withBlob, c, "EmptyCall")); code != codes.OK {
			t.Errorf("EmptyCall with x-blob-bin under a policy allowing %q: %v %q, want OK", unpadded, code, msg)
		}
		if code, _ := statusOf(rpcResult(ctx, c, "EmptyCall")); code != codes.PermissionDenied {
			t.Errorf("EmptyCall without x-blob-bin: %v, want PERMISSION_DENIED", code)
		}
	})

	t.Run("ratelimit_descriptor", func(t *testing.T) {
		r := startRLS(t)
		env := authzEnv(t, false, r.addr)
		c, _, _, _ := startGlobalRL(ctx, t, env, globalRL(r.addr, rlOf(rlHeader("x-blob-bin", "blob"))), allRoutes("routes"))
		if err := rpcResult(withBlob, c, "EmptyCall"); err != nil {
			t.Fatalf("EmptyCall: %v", err)
		}
		reqs := r.taken()
		if len(reqs) != 1 {
			t.Fatalf("%d calls for one RPC, want 1", len(reqs))
		}
		if got, want := descriptorsOf(reqs[0]), "blob="+unpadded; got != want {
			t.Errorf("descriptors %q, want %q", got, want)
		}
	})

	t.Run("extauthz_header_map", func(t *testing.T) {
		a := startAuthzServer(t)
		env := authzEnv(t, false, a.addr)
		c, _, _ := startAuthz(ctx, t, env, extAuthz(a.addr), allRoutes("routes"))
		if err := rpcResult(withBlob, c, "EmptyCall"); err != nil {
			t.Fatalf("EmptyCall: %v", err)
		}
		checks := a.taken()
		if len(checks) != 1 {
			t.Fatalf("%d Checks for one RPC, want 1", len(checks))
		}
		if got := headerMapOf(checks[0].req.GetAttributes().GetRequest().GetHttp())["x-blob-bin"]; len(got) != 1 || got[0] != padded {
			t.Errorf("header_map x-blob-bin = %q, want [%s]", got, padded)
		}
	})
}
