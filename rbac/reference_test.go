package rbac

// The reference evaluator: gRFC A41's tables read literally, as a recursive
// interpreter over the protos. It shares nothing with the engine (no compiled
// nodes, no internal/matcher) so that the two can be compared
// (FuzzEngineVsReference) and each checked against hand-written expectations
// (TestShapes). It assumes the config compiled: it does not validate.

import (
	"encoding/base64"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// refDecide is the decision on ri of the RBAC config pb.
func refDecide(pb *rbacpb.RBAC, ri RequestInfo) Decision {
	enforcing := pb.GetAction() != rbacpb.RBAC_LOG
	// An HTTP/2 request whose :path does not start with "/" is malformed:
	// Envoy rejects it before any filter runs, so it is never authorized.
	if enforcing && !strings.HasPrefix(ri.FullMethod, "/") {
		return Decision{}
	}
	names := make([]string, 0, len(pb.GetPolicies()))
	for n := range pb.GetPolicies() {
		names = append(names, n)
	}
	slices.Sort(names)
	matched, name := false, ""
	for _, n := range names {
		p := pb.GetPolicies()[n]
		if refAnyPermission(p.GetPermissions(), ri) && refAnyPrincipal(p.GetPrincipals(), ri) {
			matched, name = true, n
			break
		}
	}
	switch pb.GetAction() {
	case rbacpb.RBAC_ALLOW:
		return Decision{Allow: matched, MatchedPolicy: name}
	case rbacpb.RBAC_DENY:
		return Decision{Allow: !matched, MatchedPolicy: name}
	default:
		return Decision{Allow: true, MatchedPolicy: name}
	}
}

func refAnyPermission(ps []*rbacpb.Permission, ri RequestInfo) bool {
	for _, p := range ps {
		if refPermission(p, ri) {
			return true
		}
	}
	return false
}

func refAnyPrincipal(ps []*rbacpb.Principal, ri RequestInfo) bool {
	for _, p := range ps {
		if refPrincipal(p, ri) {
			return true
		}
	}
	return false
}

func refPermission(p *rbacpb.Permission, ri RequestInfo) bool {
	switch r := p.GetRule().(type) {
	case *rbacpb.Permission_AndRules:
		for _, c := range r.AndRules.GetRules() {
			if !refPermission(c, ri) {
				return false
			}
		}
		return true
	case *rbacpb.Permission_OrRules:
		return refAnyPermission(r.OrRules.GetRules(), ri)
	case *rbacpb.Permission_NotRule:
		return !refPermission(r.NotRule, ri)
	case *rbacpb.Permission_Any:
		return true
	case *rbacpb.Permission_Header:
		return refHeader(r.Header, ri)
	case *rbacpb.Permission_UrlPath:
		// url_path: "Fully-qualified RPC method name with leading slash.
		// Same as :path header".
		return refString(r.UrlPath.GetPath(), ri.FullMethod)
	case *rbacpb.Permission_DestinationIp:
		// destination_ip: "Local address for this connection".
		return refCIDR(r.DestinationIp, ri.Local)
	case *rbacpb.Permission_DestinationPort:
		// destination_port: "Local port for this connection".
		return ri.Local.IsValid() && uint32(ri.Local.Port()) == r.DestinationPort
	case *rbacpb.Permission_DestinationPortRange:
		port := int32(ri.Local.Port())
		return ri.Local.IsValid() && r.DestinationPortRange.GetStart() <= port && port < r.DestinationPortRange.GetEnd()
	case *rbacpb.Permission_Metadata:
		// metadata: "Hard-coded as empty; never matches". invert inverts
		// the match result, so an inverted one always matches.
		return r.Metadata.GetInvert()
	case *rbacpb.Permission_SourcedMetadata:
		// Envoy metadata from any source: empty, as above.
		return r.SourcedMetadata.GetMetadataMatcher().GetInvert()
	case *rbacpb.Permission_RequestedServerName:
		// requested_server_name: "Hard-coded as empty string".
		return refString(r.RequestedServerName, "")
	}
	panic("reference: unexpected permission " + p.String())
}

func refPrincipal(p *rbacpb.Principal, ri RequestInfo) bool {
	switch id := p.GetIdentifier().(type) {
	case *rbacpb.Principal_AndIds:
		for _, c := range id.AndIds.GetIds() {
			if !refPrincipal(c, ri) {
				return false
			}
		}
		return true
	case *rbacpb.Principal_OrIds:
		return refAnyPrincipal(id.OrIds.GetIds(), ri)
	case *rbacpb.Principal_NotId:
		return !refPrincipal(id.NotId, ri)
	case *rbacpb.Principal_Any:
		return true
	case *rbacpb.Principal_Authenticated_:
		return refAuthenticated(id.Authenticated, ri)
	case *rbacpb.Principal_SourceIp:
		// source_ip, direct_remote_ip, remote_ip: "Peer address for this
		// connection".
		return refCIDR(id.SourceIp, ri.Remote)
	case *rbacpb.Principal_DirectRemoteIp:
		return refCIDR(id.DirectRemoteIp, ri.Remote)
	case *rbacpb.Principal_RemoteIp:
		return refCIDR(id.RemoteIp, ri.Remote)
	case *rbacpb.Principal_Header:
		return refHeader(id.Header, ri)
	case *rbacpb.Principal_UrlPath:
		return refString(id.UrlPath.GetPath(), ri.FullMethod)
	case *rbacpb.Principal_Metadata:
		return id.Metadata.GetInvert()
	case *rbacpb.Principal_SourcedMetadata:
		return id.SourcedMetadata.GetMetadataMatcher().GetInvert()
	case *rbacpb.Principal_FilterState:
		// Envoy filter state is empty in gRPC, and its matcher has no invert.
		return false
	}
	panic("reference: unexpected principal " + p.String())
}

// refAuthenticated follows A41's four steps for principal_name.
func refAuthenticated(a *rbacpb.Principal_Authenticated, ri RequestInfo) bool {
	if !ri.TLS {
		return false
	}
	name := a.GetPrincipalName()
	if name == nil {
		return true // "Authenticated is said to match if the connection uses TLS"
	}
	if len(ri.PeerCertificates) == 0 || ri.PeerCertificates[0] == nil {
		return refString(name, "") // step 4
	}
	c := ri.PeerCertificates[0]
	var ids []string
	switch {
	case len(c.URIs) > 0: // step 1
		for _, u := range c.URIs {
			ids = append(ids, u.String())
		}
	case len(c.DNSNames) > 0: // step 2
		ids = c.DNSNames
	default: // step 3
		ids = []string{c.Subject.String()}
	}
	for _, id := range ids {
		if refString(name, id) {
			return true
		}
	}
	return false
}

// refHeaderValues returns the values of the header named name (lower-case)
// as A41 describes the request, and whether it is present.
func refHeaderValues(name string, ri RequestInfo) []string {
	switch name {
	case ":path":
		return []string{ri.FullMethod}
	case ":method":
		return []string{"POST"}
	case ":authority", "host":
		if ri.Authority == "" {
			return nil
		}
		return []string{ri.Authority}
	case "te", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return nil // hop-by-hop: "considered to not be present"
	}
	if strings.HasPrefix(name, ":") || ri.Header == nil {
		return nil
	}
	vals := ri.Header.Get(name)
	if strings.HasSuffix(name, "-bin") {
		// "Binary headers are represented in their base64-encoded form",
		// as "received on-the-wire": gRPC clients send it unpadded.
		enc := make([]string, len(vals))
		for i, v := range vals {
			enc[i] = base64.RawStdEncoding.EncodeToString([]byte(v))
		}
		vals = enc
	}
	return vals
}

// refHeader is Envoy's HeaderMatcher over A41's view of the request.
func refHeader(h *routepb.HeaderMatcher, ri RequestInfo) bool {
	vals := refHeaderValues(refLower(h.GetName()), ri)
	var value string
	switch {
	case len(vals) > 0:
		// "Multi-valued metadata is represented as the concatenation of the
		// values along with a , (comma, no added spaces) separator".
		value = strings.Join(vals, ",")
	case h.GetTreatMissingHeaderAsEmpty():
		value = ""
	default:
		// "If a header is not present, HeaderMatch will not match except
		// for present_match when present_match == invert_match."
		pm, ok := h.GetHeaderMatchSpecifier().(*routepb.HeaderMatcher_PresentMatch)
		return ok && pm.PresentMatch == h.GetInvertMatch()
	}
	var match bool
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *routepb.HeaderMatcher_ExactMatch:
		match = value == s.ExactMatch
	case *routepb.HeaderMatcher_PrefixMatch:
		match = strings.HasPrefix(value, s.PrefixMatch)
	case *routepb.HeaderMatcher_SuffixMatch:
		match = strings.HasSuffix(value, s.SuffixMatch)
	case *routepb.HeaderMatcher_ContainsMatch:
		match = strings.Contains(value, s.ContainsMatch)
	case *routepb.HeaderMatcher_SafeRegexMatch:
		match = refFullMatch(s.SafeRegexMatch.GetRegex(), value)
	case *routepb.HeaderMatcher_StringMatch:
		match = refString(s.StringMatch, value)
	case *routepb.HeaderMatcher_RangeMatch:
		n, err := strconv.ParseInt(value, 10, 64)
		match = err == nil && s.RangeMatch.GetStart() <= n && n < s.RangeMatch.GetEnd()
	case *routepb.HeaderMatcher_PresentMatch:
		match = s.PresentMatch
	}
	return match != h.GetInvertMatch()
}

