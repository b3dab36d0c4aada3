package routing_test

import (
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/routing"
)

// thirdRoute returns a route configuration whose virtual host "vh" has r as
// its third route, after two valid ones.
func thirdRoute(r *routepb.Route) *routepb.RouteConfiguration {
	return routeConfig(vhost("vh", []string{"*"}, route("a", prefixMatch("/a")), route("b", prefixMatch("/b")), r))
}

// withMatch returns a route named "r" with match m.
func withMatch(m *routepb.RouteMatch) *routepb.Route { return route("r", m) }

// withAction returns a route named "r" matching everything, with action a.
func withAction(a *routepb.RouteAction) *routepb.Route {
	return &routepb.Route{Name: "r", Match: prefixMatch(""), Action: &routepb.Route_Route{Route: a}}
}

func weighted(wc *routepb.WeightedCluster) *routepb.RouteAction {
	return &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_WeightedClusters{WeightedClusters: wc}}
}

func clusterWeight(name string, w uint32) *routepb.WeightedCluster_ClusterWeight {
	return &routepb.WeightedCluster_ClusterWeight{Name: name, Weight: wrapperspb.UInt32(w)}
}

func fraction(n uint32, d typepb.FractionalPercent_DenominatorType) *corepb.RuntimeFractionalPercent {
	return &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{Numerator: n, Denominator: d}}
}

