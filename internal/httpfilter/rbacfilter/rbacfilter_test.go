package rbacfilter

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	xdsmatcherpb "github.com/cncf/xds/go/xds/type/matcher/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func pathPolicy(path string) *rbacconfigpb.Policy {
	return &rbacconfigpb.Policy{
		Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_UrlPath{UrlPath: &matcherpb.PathMatcher{Rule: &matcherpb.PathMatcher_Path{Path: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: path}}}}}}},
		Principals:  []*rbacconfigpb.Principal{{Identifier: &rbacconfigpb.Principal_Any{Any: true}}},
	}
}

// allowPath is an RBAC filter config allowing only path.
func allowPath(path string) *rbacpb.RBAC {
	return &rbacpb.RBAC{Rules: &rbacconfigpb.RBAC{Action: rbacconfigpb.RBAC_ALLOW, Policies: map[string]*rbacconfigpb.Policy{"allow": pathPolicy(path)}}}
}

func newParser() *httpfilter.Parser {
	return httpfilter.NewParser(httpfilter.NewRegistry(httpfilter.Router{}, Filter{}))
}

func filters(t testing.TB, cfgs ...proto.Message) []*hcmpb.HttpFilter {
	var out []*hcmpb.HttpFilter
	for i, c := range cfgs {
		out = append(out, &hcmpb.HttpFilter{Name: fmt.Sprint("rbac-", i), ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, c)}})
	}
	return append(out, &hcmpb.HttpFilter{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerpb.Router{})}})
}

// TestParse_NACK checks the filter configs that NACK the Listener (as
// top-level configs) or the RouteConfiguration (as overrides).
func TestParse_NACK(t *testing.T) {
	grpcHeader := allowPath("/a")
	grpcHeader.Rules.Policies["allow"].Permissions[0] = &rbacconfigpb.Permission{Rule: &rbacconfigpb.Permission_Header{Header: &routepb.HeaderMatcher{Name: "grpc-x", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}}}
	cel := allowPath("/a")
	cel.Rules.Policies["allow"].Condition = nil
	cel.Rules.Policies["allow"].CheckedCondition = nil
	cel.ShadowRules = &rbacconfigpb.RBAC{Policies: map[string]*rbacconfigpb.Policy{"s": {Permissions: nil}}}
	tests := []struct {
		desc    string
		cfg     *rbacpb.RBAC
		wantErr string
	}{
		{desc: "matcher instead of rules", cfg: &rbacpb.RBAC{Matcher: &xdsmatcherpb.Matcher{}}, wantErr: "matcher: the matcher API is not supported"},
		{desc: "matcher next to rules", cfg: &rbacpb.RBAC{Rules: allowPath("/a").Rules, Matcher: &xdsmatcherpb.Matcher{}}, wantErr: "matcher"},
		{desc: "shadow_matcher", cfg: &rbacpb.RBAC{ShadowMatcher: &xdsmatcherpb.Matcher{}}, wantErr: "shadow_matcher"},
		{desc: "grpc- header in rules", cfg: grpcHeader, wantErr: `rules.policies["allow"].permissions[0].header.name`},
		{desc: "invalid shadow_rules", cfg: cel, wantErr: `shadow_rules.policies["s"].permissions: empty`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := newParser().HTTPFilters(filters(t, tc.cfg))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("HTTPFilters() error = %v, want one mentioning %q", err, tc.wantErr)
			}
			_, err = newParser().Overrides(map[string]*anypb.Any{"rbac-0": mustAny(t, &rbacpb.RBACPerRoute{Rbac: tc.cfg})})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Overrides() error = %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func runStep(t *testing.T, s httpfilter.Step, method string) codes.Code {
	t.Helper()
	if s == nil {
		return codes.OK
	}
	_, _, err := s.Run(context.Background(), httpfilter.RPC{Request: httpfilter.Request{FullMethod: method, Remote: netip.MustParseAddrPort("127.0.0.1:1"), Local: netip.MustParseAddrPort("127.0.0.1:2")}})
	return status.Code(err)
}

// TestOverride checks RBACPerRoute: an override replaces the top-level
// config; one without rbac disables RBAC on the route; no rules allows all.
func TestOverride(t *testing.T) {
	p := newParser()
	fs, err := p.HTTPFilters(filters(t, allowPath("/a")))
	if err != nil {
		t.Fatal(err)
	}
	top := fs[0]
	ov, err := p.Overrides(map[string]*anypb.Any{
		"replace": mustAny(t, &rbacpb.RBACPerRoute{Rbac: allowPath("/b")}),
		"disable": mustAny(t, &rbacpb.RBACPerRoute{}),
		"norules": mustAny(t, &rbacpb.RBACPerRoute{Rbac: &rbacpb.RBAC{}}),
		"wrapped": mustAny(t, &routepb.FilterConfig{Config: mustAny(t, &rbacpb.RBACPerRoute{})}),
	})
	if err != nil {
		t.Fatalf("Overrides() failed: %v", err)
	}
	tests := []struct {
		desc         string
		override     httpfilter.Config
		wantA, wantB codes.Code
	}{
		{desc: "no override", override: nil, wantA: codes.OK, wantB: codes.PermissionDenied},
		{desc: "override replaces", override: ov["replace"], wantA: codes.PermissionDenied, wantB: codes.OK},
		{desc: "empty RBACPerRoute disables", override: ov["disable"], wantA: codes.OK, wantB: codes.OK},
		{desc: "no rules allows all", override: ov["norules"], wantA: codes.OK, wantB: codes.OK},
		{desc: "in a FilterConfig", override: ov["wrapped"], wantA: codes.OK, wantB: codes.OK},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := top.Filter.BuildStep(top.Name, top.Config, tc.override)
			if err != nil {
				t.Fatalf("BuildStep() failed: %v", err)
			}
			if got := runStep(t, s, "/a"); got != tc.wantA {
				t.Errorf("RPC /a: %v, want %v", got, tc.wantA)
			}
			if got := runStep(t, s, "/b"); got != tc.wantB {
				t.Errorf("RPC /b: %v, want %v", got, tc.wantB)
			}
		})
	}
	// A disabled route has no step at all: nothing runs per RPC.
	if s, _ := top.Filter.BuildStep(top.Name, top.Config, ov["disable"]); s != nil {
		t.Errorf("BuildStep(disabled) = %v, want nil", s)
	}
}

