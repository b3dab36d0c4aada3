package e2e_test

// End-to-end tests of the order of an RPC's HTTP filters: they run as one
// sequence in http_filters order, and a filter whose work waits for a side
// call (ext_authz) holds back every filter after it, which then sees only
// the RPCs it let through, with the request headers it changed.

import (
	"context"
	"errors"
	"net"
	"testing"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/httpfilter"
)

// overwrite is a header mutation that replaces the client's value.
func overwrite(key, value string) *corepb.HeaderValueOption {
	h := hvo(key, value)
	h.AppendAction = corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
	return h
}

// TestFilterOrder_ExtAuthzThenRBAC: with [ext_authz, rbac], RBAC judges the
// request headers the authorization server left, and only the RPCs it
// allowed. The RBAC policy admits x-user: alice; the authorization server
// sets x-user from its own decision, whatever the client sent.
func TestFilterOrder_ExtAuthzThenRBAC(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	a.set(func(_ context.Context, req *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		switch headerMapOf(req.GetAttributes().GetRequest().GetHttp())[caseHeader][0] {
		case "grant":
			return okResponse(overwrite("x-user", "alice")), nil
		case "spoof":
			return okResponse(overwrite("x-user", "mallory")), nil
		}
		return deniedResponse(typepb.StatusCode_Unauthorized, "who are you"), nil
	})
	rbac := rbacRules(rbacconfigpb.RBAC_ALLOW, map[string]*rbacconfigpb.Policy{"alice": {
		Permissions: []*rbacconfigpb.Permission{anyPermission()},
		Principals:  []*rbacconfigpb.Principal{headerPrincipal("x-user", "alice")},
	}})
	filters := []*hcmpb.HttpFilter{httpFilter(t, "authz", extAuthz(a.addr)), httpFilter(t, "rbac", rbac)}
	rec := &handlerRecorder{}
	_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
		return filtersListener(addr, filters, allRoutes("routes"), "")
	}, nil, rec.options()...)
	c := connected(ctx, t, addr)

	for _, tc := range []struct {
		name   string
		header []string // sent by the client
		want   codes.Code
	}{
		// The client sends no x-user: the authorization server's answer
		// adds it, and RBAC lets the RPC through.
		{name: "grant", want: codes.OK},
		// The client claims to be alice; the authorization server says
		// mallory, and RBAC refuses.
		{name: "spoof", header: []string{"x-user", "alice"}, want: codes.PermissionDenied},
		// The authorization server refuses: its status, not RBAC's.
		{name: "refuse", header: []string{"x-user", "alice"}, want: codes.Unauthenticated},
	} {
		code, msg := statusOf(rpcResult(withCase(ctx, tc.name, tc.header...), c, "UnaryCall"))
		if code != tc.want {
			t.Errorf("%s: %v %q, want %v", tc.name, code, msg, tc.want)
		}
		if n := len(a.taken()); n != 1 {
			t.Errorf("%s: %d Checks, want 1 (ext_authz runs first, for every RPC)", tc.name, n)
		}
	}
	if calls := rec.ofCase("grant"); len(calls) != 1 || calls[0].md.Get("x-user")[0] != "alice" {
		t.Errorf("handler calls of the granted RPC: %v, want one with x-user: alice", calls)
	}
	if n := len(rec.ofCase("spoof")) + len(rec.ofCase("refuse")); n != 0 {
		t.Errorf("%d refused RPCs reached the handler", n)
	}
}

// TestFilterOrder_ExtAuthzThenRateLimit: with [ext_authz, local_ratelimit],
// RPCs the authorization server refuses spend no token of the bucket.
func TestFilterOrder_ExtAuthzThenRateLimit(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	a.set(func(_ context.Context, req *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		if headerMapOf(req.GetAttributes().GetRequest().GetHttp())[caseHeader][0] == "ok" {
			return okResponse(), nil
		}
		return deniedResponse(typepb.StatusCode_Forbidden, "no"), nil
	})
	filters := []*hcmpb.HttpFilter{httpFilter(t, "authz", extAuthz(a.addr)), httpFilter(t, "rl", rateLimit("after-authz", 2))}
	_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
		return filtersListener(addr, filters, allRoutes("routes"), "")
	}, nil)
	c := connected(ctx, t, addr)
	for i := range 5 {
		if code, msg := statusOf(rpcResult(withCase(ctx, "refused"), c, "EmptyCall")); code != codes.PermissionDenied {
			t.Fatalf("refused RPC %d: %v %q, want PERMISSION_DENIED (ext_authz)", i, code, msg)
		}
	}
	for i := range 2 {
		if code, msg := statusOf(rpcResult(withCase(ctx, "ok"), c, "EmptyCall")); code != codes.OK {
			t.Errorf("allowed RPC %d: %v %q, want OK: the bucket's 2 tokens were spent by refused RPCs", i, code, msg)
		}
	}
	if code, _ := statusOf(rpcResult(withCase(ctx, "ok"), c, "EmptyCall")); code != codes.Unavailable {
		t.Errorf("third allowed RPC: %v, want UNAVAILABLE (the bucket is empty)", code)
	}
}

// gateURL is the config type of gate, a filter registered through the
// public httpfilter API that decides after the tap: it refuses, with
// ABORTED, the RPCs that carry "x-gate: closed".
const gateURL = "type.googleapis.com/xds_test.Gate"

func init() { httpfilter.Register(gate{}) }

type gate struct{}

func (gate) ConfigTypeURLs() []string   { return []string{gateURL} }
func (gate) OverrideTypeURLs() []string { return nil }
func (gate) Needs() httpfilter.Needs    { return httpfilter.Needs{After: true} }

func (gate) ParseConfig(httpfilter.RawConfig) (httpfilter.Config, error) { return struct{}{}, nil }
func (gate) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("no overrides")
}
func (gate) BuildStep(string, httpfilter.Config, httpfilter.Config) (httpfilter.Step, error) {
	return gateStep{}, nil
}

type gateStep struct{}

func (gateStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	closed := len(rpc.Header.Get("x-gate")) > 0 && rpc.Header.Get("x-gate")[0] == "closed"
	return ctx, gateWork{closed: closed}, nil
}

type gateWork struct{ closed bool }

func (w gateWork) RunAfter(ctx context.Context) (context.Context, error) {
	if w.closed {
		return ctx, status.Error(codes.Aborted, "gate closed")
	}
	return ctx, nil
}

// TestFilterOrder_PublicFilter: a filter of the public httpfilter API that
// leaves work for after the tap gets the same guarantee: the filter after
// it (requireHeader, also public) never decides on an RPC it refuses.
func TestFilterOrder_PublicFilter(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	typed := func(url string, fields map[string]any) *hcmpb.HttpFilter {
		s, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		return httpFilter(t, url, &xdstypepb.TypedStruct{TypeUrl: url, Value: s})
	}
	filters := []*hcmpb.HttpFilter{typed(gateURL, nil), typed(requireHeaderURL, map[string]any{"header": "x-token"})}
	_, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
		return filtersListener(addr, filters, allRoutes("routes"), "")
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	for _, tc := range []struct {
		name string
		md   []string
		want codes.Code
	}{
		{name: "gate closed, no token", md: []string{"x-gate", "closed"}, want: codes.Aborted},
		{name: "gate open, no token", md: []string{"x-gate", "open"}, want: codes.Unauthenticated},
		{name: "gate open, token", md: []string{"x-gate", "open", "x-token", "t"}, want: codes.OK},
	} {
		if got := c.emptyCall(metadata.AppendToOutgoingContext(ctx, tc.md...)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
