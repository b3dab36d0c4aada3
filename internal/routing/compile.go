package routing

import (
	"errors"
	"fmt"
	"maps"
	"math"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/matcher"
	"github.com/proxyless-grpc/xds/internal/ratelimitdesc"
)

// location names where a validation error is, for its message: the virtual
// host and route by name, and the field by its path from the
// RouteConfiguration (virtual_hosts[0].routes[2].match.safe_regex).
type location struct {
	vh     int
	vhName string
	route  int // -1 for a field of the virtual host
	rName  string
}

// path returns the path of field, relative to the virtual host or route;
// an empty field names the virtual host or route itself.
func (l location) path(field string) string {
	base := fmt.Sprintf("virtual_hosts[%d]", l.vh)
	if l.route >= 0 {
		base += fmt.Sprintf(".routes[%d]", l.route)
	}
	if field == "" {
		return base
	}
	return base + "." + field
}

// names returns the names of the virtual host and route.
func (l location) names() string {
	s := fmt.Sprintf("virtual host %q", l.vhName)
	if l.route >= 0 && l.rName != "" {
		s += fmt.Sprintf(", route %q", l.rName)
	}
	return s
}

// errorf returns an error about field.
func (l location) errorf(field, format string, args ...any) error {
	return fmt.Errorf("%s: %w", l.names(), fieldpath.Errorf(l.path(field), format, args...))
}

// wrap returns err, found in field, prefixed with where field is: a
// fieldpath.Error's path goes on from field's (fieldpath.In).
func (l location) wrap(field string, err error) error {
	return fmt.Errorf("%s: %w", l.names(), fieldpath.In(l.path(field), err))
}

// compiler holds what one Compile shares between virtual hosts and routes.
type compiler struct {
	filters  *httpfilter.Parser
	matchers *matcher.Compiler // shares identical regexes
}

func compile(rc *routepb.RouteConfiguration, c *compiler) (*Router, error) {
	if rc == nil {
		return nil, errors.New("routing: route configuration is missing")
	}
	r := &Router{name: rc.GetName(), vhosts: make([]virtualHost, len(rc.GetVirtualHosts()))}
	domains := make([][]string, len(rc.GetVirtualHosts()))
	for i, vhpb := range rc.GetVirtualHosts() {
		vh, err := compileVirtualHost(i, vhpb, c)
		if err != nil {
			return nil, fmt.Errorf("routing: route configuration %q: %w", rc.GetName(), err)
		}
		r.vhosts[i] = vh
		domains[i] = vhpb.GetDomains()
	}
	r.domains = newDomainIndex(domains)
	for i := range r.vhosts {
		for j := range r.vhosts[i].routes {
			rt := &r.vhosts[i].routes[j].out
			rt.ID = len(r.all)
			r.all = append(r.all, rt)
			if rt.Action != ActionNonForwarding {
				r.failing = append(r.failing, rt)
			}
		}
	}
	return r, nil
}

// compileVirtualHost validates a virtual host and its routes. A virtual host
// without domains is valid and never matches, as in gRPC's implementations.
func compileVirtualHost(i int, vhpb *routepb.VirtualHost, c *compiler) (virtualHost, error) {
	loc := location{vh: i, vhName: vhpb.GetName(), route: -1}
	// gRFC A39: overrides are validated on virtual hosts and routes.
	vhOverrides, err := c.filters.Overrides(vhpb.GetTypedPerFilterConfig())
	if err != nil {
		return virtualHost{}, loc.wrap("", err)
	}
	// Envoy validates a virtual host's rate_limits whether or not a rate
	// limit filter reads them; what it accepts and the filter cannot
	// evaluate is kept for the filter to refuse.
	vhRateLimits, err := ratelimitdesc.CompileVirtualHost(vhpb.GetRateLimits())
	if err != nil {
		return virtualHost{}, loc.wrap("rate_limits", err)
	}
	vh := virtualHost{name: vhpb.GetName()}
	for j, rpb := range vhpb.GetRoutes() {
		loc.route, loc.rName = j, rpb.GetName()
		rt, use, err := compileRoute(loc, rpb, c)
		if err != nil {
			return virtualHost{}, err
		}
		if !use {
			continue
		}
		rt.out.VirtualHost = vh.name
		rt.out.VirtualHostRateLimits = vhRateLimits
		rt.out.FilterOverrides = mergeOverrides(vhOverrides, rt.out.FilterOverrides)
		vh.routes = append(vh.routes, rt)
	}
	return vh, nil
}

