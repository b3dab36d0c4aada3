package rbacfilter

import (
	"fmt"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// chainsListener is a Listener of n filter chains whose
// HttpConnectionManagers carry the RBAC config rbac(i) of 10 policies and,
// unless sameHCM, differ (stat_prefix), so that each is decoded on its own.
// Configs that are the same message are serialized once, as a control plane
// sharing a config does.
func chainsListener(t testing.TB, n int, sameHCM bool, rbac func(i int) *rbacpb.RBAC) *listenerpb.Listener {
	serialized := map[*rbacpb.RBAC][]*hcmpb.HttpFilter{}
	l := &listenerpb.Listener{
		Name: "lis",
		Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: 443},
		}}},
	}
	for i := range n {
		cfg := rbac(i)
		hf, ok := serialized[cfg]
		if !ok {
			hf = filters(t, cfg)
			serialized[cfg] = hf
		}
		statPrefix := fmt.Sprint("chain-", i)
		if sameHCM {
			statPrefix = "chain"
		}
		hcm := &hcmpb.HttpConnectionManager{
			StatPrefix:     statPrefix,
			HttpFilters:    hf,
			RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &routepb.RouteConfiguration{Name: "r"}},
		}
		l.FilterChains = append(l.FilterChains, &listenerpb.FilterChain{
			Name: fmt.Sprint("chain-", i),
			FilterChainMatch: &listenerpb.FilterChainMatch{PrefixRanges: []*corepb.CidrRange{
				{AddressPrefix: fmt.Sprintf("10.%d.%d.0", i>>8&255, i&255), PrefixLen: wrapperspb.UInt32(24)},
			}},
			Filters: []*listenerpb.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: mustAny(t, hcm)},
			}},
		})
	}
	return l
}

func tenPolicies(seed int) *rbacpb.RBAC {
	cfg := allowPath(fmt.Sprint("/seed", seed))
	for i := range 9 {
		cfg.Rules.Policies[fmt.Sprint("p", i)] = pathPolicy(fmt.Sprintf("/pkg.S/M%d", i))
	}
	return cfg
}

func compileChains(t testing.TB, l *listenerpb.Listener) *filterchain.Table {
	t.Helper()
	tbl, err := filterchain.Compile(l, filterchain.Options{Filters: httpfilter.NewParser(httpfilter.NewRegistry(httpfilter.Router{}, Filter{}))})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// TestThousandChainsOneEngine: a 1 000-chain Listener whose chains carry the
// same RBAC config compiles it once: every chain shares one engine.
func TestThousandChainsOneEngine(t *testing.T) {
	// Serialized per chain: map order differs between the copies, so the
	// Parser's memo by bytes misses and the engine cache must catch it.
	tbl := compileChains(t, chainsListener(t, 1000, false, func(int) *rbacpb.RBAC { return tenPolicies(0) }))
	var first *Config
	for _, fc := range tbl.Chains() {
		c := fc.HCM.Filters[0].Config.(*Config)
		if first == nil {
			first = c
		}
		if c != first {
			t.Fatalf("chain %q has its own compiled RBAC config, want one shared by all chains", fc.Name)
		}
	}
}

// BenchmarkCompileThousandChains: decoding a 1 000-chain Listener with an
// RBAC filter of 10 policies on every chain: the same RBAC config everywhere
// in one HttpConnectionManager config shared by every chain, or in a
// distinct HttpConnectionManager per chain, or a distinct RBAC config per
// chain.
func BenchmarkCompileThousandChains(b *testing.B) {
	shared := tenPolicies(0)
	for _, tc := range []struct {
		name    string
		sameHCM bool
		rbac    func(int) *rbacpb.RBAC
	}{
		{name: "shared-hcm", sameHCM: true, rbac: func(int) *rbacpb.RBAC { return shared }},
		{name: "shared-rbac", rbac: func(int) *rbacpb.RBAC { return shared }},
		{name: "distinct-rbac", rbac: tenPolicies},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := chainsListener(b, 1000, tc.sameHCM, tc.rbac)
			b.ReportAllocs()
			for b.Loop() {
				compileChains(b, l)
			}
		})
	}
}
