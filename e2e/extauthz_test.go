package e2e_test

// End-to-end tests of the ext_authz filter (gRFC A92, A102 drafts): a real
// management server, a real xDS server, real grpc-go clients, and a small
// scriptable authorization server speaking envoy.service.auth.v3 on
// loopback. Open Policy Agent as the authorization server is tested in
// interop/extauthz.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	insecurecredspb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/insecure/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	xds "github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/admin"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// authzServer is a scriptable envoy.service.auth.v3.Authorization server:
// answer decides each Check (nil: allow), and every request is recorded
// with its metadata and deadline.
type authzServer struct {
	authpb.UnimplementedAuthorizationServer
	addr string

	mu     sync.Mutex
	answer func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error)
	checks []authzCheck

	conns connCounter // connections accepted
}

type authzCheck struct {
	req         *authpb.CheckRequest
	md          metadata.MD
	hasDeadline bool
	deadline    time.Time
}

func startAuthzServer(t *testing.T, opts ...grpc.ServerOption) *authzServer {
	t.Helper()
	a := &authzServer{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.addr = lis.Addr().String()
	s := grpc.NewServer(append(opts, grpc.StatsHandler(&a.conns))...)
	authpb.RegisterAuthorizationServer(s, a)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return a
}

func (a *authzServer) Check(ctx context.Context, req *authpb.CheckRequest) (*authpb.CheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	dl, ok := ctx.Deadline()
	a.mu.Lock()
	a.checks = append(a.checks, authzCheck{req: req, md: md, hasDeadline: ok, deadline: dl})
	answer := a.answer
	a.mu.Unlock()
	if answer == nil {
		return okResponse(), nil
	}
	return answer(ctx, req)
}

func (a *authzServer) set(f func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error)) {
	a.mu.Lock()
	a.answer = f
	a.mu.Unlock()
}

// taken returns the checks recorded since the last call.
func (a *authzServer) taken() []authzCheck {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.checks
	a.checks = nil
	return out
}

func (a *authzServer) connections() int { return a.conns.count() }

func okResponse(headers ...*corepb.HeaderValueOption) *authpb.CheckResponse {
	return &authpb.CheckResponse{Status: &status.Status{}, HttpResponse: &authpb.CheckResponse_OkResponse{OkResponse: &authpb.OkHttpResponse{Headers: headers}}}
}

func deniedResponse(httpStatus typepb.StatusCode, msg string, headers ...*corepb.HeaderValueOption) *authpb.CheckResponse {
	d := &authpb.DeniedHttpResponse{Headers: headers}
	if httpStatus >= 0 {
		d.Status = &typepb.HttpStatus{Code: httpStatus}
	}
	return &authpb.CheckResponse{Status: &status.Status{Code: int32(codes.PermissionDenied), Message: msg}, HttpResponse: &authpb.CheckResponse_DeniedResponse{DeniedResponse: d}}
}

func hvo(key, value string) *corepb.HeaderValueOption {
	return &corepb.HeaderValueOption{Header: &corepb.HeaderValue{Key: key, Value: value}}
}

// extAuthz is an ExtAuthz config calling target, with a 5 s timeout.
func extAuthz(target string) *extauthzpb.ExtAuthz {
	return &extauthzpb.ExtAuthz{Services: &extauthzpb.ExtAuthz_GrpcService{GrpcService: &corepb.GrpcService{
		TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: target, StatPrefix: "ignored"}},
		Timeout:         durationpb.New(5 * time.Second),
	}}}
}

// authzEnv is a test environment whose bootstrap allows targets (insecure
// credentials), with trusted as the management server's trust.
func authzEnv(t *testing.T, trusted bool, targets ...string) *testEnv {
	t.Helper()
	return authzEnvWith(t, trusted, `{"type": "insecure"}`, targets...)
}

