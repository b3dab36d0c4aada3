package rbac

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzEngineVsReference builds an RBAC config and a request from the fuzz
// bytes and checks that the engine decides as the reference evaluator does
// (Allow and MatchedPolicy), under ALLOW, DENY and LOG. Configs that Compile
// rejects are skipped; Compile must not panic on them.
func FuzzEngineVsReference(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""},
		// An inverted metadata permission, any principal; a plain request.
		{"\x00\x00\x09\x00\x01\x00\x00\x03\x00", ""},
		// A header permission on "X-User" exact "alice"; x-user: alice.
		{"\x00\x00\x04\x01\x00\x01\x07\x00\x00\x03\x00", "\x00\x00\x00\x00\x01\x00\x00\x00\x00"},
		// not(and(inverted metadata, or(requested_server_name exact ""))),
		// not(authenticated prefix "spiffe://example.org/ns/a/sa/client",
		// ignoring case); TLS with a certificate with that URI SAN.
		{"\x00\x00\x02\x00\x01\x09\x00\x01\x00\x01\x00\x0b\x00\x00\x00\x00\x02\x04\x01\x01\x11\x01\x00",
			"\x00\x00\x00\x00\x00\x01\x02\x00\x01\x01\x00\x00"},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, cfgBytes, reqBytes []byte) {
		pb := genRBAC(&fuzzBytes{b: cfgBytes})
		ri := genRequest(&fuzzBytes{b: reqBytes})
		for _, action := range []rbacpb.RBAC_Action{rbacpb.RBAC_ALLOW, rbacpb.RBAC_DENY, rbacpb.RBAC_LOG} {
			pb.Action = action
			e, err := Compile(pb)
			if err != nil {
				return
			}
			got, want := e.Evaluate(ri), refDecide(pb, ri)
			if got != want {
				t.Fatalf("Evaluate() = %+v, reference says %+v\nconfig: %s\nrequest: %s", got, want, prototext.Format(pb), describe(ri))
			}
		}
	})
}

// fuzzBytes hands out the fuzz input as small choices; past its end every
// choice is 0, so that any input gives a complete config or request.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *fuzzBytes) intn(n int) int { return int(f.byte()) % n }
func (f *fuzzBytes) bool() bool     { return f.byte()&1 == 1 }

// pick returns one of pool, or (for an index past it) a short string made of
// the next input bytes.
func (f *fuzzBytes) pick(pool []string) string {
	i := f.intn(len(pool) + 1)
	if i < len(pool) {
		return pool[i]
	}
	n := f.intn(8)
	var sb strings.Builder
	for range n {
		sb.WriteByte(f.byte())
	}
	return sb.String()
}

var (
	fuzzPolicyNames = []string{"a", "b", "", "policy-1"}
	fuzzStrings     = []string{"", "/pkg.Service/Method", "/pkg.", "/pkg.Service/", "Method", "/PKG.service/method", "pkg.Service/Method",
		"alice", "ALICE", "al", "a,b", "a", "b", "POST", "svc.example.com:8080", "SVC.Example.com", "trailers",
		"spiffe://example.org/ns/a/sa/client", "spiffe://", "client.example.org", ".example.org", "CN=client,O=Example", "cmF3", "cmF3,cmF3"}
	fuzzRegexes = []string{".*", "/pkg\\.Service/.*", "a|b", "[a-z]+", "alice", "(?i)alice", "a,b", "spiffe://.*", "CN=.*", "", "(", ".+", "(?m)^a$", "\\Ac\\z"}
	fuzzNames   = []string{"x-user", "X-User", "x-multi", "X-MULTI", "x-none", "x-data-bin", "X-Data-Bin", "te", "TE", "host", "Host",
		":authority", ":path", ":PATH", ":method", ":scheme", "grpc-x", "GRPC-Status", "content-type", "connection", ":status", "x-n", ""}
	fuzzAddrs  = []string{"10.0.0.0", "10.0.0.1", "192.168.0.1", "::1", "2001:db8::", "::ffff:10.0.0.1", "0.0.0.0", "::", "fe80::1%eth0", "bad"}
	fuzzLens   = []uint32{0, 1, 8, 16, 24, 32, 33, 64, 96, 104, 128, 200}
	fuzzPorts  = []uint32{0, 80, 1234, 8080, 65535, 70000}
	fuzzBounds = []int32{-1, 0, 80, 1234, 1235, 8080, 8081, 65535, 65536}
	fuzzInts   = []int64{-1, 0, 1, 5, 10, 100}
)

func genRBAC(f *fuzzBytes) *rbacpb.RBAC {
	pb := &rbacpb.RBAC{Policies: map[string]*rbacpb.Policy{}}
	for range f.intn(3) + 1 {
		p := &rbacpb.Policy{}
		for range f.intn(2) + 1 {
			p.Permissions = append(p.Permissions, genPermission(f, 0))
		}
		for range f.intn(2) + 1 {
			p.Principals = append(p.Principals, genPrincipal(f, 0))
		}
		pb.Policies[f.pick(fuzzPolicyNames)] = p
	}
	return pb
}

// maxDepth bounds the nesting of and/or/not.
const maxDepth = 4

