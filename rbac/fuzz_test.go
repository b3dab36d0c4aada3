package rbac_test

import (
	"net/netip"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/rbac"
)

// fuzzHeaders is a fixed request header set for the fuzzer's evaluations.
type fuzzHeaders map[string][]string

func (h fuzzHeaders) Get(k string) []string { return h[k] }

// FuzzCompile: any bytes decoded as an RBAC config either fail to compile or
// give an engine whose evaluation never panics; a DENY engine with no
// policies allows everything and an ALLOW engine with none denies
// everything.
func FuzzCompile(f *testing.F) {
	seeds := []*rbacpb.RBAC{
		{},
		{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{"p": {
			Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_Any{Any: true}}},
			Principals: []*rbacpb.Principal{{Identifier: &rbacpb.Principal_SourceIp{SourceIp: &corepb.CidrRange{
				AddressPrefix: "127.0.0.0", PrefixLen: wrapperspb.UInt32(8)}}}},
		}}},
		{Policies: map[string]*rbacpb.Policy{"h": {
			Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_Header{Header: &routepb.HeaderMatcher{
				Name: "x-user", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}}}},
			Principals: []*rbacpb.Principal{{Identifier: &rbacpb.Principal_Authenticated_{Authenticated: &rbacpb.Principal_Authenticated{}}}},
		}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	ri := rbac.RequestInfo{
		FullMethod: "/pkg.Svc/Method",
		Authority:  "svc.example.com",
		Header:     fuzzHeaders{"x-user": {"alice"}, "content-type": {"application/grpc"}},
		Remote:     netip.MustParseAddrPort("127.0.0.2:5000"),
		Local:      netip.MustParseAddrPort("127.0.0.1:50051"),
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := &rbacpb.RBAC{}
		if proto.Unmarshal(b, cfg) != nil {
			return
		}
		e, err := rbac.Compile(cfg)
		if err != nil {
			return
		}
		d := e.Evaluate(ri)
		if len(cfg.GetPolicies()) == 0 {
			switch cfg.GetAction() {
			case rbacpb.RBAC_ALLOW:
				if d.Allow {
					t.Errorf("ALLOW engine with no policies allowed an RPC")
				}
			case rbacpb.RBAC_DENY:
				if !d.Allow {
					t.Errorf("DENY engine with no policies denied an RPC")
				}
			}
		}
		tls := ri
		tls.TLS = true
		e.Evaluate(tls)
	})
}
