package filterchain_test

import (
	"net/netip"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// mustAny packs m; it panics on error, which only a broken message causes.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

// routerHTTPFilter is the terminal router filter every valid HCM ends with.
func routerHTTPFilter() *hcmpb.HttpFilter {
	return &hcmpb.HttpFilter{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerpb.Router{})}}
}

// rdsHCM is a valid HttpConnectionManager that takes its routes from RDS
// resource name over ADS.
func rdsHCM(name string) *hcmpb.HttpConnectionManager {
	return &hcmpb.HttpConnectionManager{
		RouteSpecifier: &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
			ConfigSource:    &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}},
			RouteConfigName: name,
		}},
		HttpFilters: []*hcmpb.HttpFilter{routerHTTPFilter()},
	}
}

// inlineHCM is a valid HttpConnectionManager with an inline route config
// whose one route matches everything.
func inlineHCM() *hcmpb.HttpConnectionManager {
	return &hcmpb.HttpConnectionManager{
		RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &routepb.RouteConfiguration{
			Name: "inline",
			VirtualHosts: []*routepb.VirtualHost{{
				Name:    "vh",
				Domains: []string{"*"},
				Routes: []*routepb.Route{{
					Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: []*hcmpb.HttpFilter{routerHTTPFilter()},
	}
}

// hcmFilter wraps an HttpConnectionManager into a network filter.
func hcmFilter(h *hcmpb.HttpConnectionManager) *listenerpb.Filter {
	return &listenerpb.Filter{Name: "hcm", ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: mustAny(h)}}
}

// chain is a valid filter chain named name with match m.
func chain(name string, m *listenerpb.FilterChainMatch) *listenerpb.FilterChain {
	return &listenerpb.FilterChain{Name: name, FilterChainMatch: m, Filters: []*listenerpb.Filter{hcmFilter(rdsHCM("routes"))}}
}

// socketAddress is a TCP Listener address.
func socketAddress(ip string, port uint32) *corepb.Address {
	return &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
		Address:       ip,
		PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: port},
	}}}
}

// newListener is a valid Listener on 0.0.0.0:8080 with the given chains.
func newListener(chains ...*listenerpb.FilterChain) *listenerpb.Listener {
	return &listenerpb.Listener{Name: "lis", Address: socketAddress("0.0.0.0", 8080), FilterChains: chains}
}

// withDefault sets the Listener's default chain (a valid one named
// "default") and returns the Listener.
func withDefault(l *listenerpb.Listener) *listenerpb.Listener {
	l.DefaultFilterChain = chain("default", nil)
	return l
}

// cidr parses "addr/len" or, without a length, leaves prefix_len absent.
func cidr(s string) *corepb.CidrRange {
	if p, err := netip.ParsePrefix(s); err == nil {
		return &corepb.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}
	}
	return &corepb.CidrRange{AddressPrefix: s}
}

// cidrLen is a CidrRange with any prefix_len, also an out-of-range one.
func cidrLen(addr string, n uint32) *corepb.CidrRange {
	return &corepb.CidrRange{AddressPrefix: addr, PrefixLen: wrapperspb.UInt32(n)}
}

// cidrs builds a list of CidrRanges with cidr.
func cidrs(ss ...string) []*corepb.CidrRange {
	out := make([]*corepb.CidrRange, len(ss))
	for i, s := range ss {
		out[i] = cidr(s)
	}
	return out
}

// tlsSocket is a TLS transport socket with a valid mTLS DownstreamTlsContext
// (gRFC A29: identity and root certificate provider instances).
func tlsSocket() *corepb.TransportSocket {
	return &corepb.TransportSocket{
		Name: "envoy.transport_sockets.tls",
		ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: mustAny(&tlspb.DownstreamTlsContext{
			RequireClientCertificate: wrapperspb.Bool(true),
			CommonTlsContext: &tlspb.CommonTlsContext{
				TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "identity"},
				ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
					CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "roots"},
				}},
			},
		})},
	}
}

// ap parses an address:port.
func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// mustCompile compiles l and fails the test on error.
func mustCompile(t testing.TB, l *listenerpb.Listener) *filterchain.Table {
	t.Helper()
	tbl, err := filterchain.Compile(l, filterchain.Options{})
	if err != nil {
		t.Fatalf("Compile() failed: %v", err)
	}
	return tbl
}

// chainName is the name of c, or "<nil>".
func chainName(c *filterchain.FilterChain) string {
	if c == nil {
		return "<nil>"
	}
	return c.Name
}