// TestCompileErrors has one case per NACK rule. The error must name the
// field by its path from the RouteConfiguration, and the virtual host.
func TestCompileErrors(t *testing.T) {
	tests := []struct {
		desc    string
		rc      func(t *testing.T) *routepb.RouteConfiguration
		wantErr string
	}{
		{
			desc:    "match missing (A28: not having path_specifier)",
			rc:      func(*testing.T) *routepb.RouteConfiguration { return thirdRoute(withMatch(nil)) },
			wantErr: "virtual_hosts[0].routes[2].match.path_specifier: unset",
		},
		{
			desc:    "path_specifier unset",
			rc:      func(*testing.T) *routepb.RouteConfiguration { return thirdRoute(withMatch(&routepb.RouteMatch{})) },
			wantErr: "virtual_hosts[0].routes[2].match.path_specifier: unset",
		},
		{
			desc: "path_separated_prefix unsupported",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				return thirdRoute(withMatch(&routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/a"}}))
			},
			wantErr: "virtual_hosts[0].routes[2].match.path_separated_prefix: unsupported",
		},
		{
			desc: "path_match_policy unsupported",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				return thirdRoute(withMatch(&routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_PathMatchPolicy{PathMatchPolicy: &corepb.TypedExtensionConfig{Name: "p"}}}))
			},
			wantErr: "virtual_hosts[0].routes[2].match.path_match_policy: unsupported",
		},
		{
			desc: "connect_matcher unsupported",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				return thirdRoute(withMatch(&routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_ConnectMatcher_{ConnectMatcher: &routepb.RouteMatch_ConnectMatcher{}}}))
			},
			wantErr: "virtual_hosts[0].routes[2].match.connect_matcher: unsupported",
		},
		{
			desc:    "safe_regex invalid",
			rc:      func(*testing.T) *routepb.RouteConfiguration { return thirdRoute(withMatch(regexMatch("/a("))) },
			wantErr: `virtual_hosts[0].routes[2].match.safe_regex.regex: invalid RE2 regex "/a("`,
		},
		{
			desc:    "safe_regex empty",
			rc:      func(*testing.T) *routepb.RouteConfiguration { return thirdRoute(withMatch(regexMatch(""))) },
			wantErr: "virtual_hosts[0].routes[2].match.safe_regex.regex: empty",
		},
		{
			desc: "header matcher regex invalid",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				m := prefixMatch("/")
				m.Headers = []*routepb.HeaderMatcher{headerExact("k", "v"), {Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherpb.RegexMatcher{Regex: "*"}}}}
				return thirdRoute(withMatch(m))
			},
			wantErr: "virtual_hosts[0].routes[2].match.headers[1].safe_regex_match.regex: invalid",
		},
		{
			desc: "header matcher without specifier",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				m := prefixMatch("/")
				m.Headers = []*routepb.HeaderMatcher{{Name: "k"}}
				return thirdRoute(withMatch(m))
			},
			wantErr: "virtual_hosts[0].routes[2].match.headers[0].header_match_specifier: unset",
		},
		{
			desc: "header matcher string_match invalid",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				m := prefixMatch("/")
				m.Headers = []*routepb.HeaderMatcher{{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{}}}}
				return thirdRoute(withMatch(m))
			},
			wantErr: "virtual_hosts[0].routes[2].match.headers[0].string_match.match_pattern: unset",
		},
		{
			desc: "header range start after end",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				m := prefixMatch("/")
				m.Headers = []*routepb.HeaderMatcher{{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_RangeMatch{RangeMatch: &typepb.Int64Range{Start: 5, End: 1}}}}
				return thirdRoute(withMatch(m))
			},
			wantErr: "virtual_hosts[0].routes[2].match.headers[0].range_match: start 5 is greater than end 1",
		},
		{
			desc: "runtime_fraction without default_value",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				m := prefixMatch("/")
				m.RuntimeFraction = &corepb.RuntimeFractionalPercent{RuntimeKey: "k"}
				return thirdRoute(withMatch(m))
			},
			wantErr: "virtual_hosts[0].routes[2].match.runtime_fraction.default_value: unset",
		},
		{
			desc: "runtime_fraction unknown denominator",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				m := prefixMatch("/")
				m.RuntimeFraction = fraction(1, 7)
				return thirdRoute(withMatch(m))
			},
			wantErr: "virtual_hosts[0].routes[2].match.runtime_fraction.default_value: denominator: unknown value 7",
		},
		{
			desc: "weighted_clusters without clusters",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				return thirdRoute(withAction(weighted(&routepb.WeightedCluster{})))
			},
			wantErr: "virtual_hosts[0].routes[2].route.weighted_clusters.clusters: empty",
		},
		{
			desc: "weighted_clusters weights sum to 0",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				return thirdRoute(withAction(weighted(&routepb.WeightedCluster{Clusters: []*routepb.WeightedCluster_ClusterWeight{clusterWeight("a", 0), clusterWeight("b", 0)}})))
			},
			wantErr: "virtual_hosts[0].routes[2].route.weighted_clusters.clusters: weights sum to 0",
		},
		{
			desc: "weighted_clusters weights overflow uint32",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				return thirdRoute(withAction(weighted(&routepb.WeightedCluster{Clusters: []*routepb.WeightedCluster_ClusterWeight{clusterWeight("a", 1<<31), clusterWeight("b", 1<<31)}})))
			},
			wantErr: "virtual_hosts[0].routes[2].route.weighted_clusters.clusters: weights sum to 4294967296",
		},
		{
			desc: "weighted_clusters total_weight differs from the sum (A28)",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				return thirdRoute(withAction(weighted(&routepb.WeightedCluster{TotalWeight: wrapperspb.UInt32(100), Clusters: []*routepb.WeightedCluster_ClusterWeight{clusterWeight("a", 30), clusterWeight("b", 60)}})))
			},
			wantErr: "virtual_hosts[0].routes[2].route.weighted_clusters.total_weight: 100, but the weights sum to 90",
		},
		{
			desc: "weighted cluster override invalid (A39)",
			rc: func(t *testing.T) *routepb.RouteConfiguration {
				cw := clusterWeight("a", 1)
				cw.TypedPerFilterConfig = map[string]*anypb.Any{"f": anyOf(t, wrapperspb.Int64(1))}
				return thirdRoute(withAction(weighted(&routepb.WeightedCluster{Clusters: []*routepb.WeightedCluster_ClusterWeight{cw}})))
			},
			wantErr: `virtual_hosts[0].routes[2].route.weighted_clusters.clusters[0].typed_per_filter_config["f"]: unsupported filter override config type`,
		},
		{
			desc: "route override of an unknown type (A39)",
			rc: func(t *testing.T) *routepb.RouteConfiguration {
				r := route("r", prefixMatch("/"))
				r.TypedPerFilterConfig = map[string]*anypb.Any{"f": anyOf(t, wrapperspb.Int64(1))}
				return thirdRoute(r)
			},
			wantErr: `virtual_hosts[0].routes[2].typed_per_filter_config["f"]: unsupported filter override config type`,
		},
		{
			desc: "route override rejected by its filter (A39)",
			rc: func(t *testing.T) *routepb.RouteConfiguration {
				r := route("r", prefixMatch("/"))
				r.TypedPerFilterConfig = map[string]*anypb.Any{"router": {TypeUrl: httpfilter.RouterTypeURL}}
				return thirdRoute(r)
			},
			wantErr: `virtual_hosts[0].routes[2].typed_per_filter_config["router"]: the router filter does not take per-route overrides`,
		},
		{
			desc: "virtual host override invalid, in the second virtual host (every one is validated)",
			rc: func(t *testing.T) *routepb.RouteConfiguration {
				bad := vhost("vh2", []string{"b.com"}, route("r", prefixMatch("/")))
				bad.TypedPerFilterConfig = map[string]*anypb.Any{"f": anyOf(t, wrapperspb.Int64(1))}
				return routeConfig(vhost("vh", []string{"*"}, route("r", prefixMatch("/"))), bad)
			},
			wantErr: `virtual host "vh2": virtual_hosts[1].typed_per_filter_config["f"]: unsupported filter override config type`,
		},
		{
			desc: "error in a route the matching would never reach",
			rc: func(*testing.T) *routepb.RouteConfiguration {
				return routeConfig(vhost("vh", []string{"*"}, route("all", prefixMatch("")), route("bad", regexMatch("("))))
			},
			wantErr: `virtual host "vh", route "bad": virtual_hosts[0].routes[1].match.safe_regex.regex: invalid`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			rc := tc.rc(t)
			r, err := routing.Compile(rc, newParser())
			if err == nil {
				t.Fatalf("Compile() = %v, nil; want an error containing %q", r, tc.wantErr)
			}
			if got := err.Error(); !strings.HasPrefix(got, `routing: route configuration "rc": virtual host "vh`) || !strings.Contains(got, tc.wantErr) {
				t.Errorf("Compile() error = %q, want it to name the route configuration and virtual host, and to contain %q", got, tc.wantErr)
			}
		})
	}
}

func TestCompileNil(t *testing.T) {
	if _, err := routing.Compile(nil, nil); err == nil {
		t.Errorf("Compile(nil) succeeded, want an error")
	}
}
