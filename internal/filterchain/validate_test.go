package filterchain_test

import (
	"errors"
	"strings"
	"testing"

	udpatypepb "github.com/cncf/xds/go/udpa/type/v1"
	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxypb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
)

// withChain returns a Listener whose only chain is chain("a", nil) changed
// by f.
func withChain(f func(fc *listenerpb.FilterChain)) *listenerpb.Listener {
	fc := chain("a", nil)
	f(fc)
	return newListener(fc)
}

// withHCM returns a Listener whose only chain's HCM is rdsHCM changed by f.
func withHCM(f func(h *hcmpb.HttpConnectionManager)) *listenerpb.Listener {
	h := rdsHCM("routes")
	f(h)
	return withChain(func(fc *listenerpb.FilterChain) { fc.Filters = []*listenerpb.Filter{hcmFilter(h)} })
}

// withMatch returns a Listener whose only chain has match m.
func withMatch(m *listenerpb.FilterChainMatch) *listenerpb.Listener {
	return newListener(chain("a", m))
}

// typedStructHCM wraps an HCM, given as JSON-like struct fields, in a
// TypedStruct (v1 or v3).
func typedStructHCM(v3 bool, typeURL string, fields map[string]any) *anypb.Any {
	s, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	if v3 {
		return mustAny(&xdstypepb.TypedStruct{TypeUrl: typeURL, Value: s})
	}
	return mustAny(&udpatypepb.TypedStruct{TypeUrl: typeURL, Value: s})
}

const hcmURL = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

