package e2e_test

// The bad-input matrix (issue 9, item 2): one xDS server, one management
// server and one client connection are reused while malformed or
// unsupported Listeners are pushed one after the other. Every case must be
// NACKed with an error_detail naming the resource and the field, leave the
// previous good Listener serving on the same connection, and show up in
// CSDS as NACKED with the reason; the good Listener is then pushed again so
// that the next case starts from an ACKed state.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	xdsmatcherpb "github.com/cncf/xds/go/xds/type/matcher/v3"
	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	ratelimitconfpb "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	globalrlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	exprpb "google.golang.org/genproto/googleapis/api/expr/v1alpha1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/csds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// badCase is one malformed or unsupported Listener.
type badCase struct {
	name string
	// mutate turns a fresh copy of the good Listener into the bad one.
	mutate func(t *testing.T, l *listenerpb.Listener)
	// raw, if set, is pushed instead under the Listener type URL and the
	// good Listener's name (a message of another type, or garbage bytes).
	raw func(t *testing.T, good *listenerpb.Listener) proto.Message
	// route, if set, makes the case a RouteConfiguration over RDS instead:
	// it turns a fresh copy of the good RouteConfiguration into the bad one.
	route func(rc *routepb.RouteConfiguration)
	// want are substrings error_detail and CSDS's error_state must hold
	// (besides the resource name, unless unnamed).
	want []string
	// unnamed: the bytes cannot be decoded, so no resource name is known;
	// the NACK need not name the resource and CSDS cannot attribute it.
	unnamed bool
	// knownBug, if set, skips the case with this explanation.
	knownBug string
}

// --- mutation helpers ---

func bHCM(t *testing.T, l *listenerpb.Listener) *hcmpb.HttpConnectionManager {
	t.Helper()
	hcm := &hcmpb.HttpConnectionManager{}
	if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	return hcm
}

func bSetHCM(l *listenerpb.Listener, hcm *hcmpb.HttpConnectionManager) {
	l.FilterChains[0].Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)}
}

func withHCM(f func(t *testing.T, h *hcmpb.HttpConnectionManager)) mutFn {
	return func(t *testing.T, l *listenerpb.Listener) {
		h := bHCM(t, l)
		f(t, h)
		bSetHCM(l, h)
	}
}

func withRoutes(f func(t *testing.T, rc *routepb.RouteConfiguration)) mutFn {
	return withHCM(func(t *testing.T, h *hcmpb.HttpConnectionManager) { f(t, h.GetRouteConfig()) })
}

// withRoute changes the first route of the chain's inline routes.
func withRoute(f func(r *routepb.Route)) mutFn {
	return withRoutes(func(_ *testing.T, rc *routepb.RouteConfiguration) { f(rc.VirtualHosts[0].Routes[0]) })
}

// withTLS gives the chain a valid mTLS DownstreamTlsContext changed by f.
func withTLS(f func(d *tlspb.DownstreamTlsContext)) mutFn {
	return func(t *testing.T, l *listenerpb.Listener) {
		d := downstreamTLS(true, true)
		f(d)
		withTransportSocket(t, l, "A", d)
	}
}

// withValidation changes the validation context of withTLS's context.
func withValidation(f func(v *tlspb.CertificateValidationContext)) mutFn {
	return withTLS(func(d *tlspb.DownstreamTlsContext) { f(d.CommonTlsContext.GetValidationContext()) })
}

// withExtAuthz puts an ext_authz filter, changed by f from one calling
// 127.0.0.1:9 (not in this bootstrap's allowed_grpc_services, from a
// management server that is not trusted), before the router.
func withExtAuthz(f func(c *extauthzpb.ExtAuthz)) mutFn {
	return withHCM(func(t *testing.T, h *hcmpb.HttpConnectionManager) {
		c := &extauthzpb.ExtAuthz{Services: &extauthzpb.ExtAuthz_GrpcService{GrpcService: &corepb.GrpcService{
			TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: "127.0.0.1:9"}},
		}}}
		f(c)
		h.HttpFilters = append([]*hcmpb.HttpFilter{{Name: "authz", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, c)}}}, h.HttpFilters...)
	})
}

// withGlobalRL puts a global rate limit filter "rl", changed by f from one
// of domain "d" calling 127.0.0.1:9 (not in this bootstrap's
// allowed_grpc_services, from a management server that is not trusted),
// before the router.
func withGlobalRL(f func(c *globalrlpb.RateLimit)) mutFn {
	return withHCM(func(t *testing.T, h *hcmpb.HttpConnectionManager) {
		c := &globalrlpb.RateLimit{Domain: "d", RateLimitService: &ratelimitconfpb.RateLimitServiceConfig{
			TransportApiVersion: corepb.ApiVersion_V3,
			GrpcService:         &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: "127.0.0.1:9"}}},
		}}
		f(c)
		h.HttpFilters = append([]*hcmpb.HttpFilter{{Name: "rl", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, c)}}}, h.HttpFilters...)
	})
}

// withRBAC puts an RBAC filter with cfg before the router.
func withRBAC(cfg *rbacpb.RBAC) mutFn {
	return withHCM(func(t *testing.T, h *hcmpb.HttpConnectionManager) {
		h.HttpFilters = append([]*hcmpb.HttpFilter{{Name: rbacFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, cfg)}}}, h.HttpFilters...)
	})
}

// rbacPolicy is an ALLOW RBAC config with one policy.
func rbacPolicy(p *rbacconfigpb.Policy) *rbacpb.RBAC {
	return rbacRules(rbacconfigpb.RBAC_ALLOW, map[string]*rbacconfigpb.Policy{"p": p})
}

