// Package routing turns a RouteConfiguration, inline in an
// HttpConnectionManager or from RDS, into an immutable Router that picks the
// virtual host of an RPC by its :authority and the route by its path and
// metadata, as gRFC A28 specifies and gRFC A36 applies to servers.
//
// The package is pure: no goroutines, no I/O, no gRPC server types. Compile
// validates everything up front (an error means NACK), so matching cannot
// fail; Match does not allocate.
package routing

import (
	"math/rand/v2"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/matcher"
	"github.com/proxyless-grpc/xds/internal/ratelimitdesc"
)

// RouteAction is the kind of action of a route.
type RouteAction uint8

const (
	// ActionUnsupported is a route whose action is unset or of a type this
	// package does not know.
	ActionUnsupported RouteAction = iota
	// ActionNonForwarding is non_forwarding_action: the only action that lets
	// an RPC through on a server (gRFC A36).
	ActionNonForwarding
	// ActionRoute is route, a client-side action; on a server an RPC matching
	// it fails with UNAVAILABLE.
	ActionRoute
	// ActionRedirect is redirect; on a server an RPC matching it fails with
	// UNAVAILABLE.
	ActionRedirect
	// ActionDirectResponse is direct_response; on a server an RPC matching it
	// fails with UNAVAILABLE.
	ActionDirectResponse
	// ActionFilter is filter_action; on a server an RPC matching it fails with
	// UNAVAILABLE.
	ActionFilter
)

// String returns the proto field name of the action.
func (a RouteAction) String() string {
	switch a {
	case ActionNonForwarding:
		return "non_forwarding_action"
	case ActionRoute:
		return "route"
	case ActionRedirect:
		return "redirect"
	case ActionDirectResponse:
		return "direct_response"
	case ActionFilter:
		return "filter_action"
	default:
		return "unsupported"
	}
}

// Route is the result of a match. Routes are owned by their Router: they
// are immutable and must not be modified.
type Route struct {
	// VirtualHost is the name of the route's virtual host.
	VirtualHost string
	// Name is the route's name; it may be empty.
	Name string
	// Index is the position of the route in its virtual host's routes.
	Index int
	// ID is the route's position among every route of its Router that can
	// match (virtual hosts in order, then their routes in order): 0 <= ID <
	// len(Router.Routes()). Per-route data precomputed by users of the
	// Router (such as HTTP filter steps) is indexed by it.
	ID int
	// Action is the kind of the route's action. Only ActionNonForwarding lets
	// an RPC through on a server; the server fails the others with
	// UNAVAILABLE (gRFC A36).
	Action RouteAction
	// FilterOverrides are the per-filter config overrides of the route merged
	// over those of its virtual host (the route's win, gRFC A39), keyed by
	// filter instance name; nil if there are none. Immutable.
	FilterOverrides map[string]httpfilter.Config
	// Metadata is the route's metadata (what Envoy's metadata rate limit
	// action reads from the route entry); nil without. Immutable.
	Metadata *corepb.Metadata
	// VirtualHostRateLimits are the rate_limits of the route's virtual
	// host, compiled; nil without. Immutable.
	VirtualHostRateLimits *ratelimitdesc.Policy
}

// Router is a compiled RouteConfiguration. It is immutable and safe for
// concurrent use.
type Router struct {
	name    string
	vhosts  []virtualHost
	domains domainIndex
	failing []*Route // routes whose action is not non_forwarding_action
	all     []*Route // every route that can match, by ID
	// randN returns a uniform number in [0, n); nil means rand.Uint64N. Tests
	// set it through export_test.go.
	randN func(n uint64) uint64
}

// virtualHost is a compiled VirtualHost: the routes that can match, in
// config order. Routes A28 says to ignore are left out.
type virtualHost struct {
	name   string
	routes []route
}

// route is a compiled Route.
type route struct {
	path    matcher.StringMatcher
	headers []headerMatcher
	// fraction is runtime_fraction's default_value in parts per million;
	// with fractionAll when there is none or it is 100%.
	fraction uint64
	out      Route
}

// fractionAll is the runtime fraction scale: one million parts.
const fractionAll = 1_000_000

// Compile validates rc (gRFC A28 as modified by A36 for servers) and builds a
// Router. Errors name the virtual host, route and field, and mean NACK. p
// parses typed_per_filter_config; nil means httpfilter.NewParser(nil).
func Compile(rc *routepb.RouteConfiguration, p *httpfilter.Parser) (*Router, error) {
	if p == nil {
		p = httpfilter.NewParser(nil)
	}
	return compile(rc, &compiler{filters: p, matchers: &matcher.Compiler{}})
}

// Name returns the RouteConfiguration's name.
func (r *Router) Name() string { return r.name }

// FailingRoutes returns, in config order, the routes that can match but whose
// action is not non_forwarding_action, so that an RPC matching them fails
// with UNAVAILABLE on a server. gRFC A36 asks the server to log a warning
// while a configuration has such routes ("configuration error logging"). The
// slice and routes belong to the Router and must not be modified.
func (r *Router) FailingRoutes() []*Route { return r.failing }

// Routes returns every route that can match, indexed by Route.ID. The slice
// and routes belong to the Router and must not be modified.
func (r *Router) Routes() []*Route { return r.all }

// Match picks the virtual host by authority and then the first route of it
// that matches path and h (which may be nil: no metadata). ok is false when
// no virtual host or no route matches. The Route is the Router's own and
// must not be modified. Match does not allocate, unless a header matcher
// reads a header with several values or a regex needs a large program.
//
// The virtual host is the one whose domains match authority most
// specifically (gRFC A28, as Envoy): an exact domain, then the longest
// suffix wildcard ("*.foo.com"), then the longest prefix wildcard ("foo.*"),
// then "*"; ties go to the first virtual host in config order. Domains and
// authority are compared ignoring ASCII case. The authority is used whole,
// port included, as Envoy does by default: "foo.com" does not match
// "foo.com:8080", so list both or use a wildcard.
//
// Header matchers see h as gRFC A28 says: binary ("-bin"), pseudo (":"),
// "grpc-", "te" and "user-agent" headers are treated as absent, and an absent
// content-type as "application/grpc".
func (r *Router) Match(authority, path string, h matcher.Headers) (rt *Route, ok bool) {
	vh := r.domains.find(authority)
	if vh < 0 {
		return nil, false
	}
	if h == nil {
		h = noHeaders{}
	}
	routes := r.vhosts[vh].routes
	for i := range routes {
		if r.matchRoute(&routes[i], path, h) {
			return &routes[i].out, true
		}
	}
	return nil, false
}

// matchRoute reports whether rt matches: path, every header matcher, then
// the runtime fraction (rolled only when the rest matched, as in Envoy).
func (r *Router) matchRoute(rt *route, path string, h matcher.Headers) bool {
	if !rt.path.Match(path) {
		return false
	}
	for i := range rt.headers {
		if !rt.headers[i].match(h) {
			return false
		}
	}
	if rt.fraction >= fractionAll {
		return true
	}
	return r.rand(fractionAll) < rt.fraction
}

func (r *Router) rand(n uint64) uint64 {
	if r.randN != nil {
		return r.randN(n)
	}
	return rand.Uint64N(n)
}

// noHeaders is the Headers of an RPC without metadata.
type noHeaders struct{}

func (noHeaders) Get(string) []string { return nil }