// authzEnvWith is authzEnv with targets allowed with the channel
// credentials creds (one JSON entry of channel_creds).
func authzEnvWith(t *testing.T, trusted bool, creds string, targets ...string) *testEnv {
	t.Helper()
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	nodeID := "node-" + testutils.RunName(t)
	o := e2e.BootstrapOptions{ServerURIs: []string{ms.Address}, NodeID: nodeID, ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate}
	if trusted {
		o.ServerFeatures = []string{"trusted_xds_server"}
	}
	if len(targets) > 0 {
		o.AllowedGRPCServices = map[string]json.RawMessage{}
		for _, tg := range targets {
			o.AllowedGRPCServices[tg] = json.RawMessage(`{"channel_creds": [` + creds + `]}`)
		}
	}
	return &testEnv{ms: ms, nodeID: nodeID, bootstrap: e2e.Bootstrap(t, o)}
}

// authzListener returns the Listener of an address whose one chain runs
// ext_authz "authz" with cfg over rc.
func authzListener(t *testing.T, cfg *extauthzpb.ExtAuthz, rc *routepb.RouteConfiguration) func(net.Addr) *listenerpb.Listener {
	return func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, "authz", cfg)}, rc, "")
	}
}

// startAuthz serves a Listener whose chain runs ext_authz "authz" with cfg
// over rc, with the user's interceptors recorded.
func startAuthz(ctx context.Context, t *testing.T, env *testEnv, cfg *extauthzpb.ExtAuthz, rc *routepb.RouteConfiguration, opts ...grpc.ServerOption) (*testClient, *handlerRecorder, net.Addr) {
	t.Helper()
	rec := &handlerRecorder{}
	_, addr := startServing(ctx, t, env, authzListener(t, cfg, rc), nil, append(rec.options(), opts...)...)
	return connected(ctx, t, addr), rec, addr
}

// TestExtAuthz_Allow: an allowed RPC reaches its handler with the request
// headers the authorization server added and without those it removed,
// and the client gets the response headers it added; the Check carries
// A92's AttributeContext (addresses with separate ports, POST, the path,
// HTTP/2, size -1, raw header values with base64 for -bin, no headers
// map), the GrpcService's initial_metadata and the RPC's deadline; one
// Check per RPC, unary and streaming.
func TestExtAuthz_Allow(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	cfg := extAuthz(a.addr)
	cfg.GetGrpcService().InitialMetadata = []*corepb.HeaderValue{{Key: "x-from-config", Value: "v1"}}
	a.set(func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		overwrite := hvo("x-case", "replaced")
		overwrite.AppendAction = corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		r := okResponse(hvo("x-user", "alice"), overwrite, hvo("x-multi", "second"))
		r.GetOkResponse().HeadersToRemove = []string{"x-secret"}
		r.GetOkResponse().ResponseHeadersToAdd = []*corepb.HeaderValueOption{hvo("x-authz", "checked")}
		return r, nil
	})
	c, rec, addr := startAuthz(ctx, t, env, cfg, allRoutes("routes"))

	var hdr metadata.MD
	rctx, cancel := context.WithTimeout(withCase(ctx, "allow", "x-secret", "s3cret", "x-blob-bin", "\x00\x01binary", "x-multi", "first"), 20*time.Second)
	defer cancel()
	if err := rpcResult(rctx, c, "EmptyCall", grpc.Header(&hdr)); err != nil {
		t.Fatalf("EmptyCall: %v, want OK", err)
	}
	if got := hdr.Get("x-authz"); len(got) != 1 || got[0] != "checked" {
		t.Errorf("response header x-authz = %q, want [checked] (response_headers_to_add)", got)
	}
	calls := rec.ofCase("replaced")
	if len(calls) != 1 {
		t.Fatalf("%d RPCs reached the handler with x-case replaced (OVERWRITE_IF_EXISTS_OR_ADD), want 1; all: %d", len(calls), len(rec.calls))
	}
	md := calls[0].md
	if got := md.Get("x-user"); len(got) != 1 || got[0] != "alice" {
		t.Errorf("handler sees x-user = %q, want [alice]", got)
	}
	if got := md.Get("x-multi"); len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Errorf("handler sees x-multi = %q, want [first second] (append_action's default appends)", got)
	}
	if got := md.Get("x-secret"); len(got) != 0 {
		t.Errorf("handler sees x-secret = %q, want it removed", got)
	}

	checks := a.taken()
	if len(checks) != 1 {
		t.Fatalf("%d Checks for one RPC, want 1", len(checks))
	}
	ck := checks[0]
	attrs := ck.req.GetAttributes()
	src, dst := attrs.GetSource().GetAddress().GetSocketAddress(), attrs.GetDestination().GetAddress().GetSocketAddress()
	host, port := hostPort(addr)
	if dst.GetAddress() != host || dst.GetPortValue() != port {
		t.Errorf("destination %v, want %s port %d", dst, host, port)
	}
	if src.GetAddress() != "127.0.0.1" || src.GetPortValue() == 0 || strings.Contains(src.GetAddress(), ":") {
		t.Errorf("source %v, want 127.0.0.1 and the client's port as port_value", src)
	}
	h := attrs.GetRequest().GetHttp()
	if h.GetMethod() != "POST" || h.GetPath() != "/grpc.testing.TestService/EmptyCall" || h.GetProtocol() != "HTTP/2" || h.GetSize() != -1 {
		t.Errorf("request.http = method %q path %q protocol %q size %d, want POST /grpc.testing.TestService/EmptyCall HTTP/2 -1", h.GetMethod(), h.GetPath(), h.GetProtocol(), h.GetSize())
	}
	if len(h.GetHeaders()) != 0 {
		t.Errorf("request.http.headers = %v, want empty (gRFC A92 sends header_map only)", h.GetHeaders())
	}
	hm := headerMapOf(h)
	if got := hm["x-case"]; len(got) != 1 || got[0] != "allow" {
		t.Errorf("header_map x-case = %q, want [allow]", got)
	}
	if got := hm["x-blob-bin"]; len(got) != 1 || got[0] != base64.StdEncoding.EncodeToString([]byte("\x00\x01binary")) {
		t.Errorf("header_map x-blob-bin = %q, want the value in base64 with padding (A102)", got)
	}
	if got := ck.md.Get("x-from-config"); len(got) != 1 || got[0] != "v1" {
		t.Errorf("Check metadata x-from-config = %q, want [v1] (initial_metadata)", got)
	}
	if !ck.hasDeadline || time.Until(ck.deadline) > 6*time.Second {
		t.Errorf("Check deadline %v (set: %v), want at most the 5 s timeout", ck.deadline, ck.hasDeadline)
	}

	// A streaming RPC: one Check, headers changed for the handler too.
	if err := rpcResult(withCase(ctx, "stream"), c, "FullDuplexCall"); err != nil {
		t.Fatalf("FullDuplexCall: %v, want OK", err)
	}
	if n := len(a.taken()); n != 1 {
		t.Errorf("%d Checks for one stream, want 1", n)
	}
}

