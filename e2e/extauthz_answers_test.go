package e2e_test

// End-to-end tests of what the ext_authz filter makes of an authorization
// server's answer (gRFC A92, A102, and Envoy's rules where they are
// silent): a denial stays a denial, an answer that cannot be applied fails
// the RPC, an answer that says nothing is no allow, header mutation rules
// in Envoy's order, raw_value and value, and what reaches the client.

import (
	"context"
	"strings"
	"testing"

	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type answerFunc = func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error)

func answer(r *authpb.CheckResponse) answerFunc {
	return func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) { return r, nil }
}

// TestExtAuthz_DenialStaysDenial: a denial whose denied_response.headers
// hold an invalid or reserved header is still a denial, with its own
// status, under failure_mode_allow too: the bad header is dropped and the
// valid one still reaches the client as a trailer; with disallow_is_error
// the RPC fails with status_on_error's code. The handler never runs.
func TestExtAuthz_DenialStaysDenial(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	a.set(answer(deniedResponse(typepb.StatusCode_Unauthorized, "not you",
		hvo("x-deny-reason", "expired"), hvo("bad header", "v"), hvo(":status", "200"), hvo("x-newline", "a\nb"))))
	for _, tc := range []struct {
		name        string
		isError     bool
		want        codes.Code
		wantTrailer bool
	}{
		{name: "drop", want: codes.Unauthenticated, wantTrailer: true},
		{name: "disallow_is_error", isError: true, want: codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := authzEnv(t, false, a.addr)
			cfg := extAuthz(a.addr)
			cfg.FailureModeAllow = true
			cfg.StatusOnError = &typepb.HttpStatus{Code: typepb.StatusCode_ServiceUnavailable}
			if tc.isError {
				cfg.DecoderHeaderMutationRules = &mutationpb.HeaderMutationRules{DisallowIsError: wrapperspb.Bool(true)}
			}
			c, rec, _ := startAuthz(ctx, t, env, cfg, allRoutes("routes"))
			for _, method := range []string{"UnaryCall", "FullDuplexCall"} {
				var tr metadata.MD
				code, msg := statusOf(rpcResult(withCase(ctx, "deny"), c, method, grpc.Trailer(&tr)))
				if code != tc.want {
					t.Errorf("%s: %v %q, want %v: a denial is never allowed", method, code, msg, tc.want)
				}
				if got := tr.Get("x-deny-reason"); tc.wantTrailer && (len(got) != 1 || got[0] != "expired") {
					t.Errorf("%s: trailer x-deny-reason = %q, want [expired]", method, got)
				}
				if got := tr.Get("bad header"); len(got) != 0 {
					t.Errorf("%s: trailer %q sent", method, "bad header")
				}
			}
			if n := len(rec.ofCase("deny")); n != 0 {
				t.Errorf("%d denied RPCs reached the handler", n)
			}
		})
	}
}

// TestExtAuthz_InvalidMutationFails: an OK answer with one invalid
// mutation fails the RPC with status_on_error's code, failure_mode_allow
// or not: the handler never sees the client's header the server meant to
// overwrite. A mutation of a reserved header is ignored (gRFC A92), and an
// upper-case name is lower-cased (Envoy).
func TestExtAuthz_InvalidMutationFails(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	cfg := extAuthz(a.addr)
	cfg.FailureModeAllow = true
	cfg.StatusOnError = &typepb.HttpStatus{Code: typepb.StatusCode_ServiceUnavailable}
	c, rec, _ := startAuthz(ctx, t, env, cfg, allRoutes("routes"))
	for _, tc := range []struct {
		name string
		ok   *authpb.CheckResponse
		want codes.Code
		user string // x-user the handler sees, when the RPC is allowed
	}{
		{name: "bad value", ok: okResponse(overwrite("x-user", "alice"), hvo("x-note", "line\nbreak")), want: codes.Unavailable},
		{name: "bad name", ok: okResponse(overwrite("x-user", "alice"), hvo("x user", "v")), want: codes.Unavailable},
		{name: "bad append_action", ok: okResponse(overwrite("x-user", "alice"), &corepb.HeaderValueOption{Header: &corepb.HeaderValue{Key: "x-a", Value: "v"}, AppendAction: 42}), want: codes.Unavailable},
		{name: "bad response header", ok: func() *authpb.CheckResponse {
			r := okResponse(overwrite("x-user", "alice"))
			r.GetOkResponse().ResponseHeadersToAdd = []*corepb.HeaderValueOption{hvo("x-r", "\x01")}
			return r
		}(), want: codes.Unavailable},
		{name: "reserved ignored", ok: okResponse(overwrite("x-user", "alice"), hvo("grpc-status", "0"), hvo(":authority", "evil"), hvo("host", "evil")), want: codes.OK, user: "alice"},
		{name: "upper case", ok: okResponse(overwrite("X-User", "alice")), want: codes.OK, user: "alice"},
	} {
		a.set(answer(tc.ok))
		code, msg := statusOf(rpcResult(withCase(ctx, tc.name, "x-user", "admin"), c, "UnaryCall"))
		if code != tc.want {
			t.Errorf("%s: %v %q, want %v", tc.name, code, msg, tc.want)
		}
		calls := rec.ofCase(tc.name)
		if tc.want != codes.OK {
			if len(calls) != 0 {
				t.Errorf("%s: the RPC reached the handler with x-user %q", tc.name, calls[0].md.Get("x-user"))
			}
			continue
		}
		if len(calls) != 1 || strings.Join(calls[0].md.Get("x-user"), ",") != tc.user {
			t.Errorf("%s: handler calls %v, want one with x-user %q", tc.name, calls, tc.user)
		}
		if len(calls) == 1 && (calls[0].md.Get(":authority")[0] == "evil" || len(calls[0].md.Get("host")) != 0) {
			t.Errorf("%s: a reserved header was changed: %v", tc.name, calls[0].md)
		}
	}
}

