package ratelimit

import (
	"context"
	"strings"
	"testing"
	"time"

	commonrlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serviceConfig is envoyproxy/ratelimit's config for domain "interop":
// per tenant, per peer address and for the whole fleet. Per day, so that
// no window ends during a test (Redis starts empty for each test).
const serviceConfig = `domain: interop
descriptors:
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 5
  - key: remote_address
    rate_limit:
      unit: day
      requests_per_unit: 3
  - key: generic_key
    value: fleet
    rate_limit:
      unit: day
      requests_per_unit: 4
`

// stack is one test's Redis, rate limit service and xDS servers.
type stack struct {
	redis, rls *child
	rlsAddr    string
	env        *env
}

// newStack starts Redis, envoyproxy/ratelimit over it, and three xDS
// servers whose Listeners run the filter with cfg(i) (i: the server).
func newStack(ctx context.Context, t *testing.T, cfg func(rlsAddr string, i int) *rlpb.RateLimit) *stack {
	t.Helper()
	st := &stack{}
	var redisAddr string
	redisAddr, st.redis = startRedis(ctx, t)
	st.rlsAddr, st.rls = startRatelimit(ctx, t, redisAddr, serviceConfig)
	st.env = newEnv(t, 3, st.rlsAddr)
	st.env.publish(ctx, func(i int) *rlpb.RateLimit { return cfg(st.rlsAddr, i) })
	return st
}

// same is a cfg of newStack: every server with the same config.
func same(timeout time.Duration, failureModeDeny bool) func(string, int) *rlpb.RateLimit {
	return func(rlsAddr string, _ int) *rlpb.RateLimit { return filterConfig(rlsAddr, timeout, failureModeDeny) }
}

// tally makes n RPCs with call, in turn on each of clients, and returns how
// many ended with each code; every refused one must carry
// x-envoy-ratelimited: true.
func tally(ctx context.Context, t *testing.T, n int, clients []testgrpc.TestServiceClient, call func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption) error) map[codes.Code]int {
	t.Helper()
	out := map[codes.Code]int{}
	for i := range n {
		var tr metadata.MD
		code := status.Code(call(ctx, clients[i%len(clients)], grpc.Trailer(&tr)))
		out[code]++
		if code == codes.Unavailable && strings.Join(tr.Get("x-envoy-ratelimited"), ",") != "true" {
			t.Errorf("RPC %d refused without x-envoy-ratelimited: true (trailers %v)", i, tr)
		}
	}
	return out
}

func emptyCall(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) error {
	_, err := c.EmptyCall(ctx, &testgrpc.Empty{}, opts...)
	return err
}

func unaryCall(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) error {
	_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, opts...)
	return err
}

// TestFleetLimits: one limit shared by three servers holds across them:
// the service's N per window in total, not N per server; per x-tenant
// header, per peer address, and per generic key.
func TestFleetLimits(t *testing.T) {
	ctx := testContext(t)
	st := newStack(ctx, t, same(2*time.Second, false))
	clientsFrom := func(ip string) []testgrpc.TestServiceClient {
		var cs []testgrpc.TestServiceClient
		for _, s := range st.env.servers {
			cs = append(cs, client(t, s, ip))
		}
		return cs
	}
	local := clientsFrom("127.0.0.1")

	t.Run("tenant", func(t *testing.T) {
		acme := metadata.AppendToOutgoingContext(ctx, "x-tenant", "acme")
		got := tally(acme, t, 15, local, emptyCall)
		if got[codes.OK] != 5 || got[codes.Unavailable] != 10 {
			t.Errorf("15 RPCs of tenant acme over 3 servers: %v; want 5 OK (the tenant's limit, shared) and 10 UNAVAILABLE", got)
		}
		other := metadata.AppendToOutgoingContext(ctx, "x-tenant", "globex")
		if got := tally(other, t, 3, local, emptyCall); got[codes.OK] != 3 {
			t.Errorf("another tenant: %v, want 3 OK (a counter of its own)", got)
		}
	})
	t.Run("peer address", func(t *testing.T) {
		from2 := clientsFrom("127.0.0.2")
		if got := tally(ctx, t, 9, from2, unaryCall); got[codes.OK] != 3 || got[codes.Unavailable] != 6 {
			t.Errorf("9 RPCs from 127.0.0.2 over 3 servers: %v; want 3 OK and 6 UNAVAILABLE", got)
		}
		if got := tally(ctx, t, 3, clientsFrom("127.0.0.3"), unaryCall); got[codes.OK] != 3 {
			t.Errorf("from 127.0.0.3: %v, want 3 OK (a counter of its own)", got)
		}
	})
	t.Run("generic key", func(t *testing.T) {
		fleet := metadata.AppendToOutgoingContext(ctx, "x-kind", "fleet")
		if got := tally(fleet, t, 10, local, emptyCall); got[codes.OK] != 4 || got[codes.Unavailable] != 6 {
			t.Errorf("10 fleet RPCs over 3 servers: %v; want 4 OK and 6 UNAVAILABLE", got)
		}
	})
}