func headerMapOf(h *authpb.AttributeContext_HttpRequest) map[string][]string {
	out := map[string][]string{}
	for _, hv := range h.GetHeaderMap().GetHeaders() {
		out[hv.GetKey()] = append(out[hv.GetKey()], string(hv.GetRawValue()))
	}
	return out
}

// TestExtAuthz_Deny: a denial fails the RPC with denied_response.status
// mapped to gRPC (absent or Empty: PERMISSION_DENIED), the answer's message
// and denied_response.headers as trailers; the handler never runs.
func TestExtAuthz_Deny(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	c, rec, _ := startAuthz(ctx, t, env, extAuthz(a.addr), allRoutes("routes"))
	for _, tc := range []struct {
		name   string
		status typepb.StatusCode
		want   codes.Code
	}{
		{"401", typepb.StatusCode_Unauthorized, codes.Unauthenticated},
		{"429", typepb.StatusCode_TooManyRequests, codes.Unavailable},
		{"absent", -1, codes.PermissionDenied},
		{"empty", 0, codes.PermissionDenied},
	} {
		a.set(func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) {
			return deniedResponse(tc.status, "policy says no", hvo("x-deny-reason", "test-"+tc.name)), nil
		})
		var tr metadata.MD
		err := rpcResult(withCase(ctx, "deny-"+tc.name), c, "UnaryCall", grpc.Trailer(&tr))
		code, msg := statusOf(err)
		if code != tc.want || !strings.Contains(msg, "policy says no") {
			t.Errorf("%s: %v %q, want %v with the authorization server's message", tc.name, code, msg, tc.want)
		}
		if got := tr.Get("x-deny-reason"); len(got) != 1 || got[0] != "test-"+tc.name {
			t.Errorf("%s: trailer x-deny-reason = %q, want [test-%s]", tc.name, got, tc.name)
		}
		if n := len(rec.ofCase("deny-" + tc.name)); n != 0 {
			t.Errorf("%s: %d denied RPCs reached the handler", tc.name, n)
		}
	}
}

