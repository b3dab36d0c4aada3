package routing_test

import (
	"strings"
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/matcher"
	"github.com/proxyless-grpc/xds/internal/routing"
)

func TestVirtualHostSelection(t *testing.T) {
	type vh struct {
		name    string
		domains []string
	}
	tests := []struct {
		desc      string
		vhosts    []vh
		authority string
		want      string // virtual host name; "" for no match
	}{
		{desc: "exact beats suffix", vhosts: []vh{{"suffix", []string{"*.foo.com"}}, {"exact", []string{"a.foo.com"}}}, authority: "a.foo.com", want: "exact"},
		{desc: "suffix beats prefix", vhosts: []vh{{"prefix", []string{"a.foo.*"}}, {"suffix", []string{"*.com"}}}, authority: "a.foo.com", want: "suffix"},
		{desc: "prefix beats star", vhosts: []vh{{"star", []string{"*"}}, {"prefix", []string{"a.*"}}}, authority: "a.foo.com", want: "prefix"},
		{desc: "star when nothing else matches", vhosts: []vh{{"exact", []string{"b.com"}}, {"star", []string{"*"}}}, authority: "a.com", want: "star"},
		{desc: "longest suffix wins", vhosts: []vh{{"short", []string{"*.com"}}, {"long", []string{"*.foo.com"}}}, authority: "a.foo.com", want: "long"},
		{desc: "longest prefix wins", vhosts: []vh{{"short", []string{"a.*"}}, {"long", []string{"a.b.*"}}}, authority: "a.b.c", want: "long"},
		{desc: "suffix wildcard without a dot", vhosts: []vh{{"v", []string{"*-bar.com"}}}, authority: "x-bar.com", want: "v"},
		{desc: "wildcard stands for at least one character (suffix)", vhosts: []vh{{"v", []string{"*.foo.com"}}}, authority: ".foo.com"},
		{desc: "wildcard stands for at least one character (prefix)", vhosts: []vh{{"v", []string{"foo.*"}}}, authority: "foo."},
		{desc: "domain case-insensitive", vhosts: []vh{{"v", []string{"Foo.COM"}}}, authority: "fOO.com", want: "v"},
		{desc: "wildcard case-insensitive", vhosts: []vh{{"v", []string{"*.Foo.COM"}}}, authority: "A.FOO.com", want: "v"},
		{desc: "long upper-case authority", vhosts: []vh{{"v", []string{"*.foo.com"}}}, authority: strings.Repeat("A", 300) + ".FOO.com", want: "v"},
		{desc: "tie between exact domains: first", vhosts: []vh{{"first", []string{"a.com"}}, {"second", []string{"A.com"}}}, authority: "a.com", want: "first"},
		{desc: "tie between suffixes: first", vhosts: []vh{{"first", []string{"*.com"}}, {"second", []string{"*.com"}}}, authority: "a.com", want: "first"},
		{desc: "tie between prefixes: first", vhosts: []vh{{"first", []string{"a.*"}}, {"second", []string{"a.*"}}}, authority: "a.com", want: "first"},
		{desc: "tie between stars: first", vhosts: []vh{{"first", []string{"*"}}, {"second", []string{"*"}}}, authority: "a.com", want: "first"},
		{desc: "port is not stripped", vhosts: []vh{{"v", []string{"foo.com"}}}, authority: "foo.com:8080"},
		{desc: "domain with port", vhosts: []vh{{"plain", []string{"foo.com"}}, {"port", []string{"foo.com:8080"}}}, authority: "foo.com:8080", want: "port"},
		{desc: "prefix wildcard covers the port", vhosts: []vh{{"v", []string{"foo.com:*"}}}, authority: "foo.com:8080", want: "v"},
		{desc: "'*' inside a domain never matches", vhosts: []vh{{"bad", []string{"a*b.com", "**", "*a*"}}, {"star", []string{"*"}}}, authority: "axb.com", want: "star"},
		{desc: "no domains never matches", vhosts: []vh{{"none", nil}}, authority: "a.com"},
		{desc: "no match", vhosts: []vh{{"v", []string{"a.com", "*.b.com", "c.*"}}}, authority: "d.com"},
		{desc: "empty authority matches star", vhosts: []vh{{"exact", []string{"a.com"}}, {"star", []string{"*"}}}, authority: "", want: "star"},
		{desc: "several domains in one virtual host", vhosts: []vh{{"a", []string{"x.com"}}, {"b", []string{"y.com", "*.x.com"}}}, authority: "w.x.com", want: "b"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			rc := routeConfig()
			for _, v := range tc.vhosts {
				rc.VirtualHosts = append(rc.VirtualHosts, vhost(v.name, v.domains, route("r", prefixMatch(""))))
			}
			r, err := routing.Compile(rc, nil)
			if err != nil {
				t.Fatalf("Compile() failed: %v", err)
			}
			got := ""
			if rt, ok := r.Match(tc.authority, "/s/m", nil); ok {
				got = rt.VirtualHost
			}
			if got != tc.want {
				t.Errorf("Match(%q) picked virtual host %q, want %q", tc.authority, got, tc.want)
			}
		})
	}
}