// TestDeniedMessage: a denied RPC is PERMISSION_DENIED and its message
// names no policy.
func TestDeniedMessage(t *testing.T) {
	fs, err := newParser().HTTPFilters(filters(t, allowPath("/secret-policy-path")))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := fs[0].Filter.BuildStep(fs[0].Name, fs[0].Config, nil)
	_, _, err = s.Run(context.Background(), httpfilter.RPC{Request: httpfilter.Request{FullMethod: "/x"}})
	st := status.Convert(err)
	if st.Code() != codes.PermissionDenied || strings.Contains(st.Message(), "allow") || strings.Contains(st.Message(), "secret") {
		t.Errorf("denied RPC status %v, want PERMISSION_DENIED naming no policy", st)
	}
}

// TestLogActionNoStep: action LOG without audit loggers enforces nothing
// and has no per-RPC step.
func TestLogActionNoStep(t *testing.T) {
	cfg := allowPath("/a")
	cfg.Rules.Action = rbacconfigpb.RBAC_LOG
	fs, err := newParser().HTTPFilters(filters(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := fs[0].Filter.BuildStep(fs[0].Name, fs[0].Config, nil); s != nil || err != nil {
		t.Errorf("BuildStep(LOG) = %v, %v; want nil, nil", s, err)
	}
}

// TestSharedEngines: identical configs compile once, within one parser (a
// Listener's 1 000 chains) and across parsers (updates) while in use.
func TestSharedEngines(t *testing.T) {
	p := newParser()
	var cfgs []proto.Message
	for range 3 {
		cfgs = append(cfgs, allowPath("/shared"))
	}
	fs, err := p.HTTPFilters(filters(t, cfgs...))
	if err != nil {
		t.Fatal(err)
	}
	fs2, err := newParser().HTTPFilters(filters(t, allowPath("/shared")))
	if err != nil {
		t.Fatal(err)
	}
	c0 := fs[0].Config.(*Config)
	if fs[1].Config.(*Config) != c0 || fs[2].Config.(*Config) != c0 || fs2[0].Config.(*Config) != c0 {
		t.Errorf("identical configs were compiled more than once")
	}
	if c0.Rules == nil {
		t.Fatal("no engine")
	}
	runtime.KeepAlive(fs)
	runtime.KeepAlive(fs2)
}

// TestSharedEnginesReceivedBytes: a config is found again by the bytes it
// was received in. A config with an unknown field more is another config
// (compiled on its own, behaving alike; copies differing only in map order
// share one, TestThousandChainsOneEngine), and the bytes of a valid config
// never let an invalid one through.
func TestSharedEnginesReceivedBytes(t *testing.T) {
	cfg := allowPath("/bytes")
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := append(append([]byte{}, b...), 0xf8, 0x7f, 0x01) // unknown field 2047, varint 1
	parse := func(value []byte) (*Config, error) {
		raw, err := typedconfig.Unwrap(&anypb.Any{TypeUrl: ConfigTypeURL, Value: value})
		if err != nil {
			t.Fatal(err)
		}
		c, err := Filter{}.ParseConfig(raw)
		if err != nil {
			return nil, err
		}
		return c.(*Config), nil
	}
	c1, err := parse(b)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := parse(append([]byte{}, b...))
	if err != nil {
		t.Fatal(err)
	}
	c3, err := parse(other)
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 {
		t.Error("the same bytes were compiled twice")
	}
	if c3 == c1 {
		t.Error("other bytes share the engine compiled for the first ones")
	}
	rpc := func(path string) httpfilter.RPC {
		return httpfilter.RPC{Request: httpfilter.Request{FullMethod: path, Remote: netip.MustParseAddrPort("127.0.0.1:1")}}
	}
	for _, c := range []*Config{c1, c3} {
		s, _ := Filter{}.BuildStep("rbac", c, nil)
		if _, _, err := s.Run(context.Background(), rpc("/bytes")); err != nil {
			t.Errorf("/bytes denied: %v", err)
		}
		if _, _, err := s.Run(context.Background(), rpc("/other")); status.Code(err) != codes.PermissionDenied {
			t.Errorf("/other: %v, want PERMISSION_DENIED", err)
		}
	}
	bad, err := proto.Marshal(&rbacpb.RBAC{Rules: cfg.Rules, Matcher: &xdsmatcherpb.Matcher{}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := parse(bad); err == nil || !strings.Contains(err.Error(), "matcher") {
			t.Errorf("config with the matcher API: error %v, want one naming matcher", err)
		}
	}
	runtime.KeepAlive(c1)
	runtime.KeepAlive(c3)
}

// TestCacheForgets: the engine cache does not keep unused engines.
func TestCacheForgets(t *testing.T) {
	before := engines.size()
	func() {
		if _, err := newParser().HTTPFilters(filters(t, allowPath("/forgotten"))); err != nil {
			t.Fatal(err)
		}
	}()
	testutils.WaitFor(testutils.Context(t), t, "the cache to drop collected engines", func() error {
		runtime.GC()
		if n := engines.size(); n > before {
			return fmt.Errorf("cache holds %d entries, want at most %d", n, before)
		}
		return nil
	})
}

// TestStepAllocs: an allowed RPC costs the RBAC step no allocation.
func TestStepAllocs(t *testing.T) {
	fs, err := newParser().HTTPFilters(filters(t, allowPath("/a")))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := fs[0].Filter.BuildStep(fs[0].Name, fs[0].Config, nil)
	ctx := context.Background()
	rpc := httpfilter.RPC{Request: httpfilter.Request{FullMethod: "/a", Remote: netip.MustParseAddrPort("127.0.0.1:1")}}
	if n := testing.AllocsPerRun(100, func() { s.Run(ctx, rpc) }); n != 0 {
		t.Errorf("Run allocates %v times, want 0", n)
	}
}