// TestExtAuthz_Failures: an error from the authorization server, a closed
// port and a timeout are failed checks: status_on_error (default 403 →
// PERMISSION_DENIED) unless failure_mode_allow lets the RPC through, with
// x-envoy-auth-failure-mode-allowed when failure_mode_allow_header_add.
// (An answer that cannot be applied, or a denial with bad headers, is not a
// failure to get an answer: extauthz_answers_test.go.)
func TestExtAuthz_Failures(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	failures := map[string]func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error){
		"error": func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) {
			return nil, fmt.Errorf("policy engine broken")
		},
		"timeout": func(ctx context.Context, _ *authpb.CheckRequest) (*authpb.CheckResponse, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}
	for _, mode := range []struct {
		name      string
		allow     bool
		headerAdd bool
		onError   typepb.StatusCode
		want      codes.Code
	}{
		{name: "deny", want: codes.PermissionDenied},
		{name: "deny 503", onError: typepb.StatusCode_ServiceUnavailable, want: codes.Unavailable},
		{name: "allow", allow: true, headerAdd: true, want: codes.OK},
	} {
		t.Run(strings.ReplaceAll(mode.name, " ", "_"), func(t *testing.T) {
			for _, target := range []string{a.addr, closedAddr} {
				env := authzEnv(t, false, a.addr, closedAddr)
				cfg := extAuthz(target)
				cfg.GetGrpcService().Timeout = durationpb.New(300 * time.Millisecond)
				cfg.FailureModeAllow, cfg.FailureModeAllowHeaderAdd = mode.allow, mode.headerAdd
				if mode.onError != 0 {
					cfg.StatusOnError = &typepb.HttpStatus{Code: mode.onError}
				}
				c, rec, _ := startAuthz(ctx, t, env, cfg, allRoutes("routes"))
				cases := failures
				if target == closedAddr {
					cases = map[string]func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error){"unreachable": nil}
				}
				for name, f := range cases {
					a.set(f)
					code, msg := statusOf(rpcResult(withCase(ctx, name), c, "EmptyCall"))
					if code != mode.want {
						t.Errorf("%s: %v %q, want %v", name, code, msg, mode.want)
					}
					if code != codes.OK && !strings.Contains(msg, "ext_authz") {
						t.Errorf("%s: message %q does not name ext_authz", name, msg)
					}
					calls := rec.ofCase(name)
					if !mode.allow {
						if len(calls) != 0 {
							t.Errorf("%s: the RPC reached the handler", name)
						}
						continue
					}
					if len(calls) != 1 || strings.Join(calls[0].md.Get("x-envoy-auth-failure-mode-allowed"), ",") != "true" {
						t.Errorf("%s: handler calls %d, want 1 with x-envoy-auth-failure-mode-allowed: true", name, len(calls))
					}
					if len(calls) == 1 && len(calls[0].md.Get("x-user")) != 0 {
						t.Errorf("%s: a mutation of a failed check was applied", name)
					}
				}
			}
		})
	}
}

// TestExtAuthz_HeaderSelection: allowed_headers and disallowed_headers
// select what header_map carries (disallowed wins).
func TestExtAuthz_HeaderSelection(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	cfg := extAuthz(a.addr)
	prefix := func(p string) *matcherpb.StringMatcher {
		return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: p}}
	}
	cfg.AllowedHeaders = &matcherpb.ListStringMatcher{Patterns: []*matcherpb.StringMatcher{prefix("x-")}}
	cfg.DisallowedHeaders = &matcherpb.ListStringMatcher{Patterns: []*matcherpb.StringMatcher{prefix("x-token")}}
	c, _, _ := startAuthz(ctx, t, env, cfg, allRoutes("routes"))
	if err := rpcResult(withCase(ctx, "sel", "x-token", "t", "x-keep", "k", "other", "o"), c, "EmptyCall"); err != nil {
		t.Fatal(err)
	}
	checks := a.taken()
	if len(checks) != 1 {
		t.Fatalf("%d checks, want 1", len(checks))
	}
	hm := headerMapOf(checks[0].req.GetAttributes().GetRequest().GetHttp())
	if _, ok := hm["x-keep"]; !ok {
		t.Errorf("header_map %v lacks x-keep (allowed)", hm)
	}
	for _, k := range []string{"x-token", "other", "content-type", "user-agent"} {
		if _, ok := hm[k]; ok {
			t.Errorf("header_map has %s, which the config does not allow", k)
		}
	}
}