func genPermission(f *fuzzBytes, depth int) *rbacpb.Permission {
	k := f.intn(16)
	if depth >= maxDepth && k < 3 {
		k = 3
	}
	switch k {
	case 0:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{Rules: genPermissions(f, depth)}}}
	case 1:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_OrRules{OrRules: &rbacpb.Permission_Set{Rules: genPermissions(f, depth)}}}
	case 2:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_NotRule{NotRule: genPermission(f, depth+1)}}
	case 3:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_Any{Any: true}}
	case 4:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_Header{Header: genHeader(f)}}
	case 5:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_UrlPath{UrlPath: &matcherpb.PathMatcher{Rule: &matcherpb.PathMatcher_Path{Path: genString(f)}}}}
	case 6:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationIp{DestinationIp: genCIDR(f)}}
	case 7:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: fuzzPorts[f.intn(len(fuzzPorts))]}}
	case 8:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPortRange{DestinationPortRange: &typepb.Int32Range{
			Start: fuzzBounds[f.intn(len(fuzzBounds))], End: fuzzBounds[f.intn(len(fuzzBounds))]}}}
	case 9:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_Metadata{Metadata: genMetadata(f)}}
	case 10:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_SourcedMetadata{SourcedMetadata: &rbacpb.SourcedMetadata{
			MetadataMatcher: genMetadata(f), MetadataSource: rbacpb.MetadataSource(f.intn(2))}}}
	case 11:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_RequestedServerName{RequestedServerName: genString(f)}}
	case 12:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_Any{Any: f.bool()}} // false is rejected
	case 13:
		return &rbacpb.Permission{} // unset: rejected
	case 14:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_Matcher{Matcher: &corepb.TypedExtensionConfig{Name: "m"}}} // rejected
	default:
		return &rbacpb.Permission{Rule: &rbacpb.Permission_NotRule{NotRule: genPermission(f, depth+1)}}
	}
}

func genPermissions(f *fuzzBytes, depth int) []*rbacpb.Permission {
	var ps []*rbacpb.Permission
	for range f.intn(3) + 1 {
		ps = append(ps, genPermission(f, depth+1))
	}
	return ps
}

func genPrincipal(f *fuzzBytes, depth int) *rbacpb.Principal {
	k := f.intn(16)
	if depth >= maxDepth && k < 3 {
		k = 3
	}
	switch k {
	case 0:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_AndIds{AndIds: &rbacpb.Principal_Set{Ids: genPrincipals(f, depth)}}}
	case 1:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_OrIds{OrIds: &rbacpb.Principal_Set{Ids: genPrincipals(f, depth)}}}
	case 2:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_NotId{NotId: genPrincipal(f, depth+1)}}
	case 3:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_Any{Any: true}}
	case 4:
		a := &rbacpb.Principal_Authenticated{}
		if f.bool() {
			a.PrincipalName = genString(f)
		}
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_Authenticated_{Authenticated: a}}
	case 5:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_SourceIp{SourceIp: genCIDR(f)}}
	case 6:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_DirectRemoteIp{DirectRemoteIp: genCIDR(f)}}
	case 7:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_RemoteIp{RemoteIp: genCIDR(f)}}
	case 8:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_Header{Header: genHeader(f)}}
	case 9:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_UrlPath{UrlPath: &matcherpb.PathMatcher{Rule: &matcherpb.PathMatcher_Path{Path: genString(f)}}}}
	case 10:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_Metadata{Metadata: genMetadata(f)}}
	case 11:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_SourcedMetadata{SourcedMetadata: &rbacpb.SourcedMetadata{
			MetadataMatcher: genMetadata(f), MetadataSource: rbacpb.MetadataSource(f.intn(2))}}}
	case 12:
		fs := &matcherpb.FilterStateMatcher{Key: f.pick(fuzzStrings)}
		if f.bool() {
			fs.Matcher = &matcherpb.FilterStateMatcher_StringMatch{StringMatch: genString(f)}
		}
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_FilterState{FilterState: fs}}
	case 13:
		return &rbacpb.Principal{} // unset: rejected
	case 14:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_Custom{Custom: &corepb.TypedExtensionConfig{Name: "c"}}} // rejected
	default:
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_NotId{NotId: genPrincipal(f, depth+1)}}
	}
}

func genPrincipals(f *fuzzBytes, depth int) []*rbacpb.Principal {
	var ps []*rbacpb.Principal
	for range f.intn(3) + 1 {
		ps = append(ps, genPrincipal(f, depth+1))
	}
	return ps
}

func genMetadata(f *fuzzBytes) *matcherpb.MetadataMatcher {
	m := &matcherpb.MetadataMatcher{Filter: f.pick(fuzzStrings), Invert: f.bool()}
	if f.bool() {
		m.Value = &matcherpb.ValueMatcher{MatchPattern: &matcherpb.ValueMatcher_PresentMatch{PresentMatch: f.bool()}}
	}
	return m
}