// mergeOverrides returns route's overrides over vh's (gRFC A39: the most
// specific wins). The maps are shared when one side is empty; none is
// modified afterwards.
func mergeOverrides(vh, route map[string]httpfilter.Config) map[string]httpfilter.Config {
	switch {
	case len(route) == 0:
		return vh
	case len(vh) == 0:
		return route
	}
	m := make(map[string]httpfilter.Config, len(vh)+len(route))
	maps.Copy(m, vh)
	maps.Copy(m, route)
	return m
}

// compileRoute validates a route. use is false for a valid route that gRFC
// A28 says to ignore: it never matches.
func compileRoute(loc location, rpb *routepb.Route, c *compiler) (rt route, use bool, err error) {
	rt.out = Route{Name: rpb.GetName(), Index: loc.route, Metadata: rpb.GetMetadata()}
	matchOK, err := compileMatch(loc, rpb.GetMatch(), c, &rt)
	if err != nil {
		return route{}, false, err
	}
	actionOK, err := compileAction(loc, rpb, c, &rt)
	if err != nil {
		return route{}, false, err
	}
	rt.out.FilterOverrides, err = c.filters.Overrides(rpb.GetTypedPerFilterConfig())
	if err != nil {
		return route{}, false, loc.wrap("", err)
	}
	return rt, matchOK && actionOK, nil
}

// compileMatch validates a RouteMatch (gRFC A28 "Response validation", "The
// route's match field") into rt. use is false when the route is to be
// ignored because of query_parameters.
func compileMatch(loc location, m *routepb.RouteMatch, c *compiler, rt *route) (use bool, err error) {
	// "If the config explicitly sets case_sensitive to false, the client will
	// do case_insensitive matches". Envoy ignores it for safe_regex.
	ignoreCase := m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue()
	switch ps := m.GetPathSpecifier().(type) {
	case *routepb.RouteMatch_Prefix:
		rt.path = matcher.NewPrefixMatcher(ps.Prefix, ignoreCase)
	case *routepb.RouteMatch_Path:
		rt.path = matcher.NewExactMatcher(ps.Path, ignoreCase)
	case *routepb.RouteMatch_SafeRegex:
		// "With safe_regex, the ... max_program_size field will be ignored".
		rt.path, err = c.matchers.RegexMatcher(ps.SafeRegex)
		if err != nil {
			return false, loc.wrap("match.safe_regex", err)
		}
	case nil:
		// "Not having path_specifier will cause a NACK".
		return false, loc.errorf("match.path_specifier", "unset, want prefix, path or safe_regex")
	default:
		// "Options supported: prefix, path or safe_regex" and "Violating any
		// of the validation causes the response to be rejected (NACK'ed)".
		return false, loc.errorf("match."+pathSpecifierField(m), "unsupported path specifier, want prefix, path or safe_regex")
	}
	for k, hpb := range m.GetHeaders() {
		hm, err := c.matchers.HeaderMatcher(hpb)
		if err != nil {
			return false, loc.wrap(fmt.Sprintf("match.headers[%d]", k), err)
		}
		rt.headers = append(rt.headers, newHeaderMatcher(hm))
	}
	rt.fraction = fractionAll
	if rf := m.GetRuntimeFraction(); rf != nil {
		// "only default_value will be used, runtime_key will be ignored".
		rt.fraction, err = perMillion(rf.GetDefaultValue())
		if err != nil {
			return false, loc.wrap("match.runtime_fraction.default_value", err)
		}
	}
	// "the entire route containing this will be ignored, regardless of the
	// other matchers ... because gRPC does not and will not support query
	// parameters". grpc, tls_context and the fields A28 does not cover are
	// ignored: "The fields not covered by this section will all be ignored."
	return len(m.GetQueryParameters()) == 0, nil
}

