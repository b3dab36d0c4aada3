package rbac

import (
	"fmt"
	"net/netip"
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Request variations of baseRI.

func withMethod(m string) RequestInfo { ri := baseRI(); ri.FullMethod = m; return ri }
func withHeader(h md) RequestInfo     { ri := baseRI(); ri.Header = h; return ri }
func withAuthority(a string) RequestInfo {
	ri := baseRI()
	ri.Authority = a
	return ri
}
func withLocal(ap string) RequestInfo {
	ri := baseRI()
	ri.Local = netip.AddrPort{}
	if ap != "" {
		ri.Local = netip.MustParseAddrPort(ap)
	}
	return ri
}
func withRemote(ap string) RequestInfo {
	ri := baseRI()
	ri.Remote = netip.AddrPort{}
	if ap != "" {
		ri.Remote = netip.MustParseAddrPort(ap)
	}
	return ri
}

// More Permission and Principal constructors.

func pMeta(invert bool) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Metadata{Metadata: &matcherpb.MetadataMatcher{Filter: "f", Invert: invert}}}
}
func pSourced(invert bool, src rbacpb.MetadataSource) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_SourcedMetadata{SourcedMetadata: &rbacpb.SourcedMetadata{
		MetadataMatcher: &matcherpb.MetadataMatcher{Filter: "f", Invert: invert}, MetadataSource: src}}}
}
func pSNI(m *matcherpb.StringMatcher) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_RequestedServerName{RequestedServerName: m}}
}
func pDstIP(c string) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationIp{DestinationIp: cidr(c)}}
}
func pDstPort(p uint32) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: p}}
}
func pPortRange(start, end int32) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPortRange{DestinationPortRange: &typepb.Int32Range{Start: start, End: end}}}
}
func idMeta(invert bool) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Metadata{Metadata: &matcherpb.MetadataMatcher{Filter: "f", Invert: invert}}}
}
func idSourced(invert bool) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_SourcedMetadata{SourcedMetadata: &rbacpb.SourcedMetadata{
		MetadataMatcher: &matcherpb.MetadataMatcher{Filter: "f", Invert: invert}}}}
}
func idFilterState() *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_FilterState{FilterState: &matcherpb.FilterStateMatcher{
		Key: "k", Matcher: &matcherpb.FilterStateMatcher_StringMatch{StringMatch: exact("")}}}}
}
func idHeader(h *routepb.HeaderMatcher) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Header{Header: h}}
}
func idPath(m *matcherpb.StringMatcher) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_UrlPath{UrlPath: &matcherpb.PathMatcher{Rule: &matcherpb.PathMatcher_Path{Path: m}}}}
}
func idSourceIP(c string) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_SourceIp{SourceIp: cidr(c)}}
}
func idDirectIP(c string) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_DirectRemoteIp{DirectRemoteIp: cidr(c)}}
}
func idRemoteIP(c string) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_RemoteIp{RemoteIp: cidr(c)}}
}

func regex(r string) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: r}}}
}
func ignoreCase(m *matcherpb.StringMatcher) *matcherpb.StringMatcher { m.IgnoreCase = true; return m }
func inverted(h *routepb.HeaderMatcher) *routepb.HeaderMatcher       { h.InvertMatch = true; return h }
func hExact(name, v string) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: v}}
}
func hPresent(name string, present bool) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: present}}
}
func hRange(name string, start, end int64) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_RangeMatch{RangeMatch: &typepb.Int64Range{Start: start, End: end}}}
}

// shape is one Permission or Principal shape with requests it matches and
// requests it does not.
type shape struct {
	desc string
	// perm or id is the shape; the other side of the policy is any.
	perm *rbacpb.Permission
	id   *rbacpb.Principal
	// match and noMatch are requests the shape matches and does not. Each
	// has at least one, unless constant.
	match, noMatch []RequestInfo
	// constant: gRFC A41 fixes the result whatever the request (never
	// matching Envoy metadata and its inversions, requested_server_name,
	// any), so only one of match and noMatch can be filled.
	constant bool
}