func headerPerm(name string) *rbacconfigpb.Permission {
	return &rbacconfigpb.Permission{Rule: &rbacconfigpb.Permission_Header{Header: &routepb.HeaderMatcher{
		Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true},
	}}}
}

func adsRDS(name string, src *corepb.ConfigSource) *hcmpb.HttpConnectionManager_Rds {
	return &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{RouteConfigName: name, ConfigSource: src}}
}

func hcmFilter(t *testing.T, l *listenerpb.Listener) *listenerpb.Filter {
	return proto.Clone(l.FilterChains[0].Filters[0]).(*listenerpb.Filter)
}

// withUnknown returns an Empty whose wire form is b: go-control-plane
// marshals it as is, which is how truly garbage bytes reach the client.
func withUnknown(b []byte) proto.Message {
	m := &emptypb.Empty{}
	m.ProtoReflect().SetUnknown(b)
	return m
}

func badInputCases() []badCase {
	return append([]badCase{
		// --- Listener (A36) ---
		{name: "listener_filters", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.ListenerFilters = []*listenerpb.ListenerFilter{{Name: "envoy.filters.listener.tls_inspector"}}
		}, want: []string{"listener_filters"}},
		{name: "use_original_dst", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.UseOriginalDst = wrapperspb.Bool(true)
		}, want: []string{"use_original_dst"}},
		{name: "no address", mutate: func(_ *testing.T, l *listenerpb.Listener) { l.Address = nil }, want: []string{"address"}},
		{name: "hostname address", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.Address.GetSocketAddress().Address = "localhost"
		}, want: []string{"address"}},
		{name: "pipe address", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.Address = &corepb.Address{Address: &corepb.Address_Pipe{Pipe: &corepb.Pipe{Path: "/tmp/x"}}}
		}, want: []string{"address"}},
		{name: "named port", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.Address.GetSocketAddress().PortSpecifier = &corepb.SocketAddress_NamedPort{NamedPort: "grpc"}
		}, want: []string{"port"}},
		{name: "udp address", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.Address.GetSocketAddress().Protocol = corepb.SocketAddress_UDP
		}, want: []string{"protocol"}},
		{name: "duplicate matchers", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			m := &listenerpb.FilterChainMatch{PrefixRanges: []*corepb.CidrRange{cidr("127.0.0.0/8")}}
			l.FilterChains = []*listenerpb.FilterChain{
				chainSpec{name: "A", match: m}.filterChain(),
				chainSpec{name: "B", match: proto.Clone(m).(*listenerpb.FilterChainMatch)}.filterChain(),
			}
		}, want: []string{"duplicate", `"B"`}},
		{name: "duplicate after normalization", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.FilterChains = []*listenerpb.FilterChain{
				chainSpec{name: "A", match: &listenerpb.FilterChainMatch{PrefixRanges: []*corepb.CidrRange{cidr("127.0.0.0/8")}}}.filterChain(),
				chainSpec{name: "B", match: &listenerpb.FilterChainMatch{PrefixRanges: []*corepb.CidrRange{{AddressPrefix: "127.1.2.3", PrefixLen: wrapperspb.UInt32(8)}}}}.filterChain(),
			}
		}, want: []string{"duplicate", `"B"`}},
		{name: "duplicate never-matching chains", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.FilterChains = append(l.FilterChains,
				chainSpec{name: "N1", match: &listenerpb.FilterChainMatch{ServerNames: []string{"a.test"}}}.filterChain(),
				chainSpec{name: "N2", match: &listenerpb.FilterChainMatch{ServerNames: []string{"a.test"}}}.filterChain(),
			)
		}, want: []string{"duplicate", `"N2"`}},
		{name: "normalized matchers over the limit", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			m := &listenerpb.FilterChainMatch{}
			for i := range 64 {
				m.PrefixRanges = append(m.PrefixRanges, cidr(fmt.Sprintf("10.%d.0.0/16", i)))
				m.SourcePrefixRanges = append(m.SourcePrefixRanges, cidr(fmt.Sprintf("10.%d.0.0/16", i)))
			}
			for i := range 65 {
				m.SourcePorts = append(m.SourcePorts, uint32(1000+i))
			}
			l.FilterChains = append(l.FilterChains, chainSpec{name: "huge", match: m}.filterChain())
		}, want: []string{`"huge"`, "normalized matchers"}},
		{name: "huge Listener with a duplicate last chain", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			// 5 000 valid chains (about 1.5 MB, under gRPC's 4 MB message
			// limit) sharing one HCM, then one duplicate: the whole
			// Listener is decoded, compiled and rejected (about 0.3 s with
			// -race on 2 busy cores).
			fc := l.FilterChains[0]
			l.FilterChains = make([]*listenerpb.FilterChain, 0, 5001)
			for i := range 5000 {
				c := proto.Clone(fc).(*listenerpb.FilterChain)
				c.Name = fmt.Sprintf("c%d", i)
				c.FilterChainMatch = &listenerpb.FilterChainMatch{SourcePorts: []uint32{uint32(1 + i)}}
				l.FilterChains = append(l.FilterChains, c)
			}
			l.FilterChains = append(l.FilterChains, proto.Clone(l.FilterChains[4999]).(*listenerpb.FilterChain))
			l.FilterChains[5000].Name = "dup"
		}, want: []string{`filter_chains[5000] "dup"`, "duplicates a matcher"}},
		{name: "no network filter", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.FilterChains[0].Filters = nil
		}, want: []string{"filters"}},
		{name: "two network filters", mutate: func(t *testing.T, l *listenerpb.Listener) {
			f := hcmFilter(t, l)
			f.Name = "second"
			l.FilterChains[0].Filters = append(l.FilterChains[0].Filters, f)
		}, want: []string{"filters"}},
		{name: "network filter not an HCM", mutate: func(t *testing.T, l *listenerpb.Listener) {
			l.FilterChains[0].Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: anyOf(t, &routepb.RouteConfiguration{Name: "x"})}
		}, want: []string{"filters[0]", "RouteConfiguration"}},
		{name: "network filter without typed_config", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.FilterChains[0].Filters[0].ConfigType = nil
		}, want: []string{"filters[0]"}},
		{name: "network filter config_discovery", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.FilterChains[0].Filters[0].ConfigType = &listenerpb.Filter_ConfigDiscovery{ConfigDiscovery: &corepb.ExtensionConfigSource{}}
		}, want: []string{"filters[0]"}},
		{name: "HCM garbage bytes", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			l.FilterChains[0].Filters[0].GetTypedConfig().Value = []byte{0xff, 0xff, 0xff}
		}, want: []string{"filters[0]"}},
		{name: "HCM truncated bytes", mutate: func(_ *testing.T, l *listenerpb.Listener) {
			v := l.FilterChains[0].Filters[0].GetTypedConfig().Value
			l.FilterChains[0].Filters[0].GetTypedConfig().Value = v[:len(v)/2]
		}, want: []string{"filters[0]"}},
		{name: "HCM TypedStruct of another type", mutate: func(t *testing.T, l *listenerpb.Listener) {
			l.FilterChains[0].Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: anyOf(t, &xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/foo.Bar"})}
		}, want: []string{"filters[0]", "foo.Bar"}},
		{name: "xff_num_trusted_hops", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.XffNumTrustedHops = 1
		}), want: []string{"xff_num_trusted_hops"}},
		{name: "max_request_headers_kb out of Envoy's range", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.MaxRequestHeadersKb = wrapperspb.UInt32(9000)
		}), want: []string{"max_request_headers_kb", "9000"}},
		{name: "max_headers_count 0", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.CommonHttpProtocolOptions = &corepb.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(0)}
		}), want: []string{"max_headers_count"}},
		{name: "original_ip_detection_extensions", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.OriginalIpDetectionExtensions = []*corepb.TypedExtensionConfig{{Name: "xff"}}
		}), want: []string{"original_ip_detection_extensions"}},
		{name: "rds config source path", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.RouteSpecifier = adsRDS("r", &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_PathConfigSource{PathConfigSource: &corepb.PathConfigSource{Path: "/x"}}})
		}), want: []string{"config_source"}},
		{name: "rds without config source", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.RouteSpecifier = adsRDS("r", nil)
		}), want: []string{"config_source"}},
		{name: "rds without a name", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.RouteSpecifier = adsRDS("", &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}})
		}), want: []string{"route_config_name"}},
		{name: "no route specifier", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.RouteSpecifier = nil
		}), want: []string{"route"}},
		{name: "scoped_routes", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.RouteSpecifier = &hcmpb.HttpConnectionManager_ScopedRoutes{ScopedRoutes: &hcmpb.ScopedRoutes{Name: "s"}}
		}), want: []string{"scoped_routes"}},
		// --- HTTP filters (A39) ---
		{name: "empty http_filters", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.HttpFilters = nil
		}), want: []string{"http_filters"}},
		{name: "router not last", mutate: withRBAC(allowMethods(methodEmpty)).then(withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.HttpFilters[0], h.HttpFilters[1] = h.HttpFilters[1], h.HttpFilters[0]
		})), want: []string{"http_filters", "router"}},
		{name: "unknown non-optional filter", mutate: withHCM(func(t *testing.T, h *hcmpb.HttpConnectionManager) {
			h.HttpFilters = append([]*hcmpb.HttpFilter{{Name: "mystery", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, &emptypb.Empty{})}}}, h.HttpFilters...)
		}), want: []string{"mystery", "google.protobuf.Empty"}},
		// --- ext_authz (gRFC A92, A102) ---
		{name: "ext_authz with http_service only", mutate: withExtAuthz(func(c *extauthzpb.ExtAuthz) {
			c.Services = &extauthzpb.ExtAuthz_HttpService{HttpService: &extauthzpb.HttpService{}}
		}), want: []string{"authz", "grpc_service", "http_service"}},
		{name: "ext_authz target not allowed by the bootstrap", mutate: withExtAuthz(func(*extauthzpb.ExtAuthz) {}),
			want: []string{"authz", "127.0.0.1:9", "allowed_grpc_services", "trusted_xds_server"}},
		{name: "ext_authz envoy_grpc", mutate: withExtAuthz(func(c *extauthzpb.ExtAuthz) {
			c.GetGrpcService().TargetSpecifier = &corepb.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corepb.GrpcService_EnvoyGrpc{ClusterName: "authz"}}
		}), want: []string{"authz", "envoy_grpc"}},
		{name: "ext_authz negative timeout", mutate: withExtAuthz(func(c *extauthzpb.ExtAuthz) {
			c.GetGrpcService().Timeout = &durationpb.Duration{Seconds: -1}
		}), want: []string{"authz", "grpc_service: timeout"}},
		{name: "ext_authz initial_metadata upper case", mutate: withExtAuthz(func(c *extauthzpb.ExtAuthz) {
			c.GetGrpcService().InitialMetadata = []*corepb.HeaderValue{{Key: "X-Tenant", Value: "a"}}
		}), want: []string{"authz", "initial_metadata[0]", "X-Tenant"}},
		// gRFC A102: raw_value, when set, is the value, and is checked as one.
		{name: "ext_authz initial_metadata raw_value with a control byte", mutate: withExtAuthz(func(c *extauthzpb.ExtAuthz) {
			c.GetGrpcService().InitialMetadata = []*corepb.HeaderValue{{Key: "x-tenant", Value: "a", RawValue: []byte("a\x00b")}}
		}), want: []string{"authz", "initial_metadata[0]", "x-tenant", "printable"}},
		{name: "ext_authz filter_enabled without default_value", mutate: withExtAuthz(func(c *extauthzpb.ExtAuthz) {
			c.FilterEnabled = &corepb.RuntimeFractionalPercent{RuntimeKey: "k"}
		}), want: []string{"authz", "filter_enabled.default_value"}},
		{name: "ext_authz deny_at_disable without default_value", mutate: withExtAuthz(func(c *extauthzpb.ExtAuthz) {
			c.DenyAtDisable = &corepb.RuntimeFeatureFlag{RuntimeKey: "k"}
		}), want: []string{"authz", "deny_at_disable.default_value"}},
		{name: "ext_authz bad mutation rule regex", mutate: withExtAuthz(func(c *extauthzpb.ExtAuthz) {
			c.DecoderHeaderMutationRules = &mutationpb.HeaderMutationRules{AllowExpression: &matcherpb.RegexMatcher{Regex: "a("}}
		}), want: []string{"authz", "decoder_header_mutation_rules: allow_expression"}},
		// --- global rate limit (issue 35) ---
		{name: "ratelimit target not allowed by the bootstrap", mutate: withGlobalRL(func(*globalrlpb.RateLimit) {}),
			want: []string{"rl", "rate_limit_service.grpc_service", "127.0.0.1:9", "allowed_grpc_services"}},
		{name: "ratelimit empty domain", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) { c.Domain = "" }), want: []string{"rl", "domain: empty"}},
		{name: "ratelimit without rate_limit_service", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) { c.RateLimitService = nil }),
			want: []string{"rl", "rate_limit_service: missing"}},
		{name: "ratelimit transport_api_version AUTO", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) {
			c.RateLimitService.TransportApiVersion = corepb.ApiVersion_AUTO
		}), want: []string{"rl", "rate_limit_service.transport_api_version"}},
		{name: "ratelimit envoy_grpc", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) {
			c.RateLimitService.GrpcService.TargetSpecifier = &corepb.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corepb.GrpcService_EnvoyGrpc{ClusterName: "rls"}}
		}), want: []string{"rl", "rate_limit_service.grpc_service", "envoy_grpc"}},
		{name: "ratelimit unknown request_type", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) { c.RequestType = "sometimes" }),
			want: []string{"rl", "request_type", "sometimes"}},
		{name: "ratelimit stage 11", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) { c.Stage = 11 }), want: []string{"rl", "stage: 11"}},
		{name: "ratelimit response_headers_to_add", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) {
			c.ResponseHeadersToAdd = []*corepb.HeaderValueOption{{Header: &corepb.HeaderValue{Key: "x", Value: "%START_TIME%"}}}
		}), want: []string{"rl", "response_headers_to_add", "not supported"}},
		{name: "ratelimit filter_enforced without default_value", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) {
			c.FilterEnforced = &corepb.RuntimeFractionalPercent{RuntimeKey: "k"}
		}), want: []string{"rl", "filter_enforced.default_value"}},
		{name: "ratelimit rate limit without actions", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) {
			c.RateLimits = []*routepb.RateLimit{{}}
		}), want: []string{"rl", "rate_limits[0].actions: empty"}},
		{name: "ratelimit descriptor extension", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) {
			c.RateLimits = []*routepb.RateLimit{rlOf(rlGeneric("v"), &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_Extension{Extension: &corepb.TypedExtensionConfig{Name: "custom"}}})}
		}), want: []string{"rl", "rate_limits[0].actions[1].extension", "custom"}},
		{name: "ratelimit apply_on_stream_done", mutate: withGlobalRL(func(c *globalrlpb.RateLimit) {
			c.RateLimits = []*routepb.RateLimit{{Actions: []*routepb.RateLimit_Action{rlGeneric("v")}, ApplyOnStreamDone: true}}
		}), want: []string{"rl", "rate_limits[0].apply_on_stream_done", "not supported"}},
		{name: "ratelimit per-route empty request_headers descriptor_key", mutate: withRoute(func(r *routepb.Route) {
			a, err := anypb.New(&globalrlpb.RateLimitPerRoute{RateLimits: []*routepb.RateLimit{rlOf(rlHeader("x-tenant", ""))}})
			if err != nil {
				panic(err)
			}
			r.TypedPerFilterConfig = map[string]*anypb.Any{"rl": a}
		}), want: []string{"typed_per_filter_config", "rate_limits[0].actions[0].request_headers.descriptor_key: empty"}},
		{name: "virtual host rate_limits bad masked_remote_address", mutate: withRoutes(func(_ *testing.T, rc *routepb.RouteConfiguration) {
			rc.VirtualHosts[0].RateLimits = []*routepb.RateLimit{rlOf(&routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_MaskedRemoteAddress_{MaskedRemoteAddress: &routepb.RateLimit_Action_MaskedRemoteAddress{V6PrefixMaskLen: wrapperspb.UInt32(129)}}})}
		}), want: []string{"virtual_hosts[0].rate_limits[0].actions[0].masked_remote_address.v6_prefix_mask_len"}},
		{name: "duplicate http filter names", mutate: withRBAC(allowMethods(methodEmpty)).then(withRBAC(allowMethods(methodEmpty))), want: []string{"http_filters", rbacFilterName}},
		{name: "http filter without config", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.HttpFilters = append([]*hcmpb.HttpFilter{{Name: "bare"}}, h.HttpFilters...)
		}), want: []string{"bare"}},
		{name: "router config garbage bytes", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.HttpFilters[0].GetTypedConfig().Value = []byte{0xff, 0xff}
		}), want: []string{"http_filters[0]"}},
		{name: "typed_per_filter_config unknown type", mutate: withRBAC(allowMethods(methodEmpty)).then(withRoutes(func(t *testing.T, rc *routepb.RouteConfiguration) {
			rc.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{rbacFilterName: anyOf(t, &emptypb.Empty{})}
		})), want: []string{"typed_per_filter_config", "google.protobuf.Empty"}},
		{name: "typed_per_filter_config garbage RBACPerRoute", mutate: withRBAC(allowMethods(methodEmpty)).then(withRoute(func(r *routepb.Route) {
			r.TypedPerFilterConfig = map[string]*anypb.Any{rbacFilterName: {TypeUrl: "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute", Value: []byte{0xff}}}
		})), want: []string{"typed_per_filter_config", rbacFilterName}},
		// --- transport socket and DownstreamTlsContext (A29) ---
		{name: "transport socket not tls", mutate: withTLS(func(*tlspb.DownstreamTlsContext) {}).then(func(_ *testing.T, l *listenerpb.Listener) {
			l.FilterChains[0].TransportSocket.Name = "envoy.transport_sockets.raw_buffer"
			l.FilterChains[0].TransportSocket.ConfigType = &corepb.TransportSocket_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"}}
		}), want: []string{"transport_socket"}},
		{name: "transport socket UpstreamTlsContext", mutate: func(t *testing.T, l *listenerpb.Listener) {
			l.FilterChains[0].TransportSocket = &corepb.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: anyOf(t, &tlspb.UpstreamTlsContext{})}}
		}, want: []string{"transport_socket", "UpstreamTlsContext"}},
		{name: "transport socket garbage bytes", mutate: withTLS(func(*tlspb.DownstreamTlsContext) {}).then(func(_ *testing.T, l *listenerpb.Listener) {
			l.FilterChains[0].TransportSocket.GetTypedConfig().Value = []byte{0xff}
		}), want: []string{"transport_socket"}},
		{name: "missing identity provider", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.TlsCertificateProviderInstance = nil
		}), want: []string{"tls_certificate_provider_instance"}},
		{name: "unknown identity instance", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.TlsCertificateProviderInstance.InstanceName = "no-such-instance"
		}), want: []string{"no-such-instance"}},
		{name: "unknown roots instance", mutate: withValidation(func(v *tlspb.CertificateValidationContext) {
			v.CaCertificateProviderInstance.InstanceName = "no-such-roots"
		}), want: []string{"no-such-roots"}},
		{name: "require_sni", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.RequireSni = wrapperspb.Bool(true)
		}), want: []string{"require_sni"}},
		{name: "ocsp must staple", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.OcspStaplePolicy = tlspb.DownstreamTlsContext_MUST_STAPLE
		}), want: []string{"ocsp_staple_policy"}},
		{name: "sds identity", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlspb.SdsSecretConfig{{Name: "s"}}
		}), want: []string{"tls_certificate_sds_secret_configs"}},
		{name: "sds validation context", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: &tlspb.SdsSecretConfig{Name: "s"}}
		}), want: []string{"validation_context_sds_secret_config"}},
		{name: "tls_certificates", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.TlsCertificates = []*tlspb.TlsCertificate{{}}
		}), want: []string{"tls_certificates"}},
		{name: "require_client_certificate without validation context", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.ValidationContextType = nil
		}), want: []string{"require_client_certificate"}},
		{name: "tls_params", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.TlsParams = &tlspb.TlsParameters{TlsMinimumProtocolVersion: tlspb.TlsParameters_TLSv1_3}
		}), want: []string{"tls_params"}},
		{name: "custom_handshaker", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.CustomHandshaker = &corepb.TypedExtensionConfig{Name: "h"}
		}), want: []string{"custom_handshaker"}},
		{name: "deprecated inline tls_certificate_certificate_provider without an instance", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.TlsCertificateProviderInstance = nil
			d.CommonTlsContext.TlsCertificateCertificateProvider = &tlspb.CommonTlsContext_CertificateProvider{Name: "inline"}
		}), want: []string{"tls_certificate_certificate_provider"}},
		{name: "deprecated tls_certificate_certificate_provider_instance not in the bootstrap", mutate: withTLS(func(d *tlspb.DownstreamTlsContext) {
			d.CommonTlsContext.TlsCertificateProviderInstance = nil
			d.CommonTlsContext.TlsCertificateCertificateProviderInstance = &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "unknown-instance"}
		}), want: []string{"tls_certificate_certificate_provider_instance", "unknown-instance"}},
		{name: "verify_certificate_spki", mutate: withValidation(func(v *tlspb.CertificateValidationContext) {
			v.VerifyCertificateSpki = []string{"NvqYIYSbgK2vCJpQhObf77vv+bQWtc5ek5RIOwPiC9A="}
		}), want: []string{"verify_certificate_spki"}},
		{name: "match_subject_alt_names", mutate: withValidation(func(v *tlspb.CertificateValidationContext) {
			v.MatchSubjectAltNames = []*matcherpb.StringMatcher{exactString("x")}
		}), want: []string{"match_subject_alt_names"}},
		{name: "crl", mutate: withValidation(func(v *tlspb.CertificateValidationContext) {
			v.Crl = &corepb.DataSource{Specifier: &corepb.DataSource_InlineString{InlineString: "x"}}
		}), want: []string{"crl"}},
		{name: "require_signed_certificate_timestamp", mutate: withValidation(func(v *tlspb.CertificateValidationContext) {
			v.RequireSignedCertificateTimestamp = wrapperspb.Bool(true)
		}), want: []string{"require_signed_certificate_timestamp"}},
		// --- RBAC (A41) ---
		{name: "rbac matcher API", mutate: withRBAC(&rbacpb.RBAC{Matcher: &xdsmatcherpb.Matcher{}}), want: []string{"matcher"}},
		{name: "rbac shadow_matcher", mutate: withRBAC(&rbacpb.RBAC{ShadowMatcher: &xdsmatcherpb.Matcher{}}), want: []string{"shadow_matcher"}},
		{name: "rbac CEL condition", mutate: withRBAC(rbacPolicy(&rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{anyPermission()}, Principals: []*rbacconfigpb.Principal{anyPrincipal()},
			Condition: &exprpb.Expr{},
		})), want: []string{"condition"}},
		{name: "rbac checked_condition", mutate: withRBAC(rbacPolicy(&rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{anyPermission()}, Principals: []*rbacconfigpb.Principal{anyPrincipal()},
			CheckedCondition: &exprpb.CheckedExpr{},
		})), want: []string{"checked_condition"}},
		{name: "rbac grpc- header", mutate: withRBAC(rbacPolicy(&rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{headerPerm("grpc-timeout")}, Principals: []*rbacconfigpb.Principal{anyPrincipal()},
		})), want: []string{"grpc-timeout"}},
		{name: "rbac :scheme header", mutate: withRBAC(rbacPolicy(&rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{anyPermission()}, Principals: []*rbacconfigpb.Principal{headerPrincipal(":scheme", "http")},
		})), want: []string{":scheme"}},
		{name: "rbac policy without principals", mutate: withRBAC(rbacPolicy(&rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{anyPermission()},
		})), want: []string{"principals"}},
		{name: "rbac unset permission rule", mutate: withRBAC(rbacPolicy(&rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{{}}, Principals: []*rbacconfigpb.Principal{anyPrincipal()},
		})), want: []string{"permissions[0]"}},
		{name: "rbac empty and_rules", mutate: withRBAC(rbacPolicy(&rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_AndRules{AndRules: &rbacconfigpb.Permission_Set{}}}},
			Principals:  []*rbacconfigpb.Principal{anyPrincipal()},
		})), want: []string{"and_rules"}},
		{name: "rbac destination_port over 65535", mutate: withRBAC(rbacPolicy(&rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_DestinationPort{DestinationPort: 70000}}},
			Principals:  []*rbacconfigpb.Principal{anyPrincipal()},
		})), want: []string{"destination_port"}},
		{name: "rbac uri_template", mutate: withRBAC(rbacPolicy(&rbacconfigpb.Policy{
			Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_UriTemplate{UriTemplate: &corepb.TypedExtensionConfig{Name: "u"}}}},
			Principals:  []*rbacconfigpb.Principal{anyPrincipal()},
		})), want: []string{"uri_template"}},
		{name: "rbac unsupported audit logger", mutate: func(t *testing.T, l *listenerpb.Listener) {
			cfg := allowMethods(methodEmpty)
			cfg.Rules.AuditLoggingOptions = &rbacconfigpb.RBAC_AuditLoggingOptions{
				AuditCondition: rbacconfigpb.RBAC_AuditLoggingOptions_ON_DENY,
				LoggerConfigs: []*rbacconfigpb.RBAC_AuditLoggingOptions_AuditLoggerConfig{{
					AuditLogger: &corepb.TypedExtensionConfig{Name: "nope", TypedConfig: anyOf(t, &xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/no.such.Logger"})},
				}},
			}
			withRBAC(cfg)(t, l)
		}, want: []string{"no.such.Logger"}},
		{name: "rbac garbage bytes", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.HttpFilters = append([]*hcmpb.HttpFilter{{Name: rbacFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: &anypb.Any{
				TypeUrl: "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC", Value: []byte{0x0a, 0xff}}}}}, h.HttpFilters...)
		}), want: []string{rbacFilterName}},
		// --- routes (A28) ---
		{name: "bad safe_regex path", mutate: withRoute(func(r *routepb.Route) {
			r.Match = &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: "a("}}}
		}), want: []string{"safe_regex"}},
		{name: "no path specifier", mutate: withRoute(func(r *routepb.Route) {
			r.Match = &routepb.RouteMatch{}
		}), want: []string{"path"}},
		{name: "no match", mutate: withRoute(func(r *routepb.Route) {
			r.Match = nil
		}), want: []string{"match"}},
		{name: "bad runtime fraction denominator", mutate: withRoute(func(r *routepb.Route) {
			r.Match.RuntimeFraction = &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{Numerator: 1, Denominator: 7}}
		}), want: []string{"runtime_fraction"}},
		{name: "bad header regex", mutate: withRoute(func(r *routepb.Route) {
			r.Match.Headers = []*routepb.HeaderMatcher{{Name: "h", HeaderMatchSpecifier: &routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherpb.RegexMatcher{Regex: "[z-a]"}}}}
		}), want: []string{"headers[0]"}},
		{name: "header range start after end", mutate: withRoute(func(r *routepb.Route) {
			r.Match.Headers = []*routepb.HeaderMatcher{{Name: "h", HeaderMatchSpecifier: &routepb.HeaderMatcher_RangeMatch{RangeMatch: &typepb.Int64Range{Start: 10, End: 1}}}}
		}), want: []string{"headers[0]"}},
		{name: "header matcher without name", mutate: withRoute(func(r *routepb.Route) {
			r.Match.Headers = []*routepb.HeaderMatcher{{HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}}
		}), want: []string{"headers[0]"}},
		{name: "bad string_match regex", mutate: withRoute(func(r *routepb.Route) {
			r.Match.Headers = []*routepb.HeaderMatcher{{Name: "h", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: "("}}}}}}
		}), want: []string{"headers[0]"}},
		// --- RouteConfiguration over RDS (A28) ---
		{name: "rds bad safe_regex path", route: func(rc *routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].Match = &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: "a("}}}
		}, want: []string{"safe_regex"}},
		{name: "rds no path specifier", route: func(rc *routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].Match = &routepb.RouteMatch{}
		}, want: []string{"path"}},
		{name: "rds bad runtime fraction", route: func(rc *routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].Match.RuntimeFraction = &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{Numerator: 1, Denominator: 7}}
		}, want: []string{"runtime_fraction"}},
		{name: "rds header range start after end", route: func(rc *routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].Match.Headers = []*routepb.HeaderMatcher{{Name: "h", HeaderMatchSpecifier: &routepb.HeaderMatcher_RangeMatch{RangeMatch: &typepb.Int64Range{Start: 10, End: 1}}}}
		}, want: []string{"headers[0]"}},
		{name: "rds typed_per_filter_config unknown type", route: func(rc *routepb.RouteConfiguration) {
			a, err := anypb.New(&emptypb.Empty{})
			if err != nil {
				panic(err)
			}
			rc.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{"some-filter": a}
		}, want: []string{"typed_per_filter_config", "google.protobuf.Empty"}},
		{name: "rds virtual host rate_limits header_value_match without headers", route: func(rc *routepb.RouteConfiguration) {
			rc.VirtualHosts[0].RateLimits = []*routepb.RateLimit{rlOf(&routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_HeaderValueMatch_{HeaderValueMatch: &routepb.RateLimit_Action_HeaderValueMatch{DescriptorValue: "v"}}})}
		}, want: []string{"rate_limits[0].actions[0].header_value_match.headers"}},
		// --- wrong types, garbage and truncated bytes ---
		{name: "RouteConfiguration under the Listener type URL", raw: func(_ *testing.T, good *listenerpb.Listener) proto.Message {
			return &routepb.RouteConfiguration{Name: good.GetName(), VirtualHosts: []*routepb.VirtualHost{{Name: "vh", Domains: []string{"*"}}}}
		}, want: []string{"resource 0", "malformed Listener"}, unnamed: true},
		{name: "Cluster under the Listener type URL", raw: func(_ *testing.T, good *listenerpb.Listener) proto.Message {
			return &clusterpb.Cluster{Name: good.GetName(), LbPolicy: clusterpb.Cluster_RING_HASH, AltStatName: "x"}
		}, want: []string{}},
		{name: "garbage bytes", raw: func(*testing.T, *listenerpb.Listener) proto.Message {
			return withUnknown([]byte{0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff})
		}, want: []string{"resource 0", "malformed Listener"}, unnamed: true},
		{name: "truncated Listener", raw: func(t *testing.T, good *listenerpb.Listener) proto.Message {
			b, err := proto.Marshal(good)
			if err != nil {
				t.Fatal(err)
			}
			return withUnknown(b[:len(b)-3])
		}, want: []string{"resource 0", "malformed Listener"}, unnamed: true},
	}, accessLogBadCases()...)
}

