package e2e_test

// End-to-end tests of how the access log says an RPC ended, beyond
// TestAccessLog_Outcomes: the global rate limit's refusals, ext_authz
// failing closed, fault injection, request headers over the chain's bound,
// a route that does not match, an unregistered method, a client that
// cancels, and RPCs the server cuts short (a drain's grace time, Stop),
// each with Envoy's response flags and details.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// outcomeFormat is the line of the outcome tests.
const outcomeFormat = "%RESPONSE_CODE% %GRPC_STATUS% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% case=%REQ(X-CASE)%\n"

// TestAccessLog_Refusals: the global rate limit's over-limit answer (RL
// request_rate_limited) and its service failing closed (RLSE
// rate_limiter_error), ext_authz failing closed (UAEX ext_authz_error), a
// fault abort (FI fault_filter_abort) and a delay on an RPC that succeeds
// (DI via_upstream), request headers over max_headers_count (DPE
// http2.too_many_headers), no route (NR route_not_found), a method no
// service has (gRPC's UNIMPLEMENTED: via_upstream, as the application's
// answer behind Envoy), and a client that cancels (no status, response
// code 0, DR http2.remote_reset), unary and streaming.
func TestAccessLog_Refusals(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	r := startRLS(t)
	env := authzEnv(t, false, a.addr, r.addr)
	a.set(func(_ context.Context, req *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		if headerMapOf(req.GetAttributes().GetRequest().GetHttp())[caseHeader][0] == "autherr" {
			return nil, errors.New("the policy store is down")
		}
		return okResponse(), nil
	})
	r.set(func(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		switch descriptorsOf(req) {
		case "case=over":
			return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}, nil
		case "case=rlerr":
			return nil, errors.New("redis is gone")
		}
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
	})
	rl := globalRL(r.addr, rlOf(rlHeader(caseHeader, "case")))
	rl.FailureModeDeny = true
	fault := func(cfg *faultpb.HTTPFault) map[string]*anypb.Any {
		return map[string]*anypb.Any{"fault": anyOf(t, cfg)}
	}
	rc := routeConfig("routes", []*routepb.Route{
		caseRoute("abort", fault(&faultpb.HTTPFault{Abort: grpcAbort(codes.DataLoss, 100)})),
		caseRoute("delay", fault(&faultpb.HTTPFault{Delay: fixedDelay(50*time.Millisecond, 100)})),
		nonForwarding(prefixMatch("/grpc.testing.")),
	})
	path := filepath.Join(t.TempDir(), "access.log")
	started := make(chan string, 1)
	_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
		l := filtersListener(addr, []*hcmpb.HttpFilter{
			httpFilter(t, "rl", rl),
			httpFilter(t, "authz", extAuthz(a.addr)),
			httpFilter(t, "fault", &faultpb.HTTPFault{}),
		}, rc, "")
		hcm := &hcmpb.HttpConnectionManager{}
		if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
			t.Fatal(err)
		}
		hcm.CommonHttpProtocolOptions = &corepb.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(30)}
		l.FilterChains[0].Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)}
		return loggingListener(t, l, fileLog(t, path, "%RESPONSE_CODE% %GRPC_STATUS% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% id=%REQ(X-ID)%\n"))
	}, nil, behaviour(started)...)
	c := connected(ctx, t, addr)
	var many []string
	for i := range 30 {
		many = append(many, fmt.Sprintf("x-h%d", i), "v")
	}
	tests := []struct {
		name   string // x-id; x-case is its part before any "-"
		method string // EmptyCall, FullDuplexCall, or a full method name
		kv     []string
		code   codes.Code
		want   string
	}{
		{name: "over", method: "EmptyCall", code: codes.Unavailable, want: "200 Unavailable RL request_rate_limited"},
		{name: "over-stream", method: "FullDuplexCall", code: codes.Unavailable, want: "200 Unavailable RL request_rate_limited"},
		{name: "rlerr", method: "EmptyCall", code: codes.Unknown, want: "200 Unknown RLSE rate_limiter_error"},
		{name: "autherr", method: "EmptyCall", code: codes.PermissionDenied, want: "200 PermissionDenied UAEX ext_authz_error"},
		{name: "abort", method: "EmptyCall", code: codes.DataLoss, want: "200 DataLoss FI fault_filter_abort"},
		{name: "abort-stream", method: "FullDuplexCall", code: codes.DataLoss, want: "200 DataLoss FI fault_filter_abort"},
		{name: "delay", method: "EmptyCall", code: codes.OK, want: "200 OK DI via_upstream"},
		{name: "delay-stream", method: "FullDuplexCall", code: codes.OK, want: "200 OK DI via_upstream"},
		{name: "headers", method: "EmptyCall", kv: many, code: codes.Internal, want: "200 Internal DPE http2.too_many_headers"},
		{name: "noroute", method: "/nowhere.Service/Call", code: codes.Unavailable, want: "200 Unavailable NR route_not_found"},
		{name: "unregistered", method: "/grpc.testing.UnimplementedService/UnimplementedCall", code: codes.Unimplemented, want: "200 Unimplemented - via_upstream"},
		{name: "cancel", method: "EmptyCall", kv: []string{hdrSleep, "1m"}, code: codes.Canceled, want: "0 - DR http2.remote_reset"},
		{name: "cancel-stream", method: "FullDuplexCall", kv: []string{hdrSleep, "1m"}, code: codes.Canceled, want: "0 - DR http2.remote_reset"},
	}
	for _, tc := range tests {
		route, _, _ := strings.Cut(tc.name, "-")
		rctx, cancel := context.WithCancel(withCase(ctx, route, append([]string{"x-id", tc.name}, tc.kv...)...))
		if strings.HasPrefix(tc.name, "cancel") {
			go func() {
				<-started
				cancel()
			}()
		}
		var err error
		if strings.HasPrefix(tc.method, "/") {
			err = c.Invoke(rctx, tc.method, &testpb.Empty{}, &testpb.Empty{})
		} else {
			err = rpcResult(rctx, c, tc.method)
		}
		cancel()
		if code, msg := statusOf(err); code != tc.code {
			t.Errorf("%s: %v %q, want %v", tc.name, code, msg, tc.code)
		}
	}
	lines := logLines(ctx, t, path, len(tests))
	for _, tc := range tests {
		if got, want := lineEnding(t, lines, " id="+tc.name), tc.want+" id="+tc.name; got != want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, want)
		}
	}
}