// hcmJSON is rdsHCM("routes") in its JSON form, for TypedStruct tests.
func hcmJSON() map[string]any {
	return map[string]any{
		"rds": map[string]any{"config_source": map[string]any{"ads": map[string]any{}}, "route_config_name": "routes"},
		"http_filters": []any{map[string]any{
			"name":         "router",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
		}},
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		desc      string
		lis       *listenerpb.Listener
		wantChain string // ValidationError.Chain
		wantField string // a prefix of ValidationError.Field
		wantText  string // also in the message, when set
	}{
		{desc: "nil Listener", lis: nil, wantField: "Listener"},
		{
			desc: "listener_filters",
			lis: func() *listenerpb.Listener {
				l := newListener(chain("a", nil))
				l.ListenerFilters = []*listenerpb.ListenerFilter{{Name: "envoy.filters.listener.tls_inspector"}}
				return l
			}(),
			wantField: "listener_filters",
		},
		{
			desc: "use_original_dst true",
			lis: func() *listenerpb.Listener {
				l := newListener(chain("a", nil))
				l.UseOriginalDst = wrapperspb.Bool(true)
				return l
			}(),
			wantField: "use_original_dst",
		},
		{desc: "address missing", lis: &listenerpb.Listener{}, wantField: "address", wantText: "missing"},
		{
			desc:      "address is a pipe",
			lis:       &listenerpb.Listener{Address: &corepb.Address{Address: &corepb.Address_Pipe{Pipe: &corepb.Pipe{Path: "/tmp/sock"}}}},
			wantField: "address", wantText: "socket_address",
		},
		{
			desc: "address protocol UDP",
			lis: &listenerpb.Listener{Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
				Protocol: corepb.SocketAddress_UDP, Address: "0.0.0.0", PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: 80},
			}}}},
			wantField: "address", wantText: "protocol",
		},
		{
			desc: "address named port",
			lis: &listenerpb.Listener{Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
				Address: "0.0.0.0", PortSpecifier: &corepb.SocketAddress_NamedPort{NamedPort: "http"},
			}}}},
			wantField: "address", wantText: `named_port "http"`,
		},
		{
			desc: "address without port",
			lis: &listenerpb.Listener{Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
				Address: "0.0.0.0",
			}}}},
			wantField: "address", wantText: "port_value",
		},
		{desc: "address host name", lis: &listenerpb.Listener{Address: socketAddress("localhost", 80)}, wantField: "address", wantText: `"localhost"`},
		{desc: "address port out of range", lis: &listenerpb.Listener{Address: socketAddress("::", 70000)}, wantField: "address", wantText: "70000"},
		{
			desc: "address with resolver_name",
			lis: &listenerpb.Listener{Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
				Address: "0.0.0.0", ResolverName: "dns", PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: 80},
			}}}},
			wantField: "address", wantText: "resolver_name",
		},
		{
			desc:      "no network filter",
			lis:       withChain(func(fc *listenerpb.FilterChain) { fc.Filters = nil }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters",
		},
		{
			desc: "unknown network filter",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fc.Filters = []*listenerpb.Filter{{Name: "tcp", ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: mustAny(&tcpproxypb.TcpProxy{})}}}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config", wantText: "TcpProxy",
		},
		{
			desc: "HCM not last",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fc.Filters = append(fc.Filters, &listenerpb.Filter{Name: "tcp", ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: mustAny(&tcpproxypb.TcpProxy{})}})
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[1].typed_config", wantText: "unsupported network filter",
		},
		{
			desc: "second HCM",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				second := hcmFilter(rdsHCM("routes"))
				second.Name = "hcm2"
				fc.Filters = append(fc.Filters, second)
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[1]", wantText: "second HttpConnectionManager",
		},
		{
			desc:      "duplicate network filter name",
			lis:       withChain(func(fc *listenerpb.FilterChain) { fc.Filters = append(fc.Filters, hcmFilter(rdsHCM("routes"))) }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[1].name",
		},
		{
			desc: "network filter with config_discovery",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fc.Filters = []*listenerpb.Filter{{Name: "hcm", ConfigType: &listenerpb.Filter_ConfigDiscovery{ConfigDiscovery: &corepb.ExtensionConfigSource{}}}}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].config_discovery",
		},
		{
			desc:      "network filter without typed_config",
			lis:       withChain(func(fc *listenerpb.FilterChain) { fc.Filters = []*listenerpb.Filter{{Name: "hcm"}} }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config",
		},
		{
			desc: "malformed HCM",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fc.Filters[0].GetTypedConfig().Value = []byte{0xff, 0xff}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config", wantText: "malformed",
		},
		{
			desc: "TypedStruct of another type",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fc.Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: typedStructHCM(false, "type.googleapis.com/foo.Bar", nil)}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config", wantText: `"foo.Bar"`,
		},
		{
			desc: "TypedStruct HCM with an unknown field",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fields := hcmJSON()
				fields["no_such_field"] = 1.0
				fc.Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: typedStructHCM(true, hcmURL, fields)}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config", wantText: "TypedStruct",
		},
		{
			desc:      "http_filters empty",
			lis:       withHCM(func(h *hcmpb.HttpConnectionManager) { h.HttpFilters = nil }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config", wantText: "http_filters",
		},
		{
			desc: "http_filters with an unknown filter",
			lis: withHCM(func(h *hcmpb.HttpConnectionManager) {
				h.HttpFilters = append([]*hcmpb.HttpFilter{{Name: "x", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(&tcpproxypb.TcpProxy{})}}}, h.HttpFilters...)
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config", wantText: "http_filters[0]",
		},
		{
			desc:      "no route specifier",
			lis:       withHCM(func(h *hcmpb.HttpConnectionManager) { h.RouteSpecifier = nil }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.route_specifier",
		},
		{
			desc: "scoped_routes",
			lis: withHCM(func(h *hcmpb.HttpConnectionManager) {
				h.RouteSpecifier = &hcmpb.HttpConnectionManager_ScopedRoutes{ScopedRoutes: &hcmpb.ScopedRoutes{Name: "s"}}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.scoped_routes",
		},
		{
			desc: "rds over api_config_source",
			lis: withHCM(func(h *hcmpb.HttpConnectionManager) {
				h.GetRds().ConfigSource = &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_ApiConfigSource{ApiConfigSource: &corepb.ApiConfigSource{}}}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.rds.config_source",
		},
		{
			desc:      "rds without config_source",
			lis:       withHCM(func(h *hcmpb.HttpConnectionManager) { h.GetRds().ConfigSource = nil }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.rds.config_source",
		},
		{
			desc:      "rds with empty route_config_name",
			lis:       withHCM(func(h *hcmpb.HttpConnectionManager) { h.GetRds().RouteConfigName = "" }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.rds.route_config_name",
		},
		{
			desc: "invalid inline route_config",
			lis: withHCM(func(h *hcmpb.HttpConnectionManager) {
				h.RouteSpecifier = &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &routepb.RouteConfiguration{
					VirtualHosts: []*routepb.VirtualHost{{Domains: []string{"*"}, Routes: []*routepb.Route{{Match: &routepb.RouteMatch{}}}}},
				}}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.route_config", wantText: "path_specifier",
		},
		{
			desc:      "xff_num_trusted_hops",
			lis:       withHCM(func(h *hcmpb.HttpConnectionManager) { h.XffNumTrustedHops = 1 }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.xff_num_trusted_hops",
		},
		{
			desc:      "max_request_headers_kb 0",
			lis:       withHCM(func(h *hcmpb.HttpConnectionManager) { h.MaxRequestHeadersKb = wrapperspb.UInt32(0) }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.max_request_headers_kb", wantText: "want 1 to 8192",
		},
		{
			desc:      "max_request_headers_kb over Envoy's range",
			lis:       withHCM(func(h *hcmpb.HttpConnectionManager) { h.MaxRequestHeadersKb = wrapperspb.UInt32(8193) }),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.max_request_headers_kb", wantText: "8193",
		},
		{
			desc: "max_headers_count 0",
			lis: withHCM(func(h *hcmpb.HttpConnectionManager) {
				h.CommonHttpProtocolOptions = &corepb.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(0)}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.common_http_protocol_options.max_headers_count",
		},
		{
			desc: "original_ip_detection_extensions",
			lis: withHCM(func(h *hcmpb.HttpConnectionManager) {
				h.OriginalIpDetectionExtensions = []*corepb.TypedExtensionConfig{{Name: "xff"}}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filters[0].typed_config.original_ip_detection_extensions",
		},
		{
			desc: "transport_socket with another name",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fc.TransportSocket = tlsSocket()
				fc.TransportSocket.Name = "envoy.transport_sockets.alts"
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "transport_socket.name",
		},
		{
			desc: "transport_socket with another config type",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fc.TransportSocket = tlsSocket()
				fc.TransportSocket.ConfigType = &corepb.TransportSocket_TypedConfig{TypedConfig: mustAny(&tcpproxypb.TcpProxy{})}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "transport_socket.typed_config", wantText: "TcpProxy",
		},
		{
			desc: "transport_socket without typed_config",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fc.TransportSocket = &corepb.TransportSocket{Name: "envoy.transport_sockets.tls"}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "transport_socket.typed_config",
		},
		{
			desc: "malformed DownstreamTlsContext",
			lis: withChain(func(fc *listenerpb.FilterChain) {
				fc.TransportSocket = tlsSocket()
				fc.TransportSocket.GetTypedConfig().Value = []byte{0xff}
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "transport_socket.typed_config", wantText: "malformed",
		},
		{
			desc:      "unknown source_type",
			lis:       withMatch(&listenerpb.FilterChainMatch{SourceType: 7}),
			wantChain: `filter_chains[0] "a"`, wantField: "filter_chain_match.source_type",
		},
		{
			desc:      "bad prefix_ranges address",
			lis:       withMatch(&listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/8", "10.0.0.300")}),
			wantChain: `filter_chains[0] "a"`, wantField: "filter_chain_match.prefix_ranges[1].address_prefix", wantText: `"10.0.0.300"`,
		},
		{
			desc:      "bad source_prefix_ranges address",
			lis:       withMatch(&listenerpb.FilterChainMatch{SourcePrefixRanges: cidrs("fe80::1%eth0")}),
			wantChain: `filter_chains[0] "a"`, wantField: "filter_chain_match.source_prefix_ranges[0].address_prefix",
		},
		{
			desc:      "bad direct_source_prefix_ranges address",
			lis:       withMatch(&listenerpb.FilterChainMatch{DirectSourcePrefixRanges: cidrs("")}),
			wantChain: `filter_chains[0] "a"`, wantField: "filter_chain_match.direct_source_prefix_ranges[0].address_prefix",
		},
		{
			desc:      "invalid default chain",
			lis:       &listenerpb.Listener{Address: socketAddress("::", 80), DefaultFilterChain: &listenerpb.FilterChain{Name: "def"}},
			wantChain: `default_filter_chain "def"`, wantField: "filters",
		},
		{
			desc:      "chain after a valid one",
			lis:       newListener(chain("a", nil), &listenerpb.FilterChain{Name: "b", FilterChainMatch: &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}}}),
			wantChain: `filter_chains[1] "b"`, wantField: "filters",
		},
		{
			desc: "too many normalized matchers",
			lis: withMatch(&listenerpb.FilterChainMatch{
				SourcePorts: make([]uint32, 100), ServerNames: make([]string, 100), ApplicationProtocols: make([]string, 100),
			}),
			wantChain: `filter_chains[0] "a"`, wantField: "filter_chain_match", wantText: "normalized matchers",
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			tbl, err := filterchain.Compile(tc.lis, filterchain.Options{})
			if err == nil {
				t.Fatalf("Compile() = %v, nil; want an error", tbl)
			}
			checkValidationError(t, err, tc.wantChain, tc.wantField, tc.wantText)
		})
	}
}

// checkValidationError checks that err is a *ValidationError for the given
// chain and field, and that its message names both (and wantText).
func checkValidationError(t *testing.T, err error, wantChain, wantField, wantText string) {
	t.Helper()
	var ve *filterchain.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Compile() error = %v (%T), want a *filterchain.ValidationError", err, err)
	}
	if ve.Chain != wantChain || !strings.HasPrefix(ve.Field, wantField) {
		t.Errorf("Compile() error chain, field = %q, %q; want %q, %q...", ve.Chain, ve.Field, wantChain, wantField)
	}
	msg := err.Error()
	for _, want := range []string{"filterchain: ", wantChain, wantField, wantText} {
		if !strings.Contains(msg, want) {
			t.Errorf("Compile() error = %q, want it to mention %q", msg, want)
		}
	}
}

func TestCompileDuplicates(t *testing.T) {
	tests := []struct {
		desc      string
		chains    []*listenerpb.FilterChainMatch
		wantChain string // the later chain; "" when the Listener is valid
		wantOther string // the earlier chain, named in the message
	}{
		{
			desc:      "identical empty matches",
			chains:    []*listenerpb.FilterChainMatch{nil, {}},
			wantChain: `filter_chains[1] "c1"`, wantOther: `filter_chains[0] "c0"`,
		},
		{
			desc: "same after masking low bits",
			chains: []*listenerpb.FilterChainMatch{
				{PrefixRanges: cidrs("10.1.2.3/8")},
				{PrefixRanges: cidrs("192.168.0.0/16", "10.0.0.0/8")},
			},
			wantChain: `filter_chains[1] "c1"`, wantOther: `filter_chains[0] "c0"`,
		},
		{
			desc: "same after clamping prefix_len",
			chains: []*listenerpb.FilterChainMatch{
				{SourcePrefixRanges: []*corepb.CidrRange{cidrLen("10.0.0.1", 33)}},
				{SourcePrefixRanges: cidrs("10.0.0.1/32")},
			},
			wantChain: `filter_chains[1] "c1"`, wantOther: `filter_chains[0] "c0"`,
		},
		{
			desc: "absent prefix_len is 0",
			chains: []*listenerpb.FilterChainMatch{
				{PrefixRanges: cidrs("10.0.0.0")},
				{PrefixRanges: cidrs("0.0.0.0/0")},
			},
			wantChain: `filter_chains[1] "c1"`, wantOther: `filter_chains[0] "c0"`,
		},
		{
			desc: "IPv4-mapped IPv6 equals IPv4",
			chains: []*listenerpb.FilterChainMatch{
				{PrefixRanges: []*corepb.CidrRange{cidrLen("::ffff:10.0.0.0", 104)}},
				{PrefixRanges: cidrs("10.0.0.0/8")},
			},
			wantChain: `filter_chains[1] "c1"`, wantOther: `filter_chains[0] "c0"`,
		},
		{
			desc: "one of the Cartesian products of A36's example",
			chains: []*listenerpb.FilterChainMatch{
				{
					PrefixRanges:       cidrs("192.168.0.0/24", "10.1.0.0/16"),
					SourcePrefixRanges: cidrs("192.168.1.0/24", "10.2.0.0/16"),
					SourceType:         listenerpb.FilterChainMatch_EXTERNAL,
				},
				{PrefixRanges: cidrs("10.1.0.0/16"), SourcePrefixRanges: cidrs("10.2.0.0/16"), SourceType: listenerpb.FilterChainMatch_EXTERNAL},
			},
			wantChain: `filter_chains[1] "c1"`, wantOther: `filter_chains[0] "c0"`,
		},
		{
			desc: "never-matching chains still count",
			chains: []*listenerpb.FilterChainMatch{
				{ServerNames: []string{"a.example.com", "b.example.com"}},
				{ServerNames: []string{"b.example.com"}},
			},
			wantChain: `filter_chains[1] "c1"`, wantOther: `filter_chains[0] "c0"`,
		},
		{
			desc: "never-matching destination_port still counts",
			chains: []*listenerpb.FilterChainMatch{
				{DestinationPort: wrapperspb.UInt32(80), ApplicationProtocols: []string{"h2"}},
				{DestinationPort: wrapperspb.UInt32(80), ApplicationProtocols: []string{"h2"}},
			},
			wantChain: `filter_chains[1] "c1"`, wantOther: `filter_chains[0] "c0"`,
		},
		{
			desc:      "duplicate inside one chain",
			chains:    []*listenerpb.FilterChainMatch{{SourcePorts: []uint32{80, 80}}},
			wantChain: `filter_chains[0] "c0"`, wantOther: "its own",
		},
		{
			desc: "explicit /0 differs from absent prefix",
			chains: []*listenerpb.FilterChainMatch{
				{PrefixRanges: cidrs("0.0.0.0/0")},
				{},
			},
		},
		{
			desc: "different source types",
			chains: []*listenerpb.FilterChainMatch{
				{SourceType: listenerpb.FilterChainMatch_SAME_IP_OR_LOOPBACK},
				{SourceType: listenerpb.FilterChainMatch_EXTERNAL},
				{},
			},
		},
		{
			desc: "different server names and transport protocols",
			chains: []*listenerpb.FilterChainMatch{
				{ServerNames: []string{"a"}},
				{ServerNames: []string{"b"}},
				{TransportProtocol: "tls"},
				{TransportProtocol: "raw_buffer"},
				{},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			l := newListener()
			for i, m := range tc.chains {
				l.FilterChains = append(l.FilterChains, chain("c"+string(rune('0'+i)), m))
			}
			_, err := filterchain.Compile(l, filterchain.Options{})
			if tc.wantChain == "" {
				if err != nil {
					t.Fatalf("Compile() failed: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Compile() succeeded, want a duplicate matcher error")
			}
			checkValidationError(t, err, tc.wantChain, "filter_chain_match", tc.wantOther)
		})
	}
}