// TestExtAuthz_MutationRules: decoder_header_mutation_rules: a disallowed
// mutation is skipped, or fails the check with disallow_is_error;
// disallow_all skips every one.
func TestExtAuthz_MutationRules(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	a.set(func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		return okResponse(hvo("x-user", "alice"), hvo("x-role", "admin")), nil
	})
	for _, tc := range []struct {
		name       string
		rules      *mutationpb.HeaderMutationRules
		want       codes.Code
		user, role bool
	}{
		{"none", nil, codes.OK, true, true},
		{"disallow role", &mutationpb.HeaderMutationRules{DisallowExpression: &matcherpb.RegexMatcher{Regex: "x-rol.*"}}, codes.OK, true, false},
		// allow_expression allows what it matches; the rest is allowed
		// too unless disallow_all (Envoy's order).
		{"allow user", &mutationpb.HeaderMutationRules{AllowExpression: &matcherpb.RegexMatcher{Regex: "x-user"}}, codes.OK, true, true},
		{"allow user only", &mutationpb.HeaderMutationRules{AllowExpression: &matcherpb.RegexMatcher{Regex: "x-user"}, DisallowAll: wrapperspb.Bool(true)}, codes.OK, true, false},
		{"disallow all", &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true)}, codes.OK, false, false},
		{"disallow is error", &mutationpb.HeaderMutationRules{DisallowExpression: &matcherpb.RegexMatcher{Regex: "x-role"}, DisallowIsError: wrapperspb.Bool(true)}, codes.PermissionDenied, false, false},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			env := authzEnv(t, false, a.addr)
			cfg := extAuthz(a.addr)
			cfg.DecoderHeaderMutationRules = tc.rules
			c, rec, _ := startAuthz(ctx, t, env, cfg, allRoutes("routes"))
			code, msg := statusOf(rpcResult(withCase(ctx, "m"), c, "EmptyCall"))
			if code != tc.want {
				t.Fatalf("%v %q, want %v", code, msg, tc.want)
			}
			if code != codes.OK {
				return
			}
			md := rec.ofCase("m")[0].md
			if got := len(md.Get("x-user")) == 1; got != tc.user {
				t.Errorf("x-user applied: %v, want %v", got, tc.user)
			}
			if got := len(md.Get("x-role")) == 1; got != tc.role {
				t.Errorf("x-role applied: %v, want %v", got, tc.role)
			}
		})
	}
}