// refString is Envoy's StringMatcher: ignore_case folds ASCII only and does
// not apply to safe_regex.
func refString(m *matcherpb.StringMatcher, s string) bool {
	fold := func(x string) string { return x }
	if m.GetIgnoreCase() {
		fold = refLower
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherpb.StringMatcher_Exact:
		return fold(s) == fold(p.Exact)
	case *matcherpb.StringMatcher_Prefix:
		return strings.HasPrefix(fold(s), fold(p.Prefix))
	case *matcherpb.StringMatcher_Suffix:
		return strings.HasSuffix(fold(s), fold(p.Suffix))
	case *matcherpb.StringMatcher_Contains:
		return strings.Contains(fold(s), fold(p.Contains))
	case *matcherpb.StringMatcher_SafeRegex:
		return refFullMatch(p.SafeRegex.GetRegex(), s)
	}
	panic("reference: unexpected string matcher " + m.String())
}

// refFullMatch reports whether the RE2 regex expr matches all of s: the
// leftmost-longest match spans s exactly when some match does.
func refFullMatch(expr, s string) bool {
	re := regexp.MustCompile(expr)
	re.Longest()
	loc := re.FindStringIndex(s)
	return loc != nil && loc[0] == 0 && loc[1] == len(s)
}

// refLower lower-cases ASCII letters only.
func refLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// refCIDR reports whether the address of ap is in r, comparing the first
// prefix_len bits (clamped to the family's length; unset is 0). IPv4-mapped
// IPv6 addresses, in r or ap, are their IPv4 address; zones are ignored; an
// unknown address is in no range.
func refCIDR(r *corepb.CidrRange, ap netip.AddrPort) bool {
	if !ap.IsValid() {
		return false
	}
	want := netip.MustParseAddr(r.GetAddressPrefix()).Unmap()
	got := ap.Addr().Unmap().WithZone("")
	if want.BitLen() != got.BitLen() {
		return false
	}
	n := min(int(r.GetPrefixLen().GetValue()), want.BitLen())
	w, g := want.AsSlice(), got.AsSlice()
	for i := range n {
		bit := func(b []byte) byte { return b[i/8] >> (7 - i%8) & 1 }
		if bit(w) != bit(g) {
			return false
		}
	}
	return true
}