// TestAccessLog_CutShort: an RPC the server cuts short is logged with DC
// and why: drain_timeout when a drained connection outlives the drain's
// grace time, server_stopped when the server is stopped; unary and
// streaming.
//
// Skipped: both lines are lost. A connection's gRPC server is stopped
// without waiting for its handlers (grpc.Server.Stop), so the chain's
// logger is closed (connserver's removeServer, when the retired chain's
// last connection closes) and, for Stop, the server's outputs too, before
// the cut RPCs' handlers return and log them.
func TestAccessLog_CutShort(t *testing.T) {
	for _, how := range []string{"drain", "stop"} {
		t.Run(how, func(t *testing.T) {
			ctx := testContext(t)
			env := newTestEnv(t)
			path := filepath.Join(t.TempDir(), "access.log")
			listener := func(chain string) func(net.Addr) *listenerpb.Listener {
				return func(a net.Addr) *listenerpb.Listener {
					return loggingListener(t, testListener(a, []chainSpec{{name: chain}}, nil), fileLog(t, path, outcomeFormat))
				}
			}
			started := make(chan string, 2)
			s, addr := startServing(ctx, t, env, listener("A"), nil, append(behaviour(started), xds.DrainGraceTime(100*time.Millisecond))...)
			c := connected(ctx, t, addr)
			done := make(chan error, 2)
			for _, m := range []string{"EmptyCall", "FullDuplexCall"} {
				go func() {
					done <- rpcResult(withCase(ctx, how+"-"+m, chainHeader, "A", hdrSleep, "1m"), c, m)
				}()
			}
			<-started
			<-started
			if how == "drain" {
				env.update(ctx, t, []*listenerpb.Listener{listener("B")(addr)}, nil)
			} else {
				s.Stop()
			}
			for range 2 {
				if err := <-done; err == nil {
					t.Fatal("an RPC cut short ended OK")
				}
			}
			want := map[string]string{"drain": "DC drain_timeout", "stop": "DC server_stopped"}[how]
			lines := logLines(ctx, t, path, 2)
			for _, m := range []string{"EmptyCall", "FullDuplexCall"} {
				name := how + "-" + m
				got := lineEnding(t, lines, " case="+name)
				if fields := strings.Fields(got); len(fields) != 5 || fields[0] != "200" || fields[2]+" "+fields[3] != want {
					t.Errorf("%s: %q, want 200, a status, %s", name, got, want)
				}
			}
		})
	}
}

// lineEnding returns the line of lines that ends with suffix.
func lineEnding(t *testing.T, lines []string, suffix string) string {
	t.Helper()
	for _, l := range lines {
		if strings.HasSuffix(l, suffix) {
			return l
		}
	}
	t.Fatalf("no access log line ends with %q in:\n%s", suffix, strings.Join(lines, "\n"))
	return ""
}