// then chains two mutations.
type mutation = func(*testing.T, *listenerpb.Listener)

func (m mutFn) then(n mutation) mutation {
	return func(t *testing.T, l *listenerpb.Listener) { m(t, l); n(t, l) }
}

type mutFn mutation

// csdsResource returns the CSDS view of the resource typeURL/name of the xDS
// client whose node is nodeID, or nil.
func csdsResource(ctx context.Context, t *testing.T, c csdspb.ClientStatusDiscoveryServiceClient, nodeID, typeURL, name string) *csdspb.ClientConfig_GenericXdsConfig {
	t.Helper()
	resp, err := c.FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
	if err != nil {
		t.Fatalf("FetchClientStatus: %v", err)
	}
	for _, cfg := range resp.GetConfig() {
		if cfg.GetNode().GetId() != nodeID {
			continue
		}
		for _, g := range cfg.GetGenericXdsConfigs() {
			if g.GetTypeUrl() == typeURL && g.GetName() == name {
				return g
			}
		}
	}
	return nil
}

// TestBadInputMatrix pushes every case of badInputCases in turn to one
// serving xDS server: good -> bad (NACK naming resource and field, old
// config still serving the same connection, CSDS NACKED with the reason)
// -> good again (ACK).
func TestBadInputMatrix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)

	// CSDS on a side grpc.Server: it reports every xDS client of the process.
	admin := grpc.NewServer()
	if err := csds.Register(admin); err != nil {
		t.Fatal(err)
	}
	acc, err := grpc.NewClient("passthrough:///"+testutils.ServeGRPC(t, admin).String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { acc.Close() })
	csdsClient := csdspb.NewClientStatusDiscoveryServiceClient(acc)

	// The good Listener: chain "A" serves the client; chain "R" (which no
	// connection matches) takes its routes over RDS, so that bad
	// RouteConfigurations can be pushed too.
	goodRoute := routeConfig("rds-good", chainRoutes("R"))
	goodListener := func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{
			{name: "A"},
			{name: "R", match: &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}}, rds: goodRoute.GetName()},
		}, nil)
	}
	s, addr := startServing(ctx, t, env, goodListener, []*routepb.RouteConfiguration{goodRoute}, xdsCreds(t))
	good := goodListener(addr)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall on the good config: %v, want OK", got)
	}
	dials := c.dials.Load()

	pushGood := func(t *testing.T) {
		t.Helper()
		seen := len(env.ms.Requests())
		env.update(ctx, t, []*listenerpb.Listener{good}, []*routepb.RouteConfiguration{goodRoute})
		for _, typeURL := range []string{listenerTypeURL, routeTypeURL} {
			if _, err := env.ms.WaitForRequest(ctx, after(seen, func(r *discoverypb.DiscoveryRequest) bool {
				return r.GetTypeUrl() == typeURL && r.GetResponseNonce() != "" && r.GetErrorDetail() == nil
			})); err != nil {
				t.Fatalf("no ACK of the good %s: %v", typeURL, err)
			}
		}
	}

	cases := badInputCases()
	if len(cases) < 50 {
		t.Fatalf("%d cases, want at least 50", len(cases))
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			if tc.knownBug != "" {
				t.Skip("known bug: " + tc.knownBug)
			}
			// Whatever happens, the next case starts from the good Listener.
			defer pushGood(t)
			seen := len(env.ms.Requests())
			typeURL, name := listenerTypeURL, good.GetName()
			switch {
			case tc.route != nil:
				typeURL, name = routeTypeURL, goodRoute.GetName()
				bad := proto.Clone(goodRoute).(*routepb.RouteConfiguration)
				tc.route(bad)
				env.update(ctx, t, []*listenerpb.Listener{good}, []*routepb.RouteConfiguration{bad})
			case tc.raw != nil:
				msg := tc.raw(t, good)
				if err := env.ms.Update(ctx, e2e.Resources{NamedRaw: map[string]map[string]proto.Message{listenerTypeURL: {good.GetName(): msg}}}); err != nil {
					t.Fatalf("Update: %v", err)
				}
			default:
				bad := proto.Clone(good).(*listenerpb.Listener)
				tc.mutate(t, bad)
				env.update(ctx, t, []*listenerpb.Listener{bad}, nil)
			}
			nctx, ncancel := context.WithTimeout(ctx, 10*time.Second)
			defer ncancel()
			nack, err := env.ms.WaitForRequest(nctx, after(seen, e2e.IsNACK(typeURL)))
			if err != nil {
				t.Fatalf("no NACK: %v", err)
			}
			detail := nack.GetErrorDetail().GetMessage()
			t.Logf("error_detail: %s", detail)
			want := tc.want
			if !tc.unnamed {
				want = append([]string{name}, want...)
			}
			for _, w := range want {
				if !strings.Contains(detail, w) {
					t.Errorf("error_detail %q does not contain %q", detail, w)
				}
			}

			// The previous config still serves, on the same connection.
			if got := c.emptyCall(ctx); got != codes.OK {
				t.Errorf("EmptyCall after the NACK: %v, want OK", got)
			}
			if got := c.chainOf(ctx, t, "A"); got != "A" {
				t.Errorf("connection served by chain %q after the NACK, want A", got)
			}
			if n := c.dials.Load(); n != dials {
				t.Errorf("client dialed %d times, want %d (the connection was lost)", n, dials)
			}

			// CSDS: NACKED with the reason; the good version is still what runs.
			if !tc.unnamed {
				g := csdsResource(ctx, t, csdsClient, env.nodeID, typeURL, name)
				switch {
				case g == nil:
					t.Errorf("CSDS has no %s %q", typeURL, name)
				case g.GetClientStatus() != adminpb.ClientResourceStatus_NACKED:
					t.Errorf("CSDS status of %q: %v, want NACKED", name, g.GetClientStatus())
				default:
					for _, w := range tc.want {
						if !strings.Contains(g.GetErrorState().GetDetails(), w) {
							t.Errorf("CSDS error_state.details %q does not contain %q", g.GetErrorState().GetDetails(), w)
						}
					}
				}
			}
		})
	}
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall after the matrix: %v, want OK", got)
	}
	s.modes.expectNone(t, addr, 10*time.Millisecond)
}

