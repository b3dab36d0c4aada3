package routing_test

import (
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// md is a Headers like grpc's metadata.MD.
type md map[string][]string

func (m md) Get(k string) []string { return m[k] }

func nonForwarding() *routepb.Route_NonForwardingAction {
	return &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}}
}

// route returns a named non-forwarding route with the given match.
func route(name string, m *routepb.RouteMatch) *routepb.Route {
	return &routepb.Route{Name: name, Match: m, Action: nonForwarding()}
}

func prefixMatch(p string) *routepb.RouteMatch {
	return &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: p}}
}

func pathMatch(p string) *routepb.RouteMatch {
	return &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: p}}
}

func regexMatch(re string) *routepb.RouteMatch {
	return &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: re}}}
}

func vhost(name string, domains []string, routes ...*routepb.Route) *routepb.VirtualHost {
	return &routepb.VirtualHost{Name: name, Domains: domains, Routes: routes}
}

func routeConfig(vhs ...*routepb.VirtualHost) *routepb.RouteConfiguration {
	return &routepb.RouteConfiguration{Name: "rc", VirtualHosts: vhs}
}

func headerExact(name, v string) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: v}}
}

// overrideFilter is a test HTTP filter whose override config is a
// StringValue; the parsed override is the string.
type overrideFilter struct{}

const stringValueURL = "type.googleapis.com/google.protobuf.StringValue"

func (overrideFilter) ConfigTypeURLs() []string {
	return []string{"type.googleapis.com/google.protobuf.BoolValue"}
}
func (overrideFilter) OverrideTypeURLs() []string { return []string{stringValueURL} }
func (overrideFilter) IsTerminal() bool           { return false }
func (overrideFilter) BuildStep(string, httpfilter.Config, httpfilter.Config) (httpfilter.Step, error) {
	return nil, nil
}
func (overrideFilter) ParseConfig(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, nil
}
func (overrideFilter) ParseOverride(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	v := &wrapperspb.StringValue{}
	if err := raw.UnmarshalTo(v); err != nil {
		return nil, err
	}
	return v.GetValue(), nil
}

// newParser returns a parser that knows the router and overrideFilter.
func newParser() *httpfilter.Parser {
	return httpfilter.NewParser(httpfilter.NewRegistry(httpfilter.Router{}, overrideFilter{}))
}

// overrides builds a typed_per_filter_config of StringValues.
func overrides(t testing.TB, kv map[string]string) map[string]*anypb.Any {
	out := map[string]*anypb.Any{}
	for k, v := range kv {
		a, err := anypb.New(wrapperspb.String(v))
		if err != nil {
			t.Fatal(err)
		}
		out[k] = a
	}
	return out
}

// anyOf wraps m in an Any.
func anyOf(t testing.TB, m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
