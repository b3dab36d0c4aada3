package admin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// This file turns configuration into words for people. Nothing here decides
// how the server behaves: it describes what the server was given, in the
// terms of gRFC A36 and the Envoy API.

// describeMatch describes a filter_chain_match as a list of conditions, all
// of which a connection must meet. The default chain is described by what
// it catches.
func describeMatch(m *listenerpb.FilterChainMatch, isDefault bool) []string {
	if isDefault {
		return []string{"connections no other filter chain matches (default_filter_chain)"}
	}
	var out []string
	if dp := m.GetDestinationPort(); dp != nil {
		out = append(out, fmt.Sprintf("destination port %d", dp.GetValue()))
	}
	if rs := m.GetPrefixRanges(); len(rs) > 0 {
		out = append(out, "destination in "+cidrList(rs))
	}
	switch m.GetSourceType() {
	case listenerpb.FilterChainMatch_SAME_IP_OR_LOOPBACK:
		out = append(out, "source is local (same IP or loopback)")
	case listenerpb.FilterChainMatch_EXTERNAL:
		out = append(out, "source is external (not local)")
	}
	if rs := m.GetDirectSourcePrefixRanges(); len(rs) > 0 {
		out = append(out, "direct source in "+cidrList(rs))
	}
	if rs := m.GetSourcePrefixRanges(); len(rs) > 0 {
		out = append(out, "source in "+cidrList(rs))
	}
	if ps := m.GetSourcePorts(); len(ps) > 0 {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = strconv.FormatUint(uint64(p), 10)
		}
		out = append(out, "source port "+strings.Join(s, " or "))
	}
	if ns := m.GetServerNames(); len(ns) > 0 {
		out = append(out, "server name "+quoteList(ns))
	}
	if tp := m.GetTransportProtocol(); tp != "" {
		out = append(out, "transport protocol "+strconv.Quote(tp))
	}
	if ap := m.GetApplicationProtocols(); len(ap) > 0 {
		out = append(out, "application protocol "+quoteList(ap))
	}
	// gRFC A36: these need listener filters, which a gRPC server does not
	// run, so a chain using them is never selected.
	if m.GetDestinationPort() != nil || len(m.GetServerNames()) > 0 || len(m.GetApplicationProtocols()) > 0 ||
		(m.GetTransportProtocol() != "" && m.GetTransportProtocol() != "raw_buffer") {
		out = append(out, "(never matches on a gRPC server: it sets destination_port, server_names, application_protocols or a transport_protocol other than raw_buffer)")
	}
	if len(out) == 0 {
		out = append(out, "every connection (empty filter_chain_match)")
	}
	return out
}

// cidrList lists the prefixes as the server matches them (an absent
// prefix_len is 0: every address).
func cidrList(rs []*corepb.CidrRange) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		p, err := filterchain.CIDRPrefix(r)
		if err != nil { // not in an applied Listener: it would have been NACKed
			s[i] = strconv.Quote(r.GetAddressPrefix())
			continue
		}
		s[i] = p.String()
	}
	return strings.Join(s, " or ")
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, " or ")
}

// describeSecurity describes what a chain's connections are secured with.
// It names certificate provider instances, never key material.
func describeSecurity(sec *filterchain.Security) (kind, detail string) {
	if sec == nil {
		return "plaintext", "no transport_socket: the server's fallback credentials apply (gRFC A29)"
	}
	id := fmt.Sprintf("server certificate from provider instance %q", sec.IdentityInstance)
	if sec.IdentityCertName != "" {
		id += fmt.Sprintf(" (certificate %q)", sec.IdentityCertName)
	}
	if !sec.MutualTLS() {
		return "TLS", id + "; clients are not asked for a certificate"
	}
	roots := fmt.Sprintf("client certificates verified with roots from provider instance %q", sec.RootInstance)
	if sec.RootCertName != "" {
		roots += fmt.Sprintf(" (certificate %q)", sec.RootCertName)
	}
	if sec.RequireClientCert {
		return "mTLS", id + "; " + roots + ", required"
	}
	return "TLS, optional client certificate", id + "; " + roots + " when given"
}

// hcmOf returns the HttpConnectionManager of a filter chain, or nil.
func hcmOf(fc *listenerpb.FilterChain) *hcmpb.HttpConnectionManager {
	for _, f := range fc.GetFilters() {
		hcm := &hcmpb.HttpConnectionManager{}
		if tc := f.GetTypedConfig(); tc != nil && tc.UnmarshalTo(hcm) == nil {
			return hcm
		}
	}
	return nil
}

// maxVirtualHosts and maxRoutes bound what the page lists of one
// RouteConfiguration; the CSDS dump has the rest.
const (
	maxVirtualHosts = 20
	maxRoutes       = 20
)

// vhostView is a virtual host in words.
type vhostView struct {
	Name    string
	Domains string
	Routes  []string
	More    int // routes not listed
}

// describeRoutes describes a RouteConfiguration's virtual hosts and routes,
// and returns how many virtual hosts it left out.
func describeRoutes(rc *routepb.RouteConfiguration) ([]vhostView, int) {
	var out []vhostView
	vhs := rc.GetVirtualHosts()
	for i, vh := range vhs {
		if i == maxVirtualHosts {
			return out, len(vhs) - i
		}
		v := vhostView{Name: vh.GetName(), Domains: quoteList(vh.GetDomains())}
		if len(vh.GetDomains()) == 0 {
			v.Domains = "(none: never matches)"
		}
		for j, r := range vh.GetRoutes() {
			if j == maxRoutes {
				v.More = len(vh.GetRoutes()) - j
				break
			}
			v.Routes = append(v.Routes, describeRoute(r))
		}
		out = append(out, v)
	}
	return out, 0
}