// TestExtAuthz_EnabledAndDisabled: filter_enabled at 0% sends no Check and
// lets the RPC through, or fails it with status_on_error under
// deny_at_disable; FilterConfig.disabled on a route turns the filter off
// there, and an ExtAuthzPerRoute override parses; the four A92 counters
// count each outcome.
func TestExtAuthz_EnabledAndDisabled(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	mr := testutils.NewMetricReader(t)
	off := &extauthzpb.ExtAuthz{}
	*off = *extAuthz(a.addr)
	off.FilterEnabled = runtimePercent(0)
	perRoute := anyOf(t, &extauthzpb.ExtAuthzPerRoute{Override: &extauthzpb.ExtAuthzPerRoute_CheckSettings{CheckSettings: &extauthzpb.CheckSettings{}}})
	disabled := anyOf(t, &routepb.FilterConfig{Disabled: true})
	rc := caseRoutes("routes",
		caseRoute("route-off", map[string]*anypb.Any{"authz": disabled}),
		caseRoute("per-route", map[string]*anypb.Any{"authz": perRoute}),
	)
	c, rec, addr := startAuthz(ctx, t, env, extAuthz(a.addr), rc, xds.MeterProvider(mr.Provider))
	if err := rpcResult(withCase(ctx, "route-off"), c, "EmptyCall"); err != nil || len(a.taken()) != 0 {
		t.Errorf("route with FilterConfig.disabled: %v; want OK and no Check", err)
	}
	if err := rpcResult(withCase(ctx, "per-route"), c, "EmptyCall"); err != nil || len(a.taken()) != 1 {
		t.Errorf("route with ExtAuthzPerRoute: %v; want OK after one Check", err)
	}
	a.set(func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		return deniedResponse(-1, "no"), nil
	})
	if code, _ := statusOf(rpcResult(withCase(ctx, "denied"), c, "EmptyCall")); code != codes.PermissionDenied {
		t.Errorf("denied: %v, want PERMISSION_DENIED", code)
	}
	a.set(nil)

	// 0%: no Check; with deny_at_disable, status_on_error.
	env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "authz", off)}, allRoutes("routes"), "")}, nil)
	waitFor(ctx, t, "0% config applied", func() bool {
		a.taken()
		_ = rpcResult(withCase(ctx, "probe"), c, "EmptyCall")
		return len(a.taken()) == 0
	})
	if err := rpcResult(withCase(ctx, "zero"), c, "EmptyCall"); err != nil || len(rec.ofCase("zero")) != 1 {
		t.Errorf("filter_enabled 0%%: %v, want OK and the handler reached", err)
	}
	off.DenyAtDisable = &corepb.RuntimeFeatureFlag{DefaultValue: wrapperspb.Bool(true)}
	off.StatusOnError = &typepb.HttpStatus{Code: typepb.StatusCode_ServiceUnavailable}
	env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "authz", off)}, allRoutes("routes"), "")}, nil)
	waitFor(ctx, t, "deny_at_disable applied", func() bool {
		code, _ := statusOf(rpcResult(withCase(ctx, "probe"), c, "EmptyCall"))
		return code == codes.Unavailable
	})
	if n := len(a.taken()); n != 0 {
		t.Errorf("%d Checks at 0%%, want none", n)
	}
	for _, m := range []string{"allowed", "denied", "filter_disabled", "failed"} {
		name := "grpc.server_ext_authz." + m + "_rpcs"
		v, ok := mr.Value(t, name)
		switch {
		case m == "failed" && ok && v != 0:
			t.Errorf("%s = %d, want 0", name, v)
		case m != "failed" && (!ok || v < 1):
			t.Errorf("%s = %d (recorded: %v), want at least 1", name, v, ok)
		}
		for _, p := range mr.Points(t, name) {
			if len(p.Attrs) != 0 {
				t.Errorf("%s has attributes %v, want none (gRFC A92)", name, p.Attrs)
			}
		}
	}
}

// TestExtAuthz_Trust: gRFC A102's trust model. A target the bootstrap does
// not allow, from a server that is not trusted, is NACKed (the last good
// config keeps serving); a trusted server may name its own target and
// credentials (channel_credentials_plugin), and one without a supported
// type is NACKed.
func TestExtAuthz_Trust(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	b := startAuthzServer(t)

	env := authzEnv(t, false, a.addr)
	c, _, addr := startAuthz(ctx, t, env, extAuthz(a.addr), allRoutes("routes"))
	seen := len(env.ms.Requests())
	env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "authz", extAuthz(b.addr))}, allRoutes("routes"), "")}, nil)
	nack, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(listenerTypeURL)))
	if err != nil {
		t.Fatalf("no NACK for a target outside allowed_grpc_services: %v", err)
	}
	if d := nack.GetErrorDetail().GetMessage(); !strings.Contains(d, "allowed_grpc_services") || !strings.Contains(d, b.addr) {
		t.Errorf("NACK %q does not name the target and allowed_grpc_services", d)
	}
	if err := rpcResult(ctx, c, "EmptyCall"); err != nil || len(a.taken()) != 1 || len(b.taken()) != 0 {
		t.Errorf("after the NACK: %v; want OK, checked by the allowed server", err)
	}

	trusted := authzEnv(t, true)
	withPlugin := extAuthz(b.addr)
	withPlugin.GetGrpcService().GetGoogleGrpc().ChannelCredentialsPlugin = []*anypb.Any{
		{TypeUrl: "type.googleapis.com/some.unknown.Credentials"},
		anyOf(t, &insecurecredspb.InsecureCredentials{}),
	}
	tc, _, taddr := startAuthz(ctx, t, trusted, withPlugin, allRoutes("routes"))
	if err := rpcResult(ctx, tc, "EmptyCall"); err != nil || len(b.taken()) != 1 {
		t.Errorf("trusted server's own target and credentials: %v; want OK after a Check to it", err)
	}
	seen = len(trusted.ms.Requests())
	bad := extAuthz(b.addr)
	bad.GetGrpcService().GetGoogleGrpc().ChannelCredentialsPlugin = []*anypb.Any{{TypeUrl: "type.googleapis.com/some.unknown.Credentials"}}
	trusted.update(ctx, t, []*listenerpb.Listener{filtersListener(taddr, []*hcmpb.HttpFilter{httpFilter(t, "authz", bad)}, allRoutes("routes"), "")}, nil)
	nack, err = trusted.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(listenerTypeURL)))
	if err != nil || !strings.Contains(nack.GetErrorDetail().GetMessage(), "channel_credentials_plugin") {
		t.Errorf("trusted server, no supported channel credentials: NACK %v, %v; want one naming channel_credentials_plugin", nack.GetErrorDetail(), err)
	}
}