// TestRedisStopped: with Redis gone mid-run, envoyproxy/ratelimit answers
// with an error; the servers without failure_mode_deny let RPCs through,
// the one with it fails them (status_on_error's default 500 → UNKNOWN),
// each within the filter's timeout.
func TestRedisStopped(t *testing.T) {
	ctx := testContext(t)
	st := newStack(ctx, t, func(rlsAddr string, i int) *rlpb.RateLimit {
		return filterConfig(rlsAddr, time.Second, i == 2)
	})
	c := []testgrpc.TestServiceClient{client(t, st.env.servers[0], "127.0.0.1"), client(t, st.env.servers[1], "127.0.0.1"), client(t, st.env.servers[2], "127.0.0.1")}
	acme := metadata.AppendToOutgoingContext(ctx, "x-tenant", "redis")
	for i, cl := range c {
		if err := emptyCall(acme, cl); err != nil {
			t.Fatalf("server %d with Redis up: %v", i, err)
		}
	}
	st.redis.stop()

	// The service's own failure mode: an error, not an answer.
	cc, err := grpc.NewClient(st.rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := rlspb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{
		Domain:      domain,
		Descriptors: []*commonrlpb.RateLimitDescriptor{{Entries: []*commonrlpb.RateLimitDescriptor_Entry{{Key: "tenant", Value: "redis"}}}},
	})
	if err == nil {
		t.Fatalf("envoyproxy/ratelimit without Redis answered %v, want an error", resp)
	}
	t.Logf("envoyproxy/ratelimit without Redis: %v", err)

	for i, want := range []codes.Code{codes.OK, codes.OK, codes.Unknown} {
		start := time.Now()
		err := emptyCall(acme, c[i])
		if got := status.Code(err); got != want {
			t.Errorf("server %d (failure_mode_deny %v), Redis stopped: %v, want %v", i, i == 2, err, want)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("server %d: the RPC took %v with a 1 s filter timeout", i, took)
		}
	}
}

// TestServiceStopped: a service that stops answering (SIGSTOP: its
// connections stay open) costs an RPC the filter's timeout and no more;
// then, killed, it is refused at once. Either way the servers without
// failure_mode_deny let RPCs through and the one with it fails them.
func TestServiceStopped(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ctx := testContext(t)
	st := newStack(ctx, t, func(rlsAddr string, i int) *rlpb.RateLimit {
		return filterConfig(rlsAddr, timeout, i == 2)
	})
	c := []testgrpc.TestServiceClient{client(t, st.env.servers[0], "127.0.0.1"), client(t, st.env.servers[2], "127.0.0.1")}
	acme := metadata.AppendToOutgoingContext(ctx, "x-tenant", "stopped")
	for _, cl := range c {
		if err := emptyCall(acme, cl); err != nil {
			t.Fatalf("with the service up: %v", err)
		}
	}
	check := func(what string, minTook time.Duration) {
		t.Helper()
		for i, want := range []codes.Code{codes.OK, codes.Unknown} {
			start := time.Now()
			err := emptyCall(acme, c[i])
			took := time.Since(start)
			if got := status.Code(err); got != want {
				t.Errorf("%s, failure_mode_deny %v: %v, want %v", what, i == 1, err, want)
			}
			if took < minTook || took > timeout+2*time.Second {
				t.Errorf("%s, failure_mode_deny %v: the RPC took %v, want from %v to the %v timeout and a margin", what, i == 1, took, minTook, timeout)
			}
		}
	}
	st.rls.pause(t)
	check("service stopped (SIGSTOP)", timeout-50*time.Millisecond)
	st.rls.stop()
	check("service killed", 0)
}