// permissionShapes has a row for every Permission rule, including every
// never-matching leaf plain, inverted and under not/and/or.
func permissionShapes() []shape {
	return []shape{
		{desc: "any", perm: pAny(), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "header exact", perm: pHeader(hExact("x-user", "alice")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-user": {"bob"}}), withHeader(md{})}},
		{desc: "header name in mixed case matches the lower-case key", perm: pHeader(hExact("X-User", "alice")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-user": {"bob"}})}},
		{desc: "header exact inverted: absent never matches", perm: pHeader(inverted(hExact("x-user", "alice"))),
			match: []RequestInfo{withHeader(md{"x-user": {"bob"}})}, noMatch: []RequestInfo{baseRI(), withHeader(md{})}},
		{desc: "header present_match", perm: pHeader(hPresent("x-user", true)),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{})}},
		{desc: "header present_match inverted matches absent", perm: pHeader(inverted(hPresent("x-user", true))),
			match: []RequestInfo{withHeader(md{})}, noMatch: []RequestInfo{baseRI()}},
		{desc: "header present_match false matches absent", perm: pHeader(hPresent("x-user", false)),
			match: []RequestInfo{withHeader(md{})}, noMatch: []RequestInfo{baseRI()}},
		{desc: "header prefix", perm: pHeader(&routepb.HeaderMatcher{Name: "x-user", HeaderMatchSpecifier: &routepb.HeaderMatcher_PrefixMatch{PrefixMatch: "al"}}),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-user": {"bob"}})}},
		{desc: "header suffix", perm: pHeader(&routepb.HeaderMatcher{Name: "x-user", HeaderMatchSpecifier: &routepb.HeaderMatcher_SuffixMatch{SuffixMatch: "ce"}}),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-user": {"bob"}})}},
		{desc: "header contains", perm: pHeader(&routepb.HeaderMatcher{Name: "x-user", HeaderMatchSpecifier: &routepb.HeaderMatcher_ContainsMatch{ContainsMatch: "lic"}}),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-user": {"bob"}})}},
		{desc: "header safe_regex is a full match", perm: pHeader(&routepb.HeaderMatcher{Name: "x-user", HeaderMatchSpecifier: &routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherpb.RegexMatcher{Regex: "a.*e"}}}),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-user": {"xalicex"}})}},
		{desc: "header string_match ignore_case", perm: pHeader(hdr("x-user", ignoreCase(exact("ALICE")))),
			match: []RequestInfo{baseRI(), withHeader(md{"x-user": {"Alice"}})}, noMatch: []RequestInfo{withHeader(md{"x-user": {"bob"}})}},
		{desc: "header range", perm: pHeader(hRange("x-n", 1, 10)),
			match: []RequestInfo{withHeader(md{"x-n": {"5"}})}, noMatch: []RequestInfo{withHeader(md{"x-n": {"10"}}), withHeader(md{"x-n": {"five"}}), baseRI()}},
		{desc: "header treat_missing_header_as_empty", perm: pHeader(&routepb.HeaderMatcher{Name: "x-none", TreatMissingHeaderAsEmpty: true, HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: ""}}),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-none": {"v"}})}},
		{desc: "header several values joined with a comma", perm: pHeader(hExact("x-multi", "a,b")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-multi": {"a"}})}},
		{desc: "header :path is the method", perm: pHeader(hExact(":path", "/pkg.Service/Method")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withMethod("/pkg.Service/Other")}},
		{desc: "header :PATH in upper case is :path", perm: pHeader(hExact(":PATH", "/pkg.Service/Method")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withMethod("/pkg.Service/Other")}},
		{desc: "header :method is POST", perm: pHeader(hExact(":method", "POST")), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "header :method is never GET", perm: pHeader(hExact(":method", "GET")), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "header :authority", perm: pHeader(hExact(":authority", "svc.example.com:8080")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withAuthority("other"), withAuthority("")}},
		{desc: "header Host is :authority", perm: pHeader(hExact("Host", "svc.example.com:8080")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withAuthority("other")}},
		{desc: "header te is absent", perm: pHeader(hPresent("te", true)), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "header connection is absent, inverted presence", perm: pHeader(inverted(hPresent("Connection", true))),
			match: []RequestInfo{withHeader(md{"connection": {"close"}})}, constant: true},
		{desc: "header -bin presence", perm: pHeader(hPresent("X-Data-Bin", true)),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{})}},
		{desc: "header -bin is base64 as on the wire, unpadded", perm: pHeader(hExact("x-data-bin", "cmF3,AAE")),
			match: []RequestInfo{withHeader(md{"x-data-bin": {"raw", "\x00\x01"}})}, noMatch: []RequestInfo{baseRI(), withHeader(md{})}},
		{desc: "url_path exact is case-sensitive", perm: pPath(exact("/pkg.Service/Method")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withMethod("/PKG.Service/Method"), withMethod("/pkg.Service/Method/")}},
		{desc: "url_path prefix ignore_case", perm: pPath(ignoreCase(prefix("/pkg.service/"))),
			match: []RequestInfo{baseRI(), withMethod("/PKG.SERVICE/X")}, noMatch: []RequestInfo{withMethod("/other.S/M")}},
		{desc: "url_path safe_regex", perm: pPath(regex("/pkg\\.Service/M.*")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withMethod("/x/pkg.Service/M")}},
		{desc: "destination_ip is the local address", perm: pDstIP("192.168.0.0/16"),
			match: []RequestInfo{baseRI(), withLocal("[::ffff:192.168.1.1]:80")}, noMatch: []RequestInfo{withLocal("10.0.0.1:80"), withLocal("")}},
		{desc: "destination_ip IPv6", perm: pDstIP("2001:db8::/32"),
			match: []RequestInfo{withLocal("[2001:db8::1]:80")}, noMatch: []RequestInfo{baseRI(), withLocal("[2001:db9::1]:80")}},
		{desc: "destination_port", perm: pDstPort(8080),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withLocal("192.168.0.1:8081"), withLocal("")}},
		{desc: "destination_port_range", perm: pPortRange(8000, 8081),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withLocal("192.168.0.1:8081"), withLocal("")}},
		{desc: "metadata never matches", perm: pMeta(false), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "metadata inverted always matches", perm: pMeta(true), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "sourced_metadata never matches", perm: pSourced(false, rbacpb.MetadataSource_DYNAMIC), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "sourced_metadata inverted always matches", perm: pSourced(true, rbacpb.MetadataSource_DYNAMIC), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "sourced_metadata from the route, inverted", perm: pSourced(true, rbacpb.MetadataSource_ROUTE), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "requested_server_name is empty: exact \"\"", perm: pSNI(exact("")), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "requested_server_name is empty: regex .*", perm: pSNI(regex(".*")), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "requested_server_name is empty: a name never matches", perm: pSNI(exact("svc.example.com")), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "not metadata", perm: pNot(pMeta(false)), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "not inverted metadata", perm: pNot(pMeta(true)), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "not requested_server_name", perm: pNot(pSNI(exact("svc.example.com"))), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "not not sourced_metadata", perm: pNot(pNot(pSourced(false, rbacpb.MetadataSource_DYNAMIC))), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "and_rules of inverted metadata and url_path", perm: pAnd(pMeta(true), pPath(exact("/pkg.Service/Method"))),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withMethod("/other.S/M")}},
		{desc: "and_rules with metadata never matches", perm: pAnd(pMeta(false), pAny()), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "or_rules of metadata and url_path", perm: pOr(pMeta(false), pSNI(exact("x")), pPath(exact("/pkg.Service/Method"))),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withMethod("/other.S/M")}},
		{desc: "or_rules with inverted sourced_metadata always matches", perm: pOr(pPath(exact("/x/y")), pSourced(true, rbacpb.MetadataSource_DYNAMIC)),
			match: []RequestInfo{baseRI()}, constant: true},
		{desc: "not_rule of and_rules of inverted metadata and header", perm: pNot(pAnd(pMeta(true), pHeader(hExact("X-User", "alice")))),
			match: []RequestInfo{withHeader(md{"x-user": {"bob"}})}, noMatch: []RequestInfo{baseRI()}},
		{desc: "not_rule of or_rules of requested_server_name and header", perm: pNot(pOr(pSNI(regex("svc.*")), pHeader(hExact("Host", "svc.example.com:8080")))),
			match: []RequestInfo{withAuthority("other")}, noMatch: []RequestInfo{baseRI()}},
		{desc: "nested header inside not/and/or is lower-cased", perm: pNot(pAnd(pAny(), pOr(pHeader(hExact("X-USER", "bob"))))),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-user": {"bob"}})}},
	}
}

// principalShapes has a row for every Principal identifier.
func principalShapes(t *testing.T) []shape {
	spiffe := cert(t, []string{"spiffe://example.org/ns/a/sa/client"}, []string{"client.example.org"}, "client")
	other := cert(t, []string{"spiffe://example.org/ns/b/sa/other"}, nil, "other")
	dnsOnly := cert(t, nil, []string{"client.example.org"}, "client")
	subjectOnly := cert(t, nil, nil, "client")
	tlsNoCert := withTLS(baseRI())
	return []shape{
		{desc: "any", id: idAny(), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "authenticated without principal_name: any TLS peer", id: idAuth(nil),
			match: []RequestInfo{tlsNoCert, withTLS(baseRI(), spiffe)}, noMatch: []RequestInfo{baseRI()}},
		{desc: "authenticated URI SAN", id: idAuth(exact("spiffe://example.org/ns/a/sa/client")),
			match: []RequestInfo{withTLS(baseRI(), spiffe)}, noMatch: []RequestInfo{withTLS(baseRI(), other), tlsNoCert, baseRI()}},
		{desc: "authenticated DNS SAN only without URI SANs", id: idAuth(exact("client.example.org")),
			match: []RequestInfo{withTLS(baseRI(), dnsOnly)}, noMatch: []RequestInfo{withTLS(baseRI(), spiffe)}},
		{desc: "authenticated subject only without SANs", id: idAuth(exact("CN=client,O=Example")),
			match: []RequestInfo{withTLS(baseRI(), subjectOnly)}, noMatch: []RequestInfo{withTLS(baseRI(), dnsOnly)}},
		{desc: "authenticated without a certificate is the empty string", id: idAuth(regex(".*")),
			match: []RequestInfo{tlsNoCert, withTLS(baseRI(), spiffe)}, noMatch: []RequestInfo{baseRI()}},
		{desc: "source_ip", id: idSourceIP("10.0.0.0/8"),
			match: []RequestInfo{baseRI(), withRemote("[::ffff:10.1.2.3]:1")}, noMatch: []RequestInfo{withRemote("11.0.0.1:1"), withRemote("")}},
		{desc: "direct_remote_ip", id: idDirectIP("10.0.0.1/32"),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withRemote("10.0.0.2:1"), withRemote("")}},
		{desc: "remote_ip", id: idRemoteIP("::1/128"),
			match: []RequestInfo{withRemote("[::1]:5")}, noMatch: []RequestInfo{baseRI(), withRemote("")}},
		{desc: "header", id: idHeader(hExact("X-User", "alice")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withHeader(md{"x-user": {"bob"}})}},
		{desc: "url_path", id: idPath(prefix("/pkg.")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withMethod("/other.S/M")}},
		{desc: "metadata never matches", id: idMeta(false), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "metadata inverted always matches", id: idMeta(true), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "sourced_metadata never matches", id: idSourced(false), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "sourced_metadata inverted always matches", id: idSourced(true), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "filter_state never matches", id: idFilterState(), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "not_id filter_state", id: idNot(idFilterState()), match: []RequestInfo{baseRI()}, constant: true},
		{desc: "not_id inverted metadata", id: idNot(idMeta(true)), noMatch: []RequestInfo{baseRI()}, constant: true},
		{desc: "and_ids of not_id metadata and source_ip", id: idAnd(idNot(idMeta(false)), idSourceIP("10.0.0.0/8")),
			match: []RequestInfo{baseRI()}, noMatch: []RequestInfo{withRemote("11.0.0.1:1")}},
		{desc: "or_ids of filter_state, sourced_metadata and authenticated", id: idOr(idFilterState(), idSourced(false), idAuth(nil)),
			match: []RequestInfo{tlsNoCert}, noMatch: []RequestInfo{baseRI()}},
		{desc: "not_id of and_ids of inverted metadata and header", id: idNot(idAnd(idMeta(true), idHeader(hExact("x-user", "alice")))),
			match: []RequestInfo{withHeader(md{"x-user": {"bob"}})}, noMatch: []RequestInfo{baseRI()}},
	}
}

// TestShapes checks every shape under ALLOW and DENY, on requests it
// matches and requests it does not, against hand-written expectations; the
// reference evaluator must agree with them too.
func TestShapes(t *testing.T) {
	var rows []shape
	for _, r := range permissionShapes() {
		r.desc = "permission " + r.desc
		rows = append(rows, r)
	}
	for _, r := range principalShapes(t) {
		r.desc = "principal " + r.desc
		rows = append(rows, r)
	}
	for _, tc := range rows {
		t.Run(tc.desc, func(t *testing.T) {
			if !tc.constant && (len(tc.match) == 0 || len(tc.noMatch) == 0) {
				t.Fatal("row needs requests that match and requests that do not")
			}
			perm, id := tc.perm, tc.id
			if perm == nil {
				perm = pAny()
			}
			if id == nil {
				id = idAny()
			}
			for _, action := range []rbacpb.RBAC_Action{rbacpb.RBAC_ALLOW, rbacpb.RBAC_DENY} {
				pb := &rbacpb.RBAC{Action: action, Policies: map[string]*rbacpb.Policy{"p": pol(perm, id)}}
				e := mustCompile(t, pb)
				check := func(ri RequestInfo, matches bool) {
					t.Helper()
					want := Decision{Allow: matches == (action == rbacpb.RBAC_ALLOW)}
					if matches {
						want.MatchedPolicy = "p"
					}
					if got := e.Evaluate(ri); got != want {
						t.Errorf("%v: Evaluate(%s) = %+v, want %+v", action, describe(ri), got, want)
					}
					if got := refDecide(pb, ri); got != want {
						t.Errorf("%v: reference on %s = %+v, want %+v", action, describe(ri), got, want)
					}
				}
				for _, ri := range tc.match {
					check(ri, true)
				}
				for _, ri := range tc.noMatch {
					check(ri, false)
				}
			}
		})
	}
}

// TestMalformedPath: a FullMethod without a leading "/" is denied by ALLOW
// and DENY engines whatever their policies, so that a DENY on a path cannot
// be bypassed by dropping the slash; LOG still allows it.
func TestMalformedPath(t *testing.T) {
	denyAdmin := pol(pPath(prefix("/pkg.Admin/")), idAny())
	allowAll := pol(pAny(), idAny())
	tests := []struct {
		desc   string
		action rbacpb.RBAC_Action
		policy *rbacpb.Policy
		method string
		want   Decision
	}{
		{desc: "DENY on a prefix, well-formed", action: rbacpb.RBAC_DENY, policy: denyAdmin, method: "/pkg.Admin/Delete", want: Decision{MatchedPolicy: "p"}},
		{desc: "DENY on a prefix, no leading slash", action: rbacpb.RBAC_DENY, policy: denyAdmin, method: "pkg.Admin/Delete", want: Decision{}},
		{desc: "DENY on a prefix, empty", action: rbacpb.RBAC_DENY, policy: denyAdmin, method: "", want: Decision{}},
		{desc: "DENY on a prefix, other case is another method", action: rbacpb.RBAC_DENY, policy: denyAdmin, method: "/PKG.Admin/Delete", want: Decision{Allow: true}},
		{desc: "ALLOW any, no leading slash", action: rbacpb.RBAC_ALLOW, policy: allowAll, method: "pkg.S/M", want: Decision{}},
		{desc: "LOG, no leading slash", action: rbacpb.RBAC_LOG, policy: allowAll, method: "pkg.S/M", want: Decision{Allow: true, MatchedPolicy: "p"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			pb := &rbacpb.RBAC{Action: tc.action, Policies: map[string]*rbacpb.Policy{"p": tc.policy}}
			e := mustCompile(t, pb)
			ri := withMethod(tc.method)
			if got := e.Evaluate(ri); got != tc.want {
				t.Errorf("Evaluate() = %+v, want %+v", got, tc.want)
			}
			if got := refDecide(pb, ri); got != tc.want {
				t.Errorf("reference = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestNilLeafCertificate: a chain whose leaf is nil is taken as no
// certificate, by Evaluate and by Audit, rather than crashing.
func TestNilLeafCertificate(t *testing.T) {
	events = nil
	opts := loggers(false, typedStruct(t, recorderName, nil))
	opts.AuditCondition = rbacpb.RBAC_AuditLoggingOptions_ON_DENY_AND_ALLOW
	e := mustCompile(t, &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{"p": pol(pAny(), idAuth(exact("")))}, AuditLoggingOptions: opts})
	ri := withTLS(baseRI(), nil)
	d := e.Evaluate(ri)
	if want := (Decision{MatchedPolicy: "p"}); d != want {
		t.Errorf("Evaluate() = %+v, want %+v", d, want)
	}
	e.Audit(ri, d, "filter", false)
	if len(events) != 1 || events[0].Principal != "" {
		t.Errorf("audit events = %+v, want one with no principal", events)
	}
}

// describe formats a request for a failure message.
func describe(ri RequestInfo) string {
	s := fmt.Sprintf("method %q authority %q header %v remote %v local %v tls %v", ri.FullMethod, ri.Authority, ri.Header, ri.Remote, ri.Local, ri.TLS)
	for _, c := range ri.PeerCertificates {
		if c == nil {
			s += " cert <nil>"
			continue
		}
		s += fmt.Sprintf(" cert{uris %q dns %q subject %q}", c.URIs, c.DNSNames, c.Subject.String())
	}
	return s
}