func withHeaders(m *routepb.RouteMatch, hs ...*routepb.HeaderMatcher) *routepb.RouteMatch {
	m.Headers = hs
	return m
}

func caseInsensitive(m *routepb.RouteMatch) *routepb.RouteMatch {
	m.CaseSensitive = wrapperspb.Bool(false)
	return m
}

func TestRouteMatching(t *testing.T) {
	tests := []struct {
		desc   string
		routes []*routepb.Route
		path   string
		h      md
		want   string // route name; "" for no match
	}{
		{desc: "prefix", routes: []*routepb.Route{route("p", prefixMatch("/svc/"))}, path: "/svc/m", want: "p"},
		{desc: "prefix no", routes: []*routepb.Route{route("p", prefixMatch("/svc/"))}, path: "/other/m"},
		{desc: "prefix case-sensitive by default", routes: []*routepb.Route{route("p", prefixMatch("/Svc/"))}, path: "/svc/m"},
		{desc: "prefix case_sensitive=false", routes: []*routepb.Route{route("p", caseInsensitive(prefixMatch("/Svc/")))}, path: "/sVC/m", want: "p"},
		{desc: "path", routes: []*routepb.Route{route("p", pathMatch("/svc/m"))}, path: "/svc/m", want: "p"},
		{desc: "path is exact", routes: []*routepb.Route{route("p", pathMatch("/svc/m"))}, path: "/svc/m2"},
		{desc: "path case_sensitive=false", routes: []*routepb.Route{route("p", caseInsensitive(pathMatch("/Svc/M")))}, path: "/svc/m", want: "p"},
		{desc: "safe_regex", routes: []*routepb.Route{route("p", regexMatch("/svc/[a-z]+"))}, path: "/svc/m", want: "p"},
		{desc: "safe_regex is a full match", routes: []*routepb.Route{route("p", regexMatch("/svc/[a-z]+"))}, path: "/svc/m/x"},
		{desc: "safe_regex ignores case_sensitive (Envoy)", routes: []*routepb.Route{route("p", caseInsensitive(regexMatch("/svc/m")))}, path: "/SVC/M"},
		{desc: "first match wins", routes: []*routepb.Route{route("first", prefixMatch("/svc")), route("second", pathMatch("/svc/m"))}, path: "/svc/m", want: "first"},
		{desc: "falls through to a later route", routes: []*routepb.Route{route("first", pathMatch("/x")), route("second", prefixMatch("/"))}, path: "/svc/m", want: "second"},
		{desc: "headers all match", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("a", "1"), headerExact("b", "2")))}, path: "/s/m", h: md{"a": {"1"}, "b": {"2"}}, want: "h"},
		{desc: "one header fails", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("a", "1"), headerExact("b", "2")))}, path: "/s/m", h: md{"a": {"1"}, "b": {"3"}}},
		{desc: "header invert", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), &routepb.HeaderMatcher{Name: "a", InvertMatch: true, HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: "1"}}))}, path: "/s/m", h: md{"a": {"2"}}, want: "h"},
		{desc: "header present", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), &routepb.HeaderMatcher{Name: "a", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}))}, path: "/s/m", h: md{"a": {""}}, want: "h"},
		{desc: "header range", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), &routepb.HeaderMatcher{Name: "a", HeaderMatchSpecifier: &routepb.HeaderMatcher_RangeMatch{RangeMatch: &typepb.Int64Range{Start: 1, End: 10}}}))}, path: "/s/m", h: md{"a": {"9"}}, want: "h"},
		{desc: "-bin header is never seen", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("a-bin", "1")))}, path: "/s/m", h: md{"a-bin": {"1"}}},
		{desc: "content-type is application/grpc when absent (A28)", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("content-type", "application/grpc")))}, path: "/s/m", want: "h"},
		{desc: "-bin header is absent for present_match false", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), &routepb.HeaderMatcher{Name: "a-bin", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: false}}))}, path: "/s/m", h: md{"a-bin": {"1"}}, want: "h"},
		{desc: "pseudo-header is never seen", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact(":authority", "a")))}, path: "/s/m", h: md{":authority": {"a"}}},
		{desc: "grpc- header is never seen", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("grpc-foo", "a")))}, path: "/s/m", h: md{"grpc-foo": {"a"}}},
		{desc: "user-agent is never seen", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("user-agent", "a")))}, path: "/s/m", h: md{"user-agent": {"a"}}},
		{desc: "content-type as sent", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("content-type", "application/grpc+proto")))}, path: "/s/m", h: md{"content-type": {"application/grpc+proto"}}, want: "h"},
		{desc: "multi-valued header joined with a comma", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("a", "1,2")))}, path: "/s/m", h: md{"a": {"1", "2"}}, want: "h"},
		{desc: "header name is case-insensitive", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("X-Env", "prod")))}, path: "/s/m", h: md{"x-env": {"prod"}}, want: "h"},
		{desc: "nil headers", routes: []*routepb.Route{route("h", withHeaders(prefixMatch("/"), headerExact("a", "1")))}, path: "/s/m"},
		{desc: "query_parameters: route ignored (A28)", routes: []*routepb.Route{route("q", &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{}, QueryParameters: []*routepb.QueryParameterMatcher{{Name: "x"}}}), route("next", prefixMatch(""))}, path: "/s/m", want: "next"},
		{desc: "grpc matcher ignored (A28)", routes: []*routepb.Route{route("g", &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{}, Grpc: &routepb.RouteMatch_GrpcRouteMatchOptions{}})}, path: "/s/m", want: "g"},
		{desc: "tls_context matcher ignored (A28)", routes: []*routepb.Route{route("t", &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{}, TlsContext: &routepb.RouteMatch_TlsContextMatchOptions{Presented: wrapperspb.Bool(true)}})}, path: "/s/m", want: "t"},
		{desc: "unsupported cluster_specifier: route ignored (A28)", routes: []*routepb.Route{
			{Name: "ch", Match: prefixMatch(""), Action: &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_ClusterHeader{ClusterHeader: "x"}}}},
			{Name: "unset", Match: prefixMatch(""), Action: &routepb.Route_Route{Route: &routepb.RouteAction{}}},
			route("next", prefixMatch("")),
		}, path: "/s/m", want: "next"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r, err := routing.Compile(routeConfig(vhost("vh", []string{"*"}, tc.routes...)), nil)
			if err != nil {
				t.Fatalf("Compile() failed: %v", err)
			}
			var h matcher.Headers
			if tc.h != nil {
				h = tc.h
			}
			got := ""
			if rt, ok := r.Match("a.com", tc.path, h); ok {
				got = rt.Name
			}
			if got != tc.want {
				t.Errorf("Match(%q, %v) picked route %q, want %q", tc.path, tc.h, got, tc.want)
			}
		})
	}
}