// TestExtAuthz_ChannelKept: one side channel per target and credentials,
// shared by filter chains and kept across a Listener update that keeps
// them (gRFC A83): the authorization server sees one connection; the
// channel closes with the server.
func TestExtAuthz_ChannelKept(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	s, addr := startServing(ctx, t, env, authzListener(t, extAuthz(a.addr), allRoutes("routes")), nil)
	c := connected(ctx, t, addr)
	if err := rpcResult(ctx, c, "EmptyCall"); err != nil {
		t.Fatal(err)
	}
	// An update that changes the chain (a new chain server) but not the
	// filter's target and credentials.
	cfg := extAuthz(a.addr)
	cfg.FailureModeAllow = true
	env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, "authz", cfg)}, allRoutes("routes2"), "")}, nil)
	waitFor(ctx, t, "update applied", func() bool {
		c2 := newClient(t, addr, "127.0.0.1", 0)
		return rpcResult(ctx, c2, "EmptyCall") == nil
	})
	for range 3 {
		if err := rpcResult(ctx, connected(ctx, t, addr), "EmptyCall"); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.connections(); n != 1 {
		t.Errorf("the authorization server saw %d connections, want 1 (one channel, kept across the update)", n)
	}
	if n := grpcservice.OpenChannels(); n != 1 {
		t.Errorf("%d side channels open, want 1", n)
	}
	s.Stop()
	waitFor(ctx, t, "side channel closed", func() bool { return grpcservice.OpenChannels() == 0 })
}

// connCounter is a stats handler that counts a test server's connections.
type connCounter struct{ n atomic.Int64 }

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c *connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnBegin); ok {
		c.n.Add(1)
	}
}

// count returns how many connections the server accepted.
func (c *connCounter) count() int { return int(c.n.Load()) }

// waitFor polls cond until it holds.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutils.WaitFor(ctx, t, what, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("not yet")
	})
}

// allowAll is an authorization server that allows every RPC, recording
// nothing: the benchmark's.
type allowAll struct {
	authpb.UnimplementedAuthorizationServer
}

func (allowAll) Check(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) {
	return okResponse(), nil
}

// BenchmarkServerUnaryExtAuthz: server CPU per unary RPC (one connection,
// 8 concurrent callers, the load in a child process) of plain gRPC, the
// xDS server without filters, with an ext_authz filter whose in-process
// authorization server allows every RPC (the server's CPU includes the
// authorization server's, as it runs in the same process), and with the
// filter disabled on the route (FilterConfig.disabled). Side by side, in
// turns, as BenchmarkServerUnaryLocalFilters. Target: the disabled route
// costs what the server without the filter does.
//
//	go test -run '^$' -bench 'BenchmarkServerUnaryExtAuthz' -benchtime 20000x ./e2e
func BenchmarkServerUnaryExtAuthz(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	authpb.RegisterAuthorizationServer(srv, allowAll{})
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	cfg := extAuthz(lis.Addr().String())
	cfg.GetGrpcService().GetGoogleGrpc().ChannelCredentialsPlugin = []*anypb.Any{anyOf(b, &insecurecredspb.InsecureCredentials{})}
	filters := []*hcmpb.HttpFilter{httpFilter(b, "authz", cfg)}
	disabledRoutes := allRoutes("bench")
	disabledRoutes.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{"authz": anyOf(b, &routepb.FilterConfig{Disabled: true})}
	sideBySide(b, "unary", []benchVariant{
		{name: "plain", start: startPlainServer},
		{name: "xds", start: func(b *testing.B) benchServer { return startXDSServerFilters(b, []*hcmpb.HttpFilter{}) }},
		{name: "extauthz", start: func(b *testing.B) benchServer { return startXDSServerFilters(b, filters) }},
		{name: "extauthz-disabled", start: func(b *testing.B) benchServer {
			return startBenchServer(b, thisLibrary, func(a net.Addr) *listenerpb.Listener {
				return filtersListener(a, filters, disabledRoutes, "")
			})
		}},
	})
}

