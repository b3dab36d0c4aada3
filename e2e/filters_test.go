package e2e_test

import (
	"context"
	"errors"
	"net"
	"testing"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/httpfilter"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// requireHeaderURL is the config type of requireHeader, a filter registered
// through the public httpfilter API: its config, in a TypedStruct, names a
// header ("header") every RPC must carry.
const requireHeaderURL = "type.googleapis.com/xds_test.RequireHeader"

func init() { httpfilter.Register(requireHeader{}) }

type requireHeader struct{}

type requireHeaderStep struct{ header string }

func (requireHeader) ConfigTypeURLs() []string   { return []string{requireHeaderURL} }
func (requireHeader) OverrideTypeURLs() []string { return nil }
func (requireHeader) IsTerminal() bool           { return false }

func (requireHeader) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	h := raw.Struct().GetFields()["header"].GetStringValue()
	if h == "" {
		return nil, errors.New("header: empty")
	}
	return h, nil
}

func (requireHeader) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("no overrides")
}

func (requireHeader) BuildStep(_ string, cfg, _ httpfilter.Config) (httpfilter.Step, error) {
	return requireHeaderStep{header: cfg.(string)}, nil
}

func (s requireHeaderStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	if len(rpc.Header.Get(s.header)) == 0 {
		return ctx, nil, status.Errorf(codes.Unauthenticated, "missing %s", s.header)
	}
	return ctx, nil, nil
}

// TestUserFilter: a filter registered with httpfilter.Register runs on the
// RPCs of the chains that configure it (in a TypedStruct), and a bad config
// of it NACKs the Listener.
func TestUserFilter(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	listener := func(a net.Addr, header string) *listenerpb.Listener {
		s, err := structpb.NewStruct(map[string]any{"header": header})
		if err != nil {
			t.Fatal(err)
		}
		l := rbacListener(t, a, allowMethods(methodEmpty), allRoutes("r"), "")
		hcm := &hcmpb.HttpConnectionManager{}
		if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
			t.Fatal(err)
		}
		hcm.HttpFilters = append([]*hcmpb.HttpFilter{{
			Name:       "require-token",
			ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, &xdstypepb.TypedStruct{TypeUrl: requireHeaderURL, Value: s})},
		}}, hcm.HttpFilters...)
		l.FilterChains[0].Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)}
		return l
	}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener { return listener(a, "x-token") }, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.Unauthenticated {
		t.Errorf("EmptyCall without x-token: %v, want UNAUTHENTICATED (the user filter)", got)
	}
	tctx := metadata.AppendToOutgoingContext(ctx, "x-token", "t")
	if got := c.emptyCall(tctx); got != codes.OK {
		t.Errorf("EmptyCall with x-token: %v, want OK", got)
	}
	// Filters run in order: the user filter, then RBAC.
	if got := c.unaryCall(tctx); got != codes.PermissionDenied {
		t.Errorf("UnaryCall with x-token: %v, want PERMISSION_DENIED (RBAC)", got)
	}
	seen := len(env.ms.Requests())
	env.update(ctx, t, []*listenerpb.Listener{listener(addr, "")}, nil)
	if _, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(listenerTypeURL))); err != nil {
		t.Fatalf("no NACK of a Listener with an invalid user filter config: %v", err)
	}
	if got := c.emptyCall(ctx); got != codes.Unauthenticated {
		t.Errorf("EmptyCall without x-token after the NACK: %v, want UNAUTHENTICATED", got)
	}
}