// pathSpecifierField names the set path_specifier field.
func pathSpecifierField(m *routepb.RouteMatch) string {
	switch m.GetPathSpecifier().(type) {
	case *routepb.RouteMatch_ConnectMatcher_:
		return "connect_matcher"
	case *routepb.RouteMatch_PathSeparatedPrefix:
		return "path_separated_prefix"
	case *routepb.RouteMatch_PathMatchPolicy:
		return "path_match_policy"
	default:
		return "path_specifier"
	}
}

// perMillion converts a FractionalPercent to parts per million, capped at a
// million (a numerator above the denominator means always). Envoy requires
// default_value and a defined denominator.
func perMillion(f *typepb.FractionalPercent) (uint64, error) {
	if f == nil {
		return 0, errors.New("unset, want a FractionalPercent")
	}
	fr, err := httpfilter.ParseFraction("", f, httpfilter.Fraction{})
	if err != nil {
		return 0, err
	}
	return fr.Numerator() * (fractionAll / fr.Denominator()), nil
}

// compileAction validates the route's action. On a server, gRFC A36: "The
// validation must be updated to allow Route.non_forwarding_action as a valid
// action" and "a Route with an inappropriate action causes RPCs matching that
// route ... to fail with UNAVAILABLE", so redirect, direct_response,
// filter_action and an unset or unknown action are valid and only reported.
// route keeps A28's client-side rules, because "RouteConfiguration
// validation logic inherits all previous validations made for client-side
// usage" (A36); see compileRouteAction. use is false when A28 says to ignore
// the route.
func compileAction(loc location, rpb *routepb.Route, c *compiler, rt *route) (use bool, err error) {
	switch a := rpb.GetAction().(type) {
	case *routepb.Route_NonForwardingAction:
		rt.out.Action = ActionNonForwarding
	case *routepb.Route_Route:
		rt.out.Action = ActionRoute
		return compileRouteAction(loc, a.Route, c)
	case *routepb.Route_Redirect:
		rt.out.Action = ActionRedirect
	case *routepb.Route_DirectResponse:
		rt.out.Action = ActionDirectResponse
	case *routepb.Route_FilterAction:
		rt.out.Action = ActionFilter
	default:
		rt.out.Action = ActionUnsupported
	}
	return true, nil
}

// compileRouteAction applies gRFC A28's rules for a RouteAction's
// cluster_specifier. The clusters need not exist: a server never sends to
// them. cluster is valid; weighted_clusters must have weights summing to
// more than zero (and to total_weight when that deprecated field is above 0:
// "The sum of weights must add up to the total_weight"), and their
// typed_per_filter_config must be valid (gRFC A39); anything else, unset
// included, "The route containing this action will be ignored."
func compileRouteAction(loc location, ra *routepb.RouteAction, c *compiler) (use bool, err error) {
	switch cs := ra.GetClusterSpecifier().(type) {
	case *routepb.RouteAction_Cluster:
		return true, nil
	case *routepb.RouteAction_WeightedClusters:
		return true, validateWeightedClusters(loc, cs.WeightedClusters, c)
	default:
		return false, nil
	}
}

func validateWeightedClusters(loc location, wc *routepb.WeightedCluster, c *compiler) error {
	if len(wc.GetClusters()) == 0 {
		return loc.errorf("route.weighted_clusters.clusters", "empty, want at least one cluster")
	}
	var sum uint64
	for k, cw := range wc.GetClusters() {
		field := fmt.Sprintf("route.weighted_clusters.clusters[%d]", k)
		sum += uint64(cw.GetWeight().GetValue())
		if _, err := c.filters.Overrides(cw.GetTypedPerFilterConfig()); err != nil {
			return loc.wrap(field, err)
		}
	}
	if sum == 0 || sum > math.MaxUint32 {
		return loc.errorf("route.weighted_clusters.clusters", "weights sum to %d, want more than 0 and at most %d", sum, uint32(math.MaxUint32))
	}
	// Envoy: the weights must sum to total_weight "if this is greater than 0".
	if tw := wc.GetTotalWeight().GetValue(); tw > 0 && uint64(tw) != sum {
		return loc.errorf("route.weighted_clusters.total_weight", "%d, but the weights sum to %d", tw, sum)
	}
	return nil
}