// describeRoute is one route: its name, what it matches and what happens.
func describeRoute(r *routepb.Route) string {
	var b strings.Builder
	if r.GetName() != "" {
		fmt.Fprintf(&b, "%q: ", r.GetName())
	}
	m := r.GetMatch()
	switch ps := m.GetPathSpecifier().(type) {
	case *routepb.RouteMatch_Prefix:
		fmt.Fprintf(&b, "prefix %q", ps.Prefix)
	case *routepb.RouteMatch_Path:
		fmt.Fprintf(&b, "path %q", ps.Path)
	case *routepb.RouteMatch_SafeRegex:
		fmt.Fprintf(&b, "path regex %q", ps.SafeRegex.GetRegex())
	default:
		b.WriteString("an unsupported path specifier (the route is ignored)")
	}
	if cs := m.GetCaseSensitive(); cs != nil && !cs.GetValue() {
		b.WriteString(" (case-insensitive)")
	}
	for _, h := range m.GetHeaders() {
		b.WriteString(", ")
		b.WriteString(describeHeader(h))
	}
	if rf := m.GetRuntimeFraction(); rf != nil {
		fmt.Fprintf(&b, ", for %s of RPCs", fraction(rf.GetDefaultValue()))
	}
	b.WriteString(" → ")
	switch a := r.GetAction().(type) {
	case *routepb.Route_NonForwardingAction:
		b.WriteString("served")
	case nil:
		b.WriteString("no action: fails with UNAVAILABLE")
	default:
		fmt.Fprintf(&b, "%s: fails with UNAVAILABLE on a server", actionName(a))
	}
	if n := len(r.GetTypedPerFilterConfig()); n > 0 {
		names := make([]string, 0, n)
		for k := range r.GetTypedPerFilterConfig() {
			names = append(names, k)
		}
		slices.Sort(names)
		b.WriteString("; filter overrides: " + quoteList(names))
	}
	return b.String()
}

func actionName(a any) string {
	switch a.(type) {
	case *routepb.Route_Route:
		return "route"
	case *routepb.Route_Redirect:
		return "redirect"
	case *routepb.Route_DirectResponse:
		return "direct_response"
	case *routepb.Route_FilterAction:
		return "filter_action"
	default:
		return "an unknown action"
	}
}

// describeHeader is one header matcher.
func describeHeader(h *routepb.HeaderMatcher) string {
	not := ""
	if h.GetInvertMatch() {
		not = "not "
	}
	name := strconv.Quote(h.GetName())
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *routepb.HeaderMatcher_ExactMatch:
		return fmt.Sprintf("header %s %sequal to %q", name, not, s.ExactMatch)
	case *routepb.HeaderMatcher_SafeRegexMatch:
		return fmt.Sprintf("header %s %smatching regex %q", name, not, s.SafeRegexMatch.GetRegex())
	case *routepb.HeaderMatcher_RangeMatch:
		return fmt.Sprintf("header %s %sin [%d, %d)", name, not, s.RangeMatch.GetStart(), s.RangeMatch.GetEnd())
	case *routepb.HeaderMatcher_PresentMatch:
		if s.PresentMatch == h.GetInvertMatch() {
			return "header " + name + " absent"
		}
		return "header " + name + " present"
	case *routepb.HeaderMatcher_PrefixMatch:
		return fmt.Sprintf("header %s %sstarting with %q", name, not, s.PrefixMatch)
	case *routepb.HeaderMatcher_SuffixMatch:
		return fmt.Sprintf("header %s %sending with %q", name, not, s.SuffixMatch)
	case *routepb.HeaderMatcher_ContainsMatch:
		return fmt.Sprintf("header %s %scontaining %q", name, not, s.ContainsMatch)
	case *routepb.HeaderMatcher_StringMatch:
		return fmt.Sprintf("header %s %s%s", name, not, describeString(s.StringMatch))
	default:
		return "header " + name + " (an unsupported matcher)"
	}
}

func describeString(m *matcherpb.StringMatcher) string {
	ci := ""
	if m.GetIgnoreCase() {
		ci = " (case-insensitive)"
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherpb.StringMatcher_Exact:
		return fmt.Sprintf("equal to %q%s", p.Exact, ci)
	case *matcherpb.StringMatcher_Prefix:
		return fmt.Sprintf("starting with %q%s", p.Prefix, ci)
	case *matcherpb.StringMatcher_Suffix:
		return fmt.Sprintf("ending with %q%s", p.Suffix, ci)
	case *matcherpb.StringMatcher_Contains:
		return fmt.Sprintf("containing %q%s", p.Contains, ci)
	case *matcherpb.StringMatcher_SafeRegex:
		return fmt.Sprintf("matching regex %q", p.SafeRegex.GetRegex())
	default:
		return "(an unsupported string matcher)"
	}
}

// fraction is a runtime fraction as a percentage, as the server applies it
// (a numerator above the denominator is 100%).
func fraction(f *typepb.FractionalPercent) string {
	fr, err := httpfilter.ParseFraction("", f, httpfilter.Fraction{})
	if err != nil || fr.Denominator() == 0 {
		return "(an invalid fraction)"
	}
	return strconv.FormatFloat(100*float64(fr.Numerator())/float64(fr.Denominator()), 'g', 4, 64) + "%"
}
