package admin

import (
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
)

func TestDescribeMatch(t *testing.T) {
	for _, test := range []struct {
		desc      string
		m         *listenerpb.FilterChainMatch
		isDefault bool
		want      string
	}{
		{desc: "default chain", m: &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}}, isDefault: true,
			want: "connections no other filter chain matches (default_filter_chain)"},
		{desc: "empty", m: nil, want: "every connection (empty filter_chain_match)"},
		{
			desc: "every supported field",
			m: &listenerpb.FilterChainMatch{
				PrefixRanges:             []*corepb.CidrRange{{AddressPrefix: "10.0.0.0", PrefixLen: wrapperspb.UInt32(8)}, {AddressPrefix: "::1"}},
				SourceType:               listenerpb.FilterChainMatch_SAME_IP_OR_LOOPBACK,
				DirectSourcePrefixRanges: []*corepb.CidrRange{{AddressPrefix: "192.168.0.0", PrefixLen: wrapperspb.UInt32(16)}},
				SourcePrefixRanges:       []*corepb.CidrRange{{AddressPrefix: "127.0.0.1"}},
				SourcePorts:              []uint32{80, 443},
				TransportProtocol:        "raw_buffer",
			},
			want: `destination in 10.0.0.0/8 or ::/0 | source is local (same IP or loopback) | direct source in 192.168.0.0/16 | source in 0.0.0.0/0 | source port 80 or 443 | transport protocol "raw_buffer"`,
		},
		{
			desc: "fields a gRPC server cannot match",
			m:    &listenerpb.FilterChainMatch{ServerNames: []string{"a.test"}, SourceType: listenerpb.FilterChainMatch_EXTERNAL},
			want: `source is external (not local) | server name "a.test" | (never matches on a gRPC server: it sets destination_port, server_names, application_protocols or a transport_protocol other than raw_buffer)`,
		},
		{
			desc: "tls transport protocol",
			m:    &listenerpb.FilterChainMatch{TransportProtocol: "tls", DestinationPort: wrapperspb.UInt32(443)},
			want: `destination port 443 | transport protocol "tls" | (never matches on a gRPC server: it sets destination_port, server_names, application_protocols or a transport_protocol other than raw_buffer)`,
		},
	} {
		if got := strings.Join(describeMatch(test.m, test.isDefault), " | "); got != test.want {
			t.Errorf("%s: describeMatch =\n%s\nwant\n%s", test.desc, got, test.want)
		}
	}
}

func TestDescribeSecurity(t *testing.T) {
	for _, test := range []struct {
		sec              *filterchain.Security
		wantKind, detail string
	}{
		{nil, "plaintext", "fallback credentials"},
		{&filterchain.Security{IdentityInstance: "id", IdentityCertName: "c"}, "TLS", `provider instance "id" (certificate "c"); clients are not asked`},
		{&filterchain.Security{IdentityInstance: "id", RootInstance: "roots"}, "TLS, optional client certificate", `roots from provider instance "roots" when given`},
		{&filterchain.Security{IdentityInstance: "id", RootInstance: "roots", RootCertName: "r", RequireClientCert: true}, "mTLS", `provider instance "roots" (certificate "r"), required`},
	} {
		kind, detail := describeSecurity(test.sec)
		if kind != test.wantKind || !strings.Contains(detail, test.detail) {
			t.Errorf("describeSecurity(%+v) = %q, %q; want %q and a detail containing %q", test.sec, kind, detail, test.wantKind, test.detail)
		}
	}
}

func TestDescribeRoute(t *testing.T) {
	override, _ := anypb.New(&wrapperspb.StringValue{})
	for _, test := range []struct {
		r    *routepb.Route
		want string
	}{
		{
			r: &routepb.Route{Name: "r", Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/a"}, CaseSensitive: wrapperspb.Bool(false)},
				Action: &routepb.Route_NonForwardingAction{}, TypedPerFilterConfig: map[string]*anypb.Any{"rbac-2": override, "rbac-1": override}},
			want: `"r": prefix "/a" (case-insensitive) → served; filter overrides: "rbac-1" or "rbac-2"`,
		},
		{
			r: &routepb.Route{Match: &routepb.RouteMatch{
				PathSpecifier: &routepb.RouteMatch_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: "/x.*"}},
				Headers: []*routepb.HeaderMatcher{
					{Name: "a", HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: "1"}, InvertMatch: true},
					{Name: "b", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}, InvertMatch: true},
					{Name: "c", HeaderMatchSpecifier: &routepb.HeaderMatcher_RangeMatch{RangeMatch: &typepb.Int64Range{Start: 1, End: 9}}},
					{Name: "d", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{
						MatchPattern: &matcherpb.StringMatcher_Suffix{Suffix: "z"}, IgnoreCase: true}}},
				},
				RuntimeFraction: &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{Numerator: 25, Denominator: typepb.FractionalPercent_TEN_THOUSAND}},
			}, Action: &routepb.Route_Route{}},
			want: `path regex "/x.*", header "a" not equal to "1", header "b" absent, header "c" in [1, 9), header "d" ending with "z" (case-insensitive), for 0.25% of RPCs → route: fails with UNAVAILABLE on a server`,
		},
		{
			r:    &routepb.Route{Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: "/p"}}},
			want: `path "/p" → no action: fails with UNAVAILABLE`,
		},
	} {
		if got := describeRoute(test.r); got != test.want {
			t.Errorf("describeRoute =\n%s\nwant\n%s", got, test.want)
		}
	}
}

// A large RouteConfiguration is listed in part; the rest is counted.
func TestDescribeRoutesBounded(t *testing.T) {
	rc := &routepb.RouteConfiguration{}
	for range maxVirtualHosts + 5 {
		vh := &routepb.VirtualHost{Domains: []string{"*"}}
		for range maxRoutes + 3 {
			vh.Routes = append(vh.Routes, &routepb.Route{Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}}})
		}
		rc.VirtualHosts = append(rc.VirtualHosts, vh)
	}
	vhs, more := describeRoutes(rc)
	if len(vhs) != maxVirtualHosts || more != 5 || len(vhs[0].Routes) != maxRoutes || vhs[0].More != 3 {
		t.Errorf("describeRoutes: %d virtual hosts (+%d), %d routes (+%d); want %d (+5), %d (+3)",
			len(vhs), more, len(vhs[0].Routes), vhs[0].More, maxVirtualHosts, maxRoutes)
	}
}

// TestFraction: a runtime fraction reads as the share of RPCs the server
// applies: a numerator above the denominator is 100%.
func TestFraction(t *testing.T) {
	for _, tc := range []struct {
		f    *typepb.FractionalPercent
		want string
	}{
		{&typepb.FractionalPercent{Numerator: 25}, "25%"},
		{&typepb.FractionalPercent{Numerator: 5, Denominator: typepb.FractionalPercent_TEN_THOUSAND}, "0.05%"},
		{&typepb.FractionalPercent{Numerator: 150}, "100%"},
	} {
		if got := fraction(tc.f); got != tc.want {
			t.Errorf("fraction(%v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}