// genString makes a StringMatcher; some are invalid (an empty prefix, a bad
// regex, no pattern).
func genString(f *fuzzBytes) *matcherpb.StringMatcher {
	m := &matcherpb.StringMatcher{IgnoreCase: f.bool()}
	s := f.pick(fuzzStrings)
	switch f.intn(6) {
	case 0:
		m.MatchPattern = &matcherpb.StringMatcher_Exact{Exact: s}
	case 1:
		m.MatchPattern = &matcherpb.StringMatcher_Prefix{Prefix: s}
	case 2:
		m.MatchPattern = &matcherpb.StringMatcher_Suffix{Suffix: s}
	case 3:
		m.MatchPattern = &matcherpb.StringMatcher_Contains{Contains: s}
	case 4:
		m.MatchPattern = &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: f.pick(fuzzRegexes)}}
	}
	return m
}

func genHeader(f *fuzzBytes) *routepb.HeaderMatcher {
	h := &routepb.HeaderMatcher{Name: f.pick(fuzzNames), InvertMatch: f.bool(), TreatMissingHeaderAsEmpty: f.intn(4) == 0}
	s := f.pick(fuzzStrings)
	switch f.intn(9) {
	case 0:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_ExactMatch{ExactMatch: s}
	case 1:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_PrefixMatch{PrefixMatch: s}
	case 2:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_SuffixMatch{SuffixMatch: s}
	case 3:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_ContainsMatch{ContainsMatch: s}
	case 4:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherpb.RegexMatcher{Regex: f.pick(fuzzRegexes)}}
	case 5:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_StringMatch{StringMatch: genString(f)}
	case 6:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_RangeMatch{RangeMatch: &typepb.Int64Range{
			Start: fuzzInts[f.intn(len(fuzzInts))], End: fuzzInts[f.intn(len(fuzzInts))]}}
	case 7:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_PresentMatch{PresentMatch: f.bool()}
	}
	return h
}

func genCIDR(f *fuzzBytes) *corepb.CidrRange {
	r := &corepb.CidrRange{AddressPrefix: f.pick(fuzzAddrs)}
	if i := f.intn(len(fuzzLens) + 1); i < len(fuzzLens) {
		r.PrefixLen = wrapperspb.UInt32(fuzzLens[i])
	}
	return r
}

var (
	fuzzMethods    = []string{"/pkg.Service/Method", "/pkg.Service/Other", "/PKG.Service/Method", "pkg.Service/Method", "", "/", "//pkg.Service/Method", "/pkg.Service/Method?x=1", "/other.S/M"}
	fuzzAuthority  = []string{"", "svc.example.com:8080", "SVC.Example.com"}
	fuzzKeys       = []string{"x-user", "x-multi", "x-data-bin", "te", "host", ":authority", "content-type", "connection", "x-n", ":path", "x-none-bin"}
	fuzzValues     = []string{"alice", "Alice", "a", "b", "", "5", "10", "raw\x00bytes", "a,b", "trailers", "POST"}
	fuzzAddrPorts  = []string{"10.0.0.1:1234", "192.168.0.1:8080", "[::1]:80", "[::ffff:10.0.0.1]:1234", "[fe80::1%eth0]:8080", "10.0.0.0:65535", "[2001:db8::5]:1235"}
	fuzzURIs       = []string{"spiffe://example.org/ns/a/sa/client", "", "https://client.example.org/x", "spiffe://EXAMPLE.org/ns/a/sa/client"}
	fuzzDNSNames   = []string{"client.example.org", "alt.example.org", "", "CLIENT.example.org"}
	fuzzCommonName = []string{"client", "", "Client"}
)

func genRequest(f *fuzzBytes) RequestInfo {
	ri := RequestInfo{
		FullMethod: f.pick(fuzzMethods),
		Authority:  f.pick(fuzzAuthority),
		Remote:     genAddrPort(f),
		Local:      genAddrPort(f),
	}
	if n := f.intn(5); n > 0 {
		h := md{}
		for range n {
			k := fuzzKeys[f.intn(len(fuzzKeys))]
			for range f.intn(3) + 1 {
				h[k] = append(h[k], f.pick(fuzzValues))
			}
		}
		ri.Header = h
	}
	if ri.TLS = f.bool(); ri.TLS {
		switch f.intn(4) {
		case 0: // no certificate
		case 1:
			ri.PeerCertificates = []*x509.Certificate{nil}
		default:
			ri.PeerCertificates = []*x509.Certificate{genCert(f)}
		}
	}
	return ri
}

func genAddrPort(f *fuzzBytes) netip.AddrPort {
	i := f.intn(len(fuzzAddrPorts) + 1)
	if i == len(fuzzAddrPorts) {
		return netip.AddrPort{} // unknown
	}
	return netip.MustParseAddrPort(fuzzAddrPorts[i])
}

func genCert(f *fuzzBytes) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: f.pick(fuzzCommonName)}}
	if f.bool() {
		c.Subject.Organization = []string{"Example"}
	}
	for range f.intn(3) {
		u, err := url.Parse(f.pick(fuzzURIs))
		if err != nil {
			continue
		}
		c.URIs = append(c.URIs, u)
	}
	for range f.intn(3) {
		c.DNSNames = append(c.DNSNames, f.pick(fuzzDNSNames))
	}
	return c
}