// TestExtAuthz_SilentAnswer: a CheckResponse without status, or whose OK
// status carries a denied_response, is a failed check: status_on_error,
// or failure_mode_allow's pass with its header; never an allow.
func TestExtAuthz_SilentAnswer(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	answers := map[string]*authpb.CheckResponse{
		"no status":               {HttpResponse: &authpb.CheckResponse_OkResponse{OkResponse: &authpb.OkHttpResponse{Headers: []*corepb.HeaderValueOption{hvo("x-user", "alice")}}}},
		"empty":                   {},
		"ok with denied_response": {Status: &rpcstatus.Status{}, HttpResponse: &authpb.CheckResponse_DeniedResponse{DeniedResponse: &authpb.DeniedHttpResponse{}}},
	}
	for _, allow := range []bool{false, true} {
		env := authzEnv(t, false, a.addr)
		cfg := extAuthz(a.addr)
		cfg.FailureModeAllow, cfg.FailureModeAllowHeaderAdd = allow, true
		c, rec, _ := startAuthz(ctx, t, env, cfg, allRoutes("routes"))
		for name, r := range answers {
			a.set(answer(r))
			code, msg := statusOf(rpcResult(withCase(ctx, name), c, "EmptyCall"))
			calls := rec.ofCase(name)
			if !allow {
				if code != codes.PermissionDenied || !strings.Contains(msg, "ext_authz") {
					t.Errorf("%s: %v %q, want PERMISSION_DENIED (status_on_error) from ext_authz", name, code, msg)
				}
				if len(calls) != 0 {
					t.Errorf("%s: the RPC reached the handler", name)
				}
				continue
			}
			if code != codes.OK || len(calls) != 1 || strings.Join(calls[0].md.Get("x-envoy-auth-failure-mode-allowed"), ",") != "true" {
				t.Errorf("%s, failure_mode_allow: %v %q, %d handler calls; want OK through failure_mode_allow, with its header", name, code, msg, len(calls))
			}
			if len(calls) == 1 && len(calls[0].md.Get("x-user")) != 0 {
				t.Errorf("%s, failure_mode_allow: a mutation of an answer without status was applied", name)
			}
			rec.mu.Lock()
			rec.calls = nil
			rec.mu.Unlock()
		}
	}
}

// TestExtAuthz_RulesOrder: decoder_header_mutation_rules in Envoy's order:
// disallow_expression, then allow_expression, then disallow_all, then
// allow. The expressions match whole names, as Envoy's RegexMatcher.
func TestExtAuthz_RulesOrder(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	a.set(answer(okResponse(hvo("x-user-id", "7"), hvo("x-user-secret", "s"), hvo("x-role", "admin"))))
	re := func(s string) *matcherpb.RegexMatcher { return &matcherpb.RegexMatcher{Regex: s} }
	for _, tc := range []struct {
		name  string
		rules *mutationpb.HeaderMutationRules
		want  []string // the headers the handler sees
	}{
		{name: "disallow_all with allow_expression", rules: &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true), AllowExpression: re("^x-user-.*")},
			want: []string{"x-user-id", "x-user-secret"}},
		{name: "disallow_expression first", rules: &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true), AllowExpression: re("x-user-.*"), DisallowExpression: re("x-user-secret")},
			want: []string{"x-user-id"}},
		{name: "allow_expression alone allows the rest too", rules: &mutationpb.HeaderMutationRules{AllowExpression: re("x-user-id")},
			want: []string{"x-user-id", "x-user-secret", "x-role"}},
		{name: "whole-name match", rules: &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true), AllowExpression: re("x-user")},
			want: nil},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			env := authzEnv(t, false, a.addr)
			cfg := extAuthz(a.addr)
			cfg.DecoderHeaderMutationRules = tc.rules
			c, rec, _ := startAuthz(ctx, t, env, cfg, allRoutes("routes"))
			if err := rpcResult(withCase(ctx, "r"), c, "EmptyCall"); err != nil {
				t.Fatal(err)
			}
			md := rec.ofCase("r")[0].md
			var got []string
			for _, k := range []string{"x-user-id", "x-user-secret", "x-role"} {
				if len(md.Get(k)) > 0 {
					got = append(got, k)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("handler sees %v, want %v", got, tc.want)
			}
		})
	}
}