// TestExtAuthz_StatusPage: the status page shows the filter with its
// authorization server and where its credentials come from, and the four
// counts.
func TestExtAuthz_StatusPage(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	s, addr := startServing(ctx, t, env, authzListener(t, extAuthz(a.addr), allRoutes("routes")), nil)
	hs := httptest.NewServer(admin.NewStatusHandler(s.GRPCServer))
	t.Cleanup(hs.Close)
	c := connected(ctx, t, addr)
	if err := rpcResult(ctx, c, "EmptyCall"); err != nil {
		t.Fatal(err)
	}
	a.set(func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		return deniedResponse(-1, "no"), nil
	})
	_ = rpcResult(ctx, c, "EmptyCall")
	text := waitForText(ctx, t, hs.URL, fmt.Sprintf("authorization server %q", a.addr))
	for _, want := range []string{"allowed_grpc_services", "1 allowed, 1 denied, 0 filter disabled, 0 failed", "External authorization (ext_authz)"} {
		if !strings.Contains(text, want) {
			t.Errorf("status page lacks %q:\n%s", want, text)
		}
	}
}

// TestExtAuthz_TLSPeers: over mTLS, the Check names the client (its first
// URI SAN) and the server (its first DNS SAN, the certificate has no URI)
// as principals, and carries the client's certificate, URL-encoded PEM,
// only with include_peer_certificate.
func TestExtAuthz_TLSPeers(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	env.bootstrap = e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs: []string{env.ms.Address}, NodeID: env.nodeID, ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		CertificateProviders: pki.providers(time.Hour),
		AllowedGRPCServices:  map[string]json.RawMessage{a.addr: json.RawMessage(`{"channel_creds": [{"type": "insecure"}]}`)},
	})
	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client", URIs: []string{"spiffe://test/ns/default/sa/client"}, DNSNames: []string{"client.test"}})
	for _, include := range []bool{false, true} {
		cfg := extAuthz(a.addr)
		cfg.IncludePeerCertificate = include
		s, addr := startServing(ctx, t, env, func(lis net.Addr) *listenerpb.Listener {
			return withTransportSocket(t, authzListener(t, cfg, allRoutes("routes"))(lis), "filters-chain", downstreamTLS(true, true))
		}, nil, xdsCreds(t))
		c := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
		if err := rpcResult(ctx, c, "EmptyCall"); err != nil {
			t.Fatalf("EmptyCall over mTLS: %v", err)
		}
		checks := a.taken()
		if len(checks) != 1 {
			t.Fatalf("%d checks, want 1", len(checks))
		}
		attrs := checks[0].req.GetAttributes()
		if got := attrs.GetSource().GetPrincipal(); got != "spiffe://test/ns/default/sa/client" {
			t.Errorf("source principal %q, want the client's URI SAN", got)
		}
		if got := attrs.GetDestination().GetPrincipal(); got != "server.test" {
			t.Errorf("destination principal %q, want the server's DNS SAN server.test", got)
		}
		cert := attrs.GetSource().GetCertificate()
		if !include {
			if cert != "" {
				t.Errorf("source certificate sent without include_peer_certificate")
			}
		} else if pemText, err := url.PathUnescape(cert); err != nil || pemText != string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: client.Cert.Raw})) {
			t.Errorf("source certificate %q (decoded: %v), want the client's PEM, URL-encoded", cert, err)
		}
		s.Stop()
	}
}