// TestBadInputHugeListenerApplied: a Listener just over gRPC's default 4 MB
// receive limit (36 000 virtual hosts) is received, ACKed and applied: the
// xDS client raises that limit, where it used to break the ADS stream in a
// reconnect loop. Decoding it under -race on a loaded machine takes
// seconds, hence the longer deadline.
func TestBadInputHugeListenerApplied(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	huge := simpleListener(lis.Addr())
	withRoutes(func(_ *testing.T, rc *routepb.RouteConfiguration) {
		for i := range 36000 {
			rc.VirtualHosts = append(rc.VirtualHosts, &routepb.VirtualHost{
				Name:    fmt.Sprintf("vh%d-%s", i, strings.Repeat("x", 80)),
				Domains: []string{fmt.Sprintf("h%d.example.com", i)},
				Routes:  []*routepb.Route{nonForwarding(prefixMatch("/"))},
			})
		}
	})(t, huge)
	if size := proto.Size(huge); size <= 4<<20 {
		t.Fatalf("test Listener is %d bytes, want over gRPC's default 4 MiB limit", size)
	}
	env.update(ctx, t, []*listenerpb.Listener{huge}, nil)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	if got := newClient(t, lis.Addr(), "127.0.0.1", 0).emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall with the huge Listener applied: %v, want OK", got)
	}
}