// TestExtAuthz_HeaderValueFields: a mutation's value is raw_value when set
// (gRFC A102), else value (OPA and other Envoy-era servers), for request
// headers, response headers and a denial's trailers.
func TestExtAuthz_HeaderValueFields(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	c, rec, _ := startAuthz(ctx, t, env, extAuthz(a.addr), allRoutes("routes"))
	raw := func(k, v string) *corepb.HeaderValueOption {
		return &corepb.HeaderValueOption{Header: &corepb.HeaderValue{Key: k, RawValue: []byte(v)}}
	}
	both := &corepb.HeaderValueOption{Header: &corepb.HeaderValue{Key: "x-both", Value: "ignored", RawValue: []byte("raw wins")}}
	ok := okResponse(raw("x-raw", "from raw_value"), hvo("x-value", "from value"), both)
	ok.GetOkResponse().ResponseHeadersToAdd = []*corepb.HeaderValueOption{raw("x-resp", "raw response")}
	a.set(answer(ok))
	var hdr metadata.MD
	if err := rpcResult(withCase(ctx, "ok"), c, "UnaryCall", grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	md := rec.ofCase("ok")[0].md
	for k, want := range map[string]string{"x-raw": "from raw_value", "x-value": "from value", "x-both": "raw wins"} {
		if got := md.Get(k); len(got) != 1 || got[0] != want {
			t.Errorf("handler sees %s = %q, want [%s]", k, got, want)
		}
	}
	if got := hdr.Get("x-resp"); len(got) != 1 || got[0] != "raw response" {
		t.Errorf("response header x-resp = %q, want [raw response]", got)
	}
	a.set(answer(deniedResponse(typepb.StatusCode_Forbidden, "no", raw("x-why", "raw reason"))))
	var tr metadata.MD
	if code, _ := statusOf(rpcResult(withCase(ctx, "deny"), c, "UnaryCall", grpc.Trailer(&tr))); code != codes.PermissionDenied {
		t.Errorf("denied RPC: %v, want PERMISSION_DENIED", code)
	}
	if got := tr.Get("x-why"); len(got) != 1 || got[0] != "raw reason" {
		t.Errorf("trailer x-why = %q, want [raw reason]", got)
	}
}

// TestExtAuthz_ReachesClient: response_headers_to_add arrive as response
// headers of an allowed RPC that sends a message, unary and streaming;
// denied_response.headers arrive as trailers of the denied RPC, unary and
// streaming.
func TestExtAuthz_ReachesClient(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	c, _, _ := startAuthz(ctx, t, env, extAuthz(a.addr), allRoutes("routes"))
	ok := okResponse()
	ok.GetOkResponse().ResponseHeadersToAdd = []*corepb.HeaderValueOption{hvo("x-authz", "checked")}
	for _, method := range []string{"UnaryCall", "FullDuplexCall"} {
		a.set(answer(ok))
		var hdr metadata.MD
		if err := rpcResult(withCase(ctx, "ok"), c, method, grpc.Header(&hdr)); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if got := hdr.Get("x-authz"); len(got) != 1 || got[0] != "checked" {
			t.Errorf("%s: response header x-authz = %q, want [checked]", method, got)
		}
		a.set(answer(deniedResponse(typepb.StatusCode_Forbidden, "no", hvo("x-deny-reason", "policy"))))
		var tr metadata.MD
		if code, _ := statusOf(rpcResult(withCase(ctx, "deny"), c, method, grpc.Trailer(&tr))); code != codes.PermissionDenied {
			t.Errorf("%s: denied: %v, want PERMISSION_DENIED", method, code)
		}
		if got := tr.Get("x-deny-reason"); len(got) != 1 || got[0] != "policy" {
			t.Errorf("%s: trailer x-deny-reason = %q, want [policy]", method, got)
		}
	}
}
