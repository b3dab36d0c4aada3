package rbac

import (
	"fmt"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/matcher"
)

// nodeKind is the kind of a compiled permission or principal.
type nodeKind uint8

const (
	kindConst         nodeKind = iota // always value
	kindAnd                           // every child
	kindOr                            // any child
	kindNot                           // not children[0]
	kindHeader                        // header
	kindPath                          // str on the method
	kindDstIP                         // cidr on the local address
	kindDstPort                       // lo == local port
	kindPortRange                     // lo <= local port < hi
	kindRemoteIP                      // cidr on the peer address
	kindAuthenticated                 // TLS peer, str (if hasStr) on its identity
)

// node is a compiled Permission or Principal. A tree of nodes is matched by
// one switch, without interface calls, so that matching does not make the
// RequestInfo escape.
type node struct {
	kind     nodeKind
	value    bool // kindConst
	children []node
	header   headerMatcher
	str      matcher.StringMatcher
	hasStr   bool
	cidr     matcher.CIDRMatcher
	lo, hi   int64
}

// headerSource says where a header matcher reads its value (gRFC A41).
type headerSource uint8

const (
	fromHeader    headerSource = iota // the metadata
	fromPath                          // :path is the method
	fromMethod                        // :method is POST
	fromAuthority                     // :authority, and its alias host
	fromBinary                        // a -bin header, base64-encoded
	fromNowhere                       // hidden: treated as absent
)

type headerMatcher struct {
	m   matcher.HeaderMatcher
	src headerSource
}

// postMethod is the :method of every gRPC request: a gRPC server rejects
// other methods before RBAC runs (gRFC A41).
const postMethod = "POST"

type compiler struct {
	m *matcher.Compiler
}

func (c *compiler) policy(p *rbacpb.Policy) (policy, error) {
	// gRFC A41: "CEL fields are not supported, so Policy.condition and
	// Policy.checked_condition must cause a validation failure if present."
	if p.GetCondition() != nil {
		return policy{}, fieldpath.Errorf("condition", "CEL conditions are not supported")
	}
	if p.GetCheckedCondition() != nil {
		return policy{}, fieldpath.Errorf("checked_condition", "CEL conditions are not supported")
	}
	if len(p.GetPermissions()) == 0 {
		return policy{}, fieldpath.Errorf("permissions", "empty, want at least one")
	}
	if len(p.GetPrincipals()) == 0 {
		return policy{}, fieldpath.Errorf("principals", "empty, want at least one")
	}
	var out policy
	for i, pm := range p.GetPermissions() {
		n, err := c.permission(pm)
		if err != nil {
			return policy{}, fieldpath.In(fmt.Sprintf("permissions[%d]", i), err)
		}
		out.permissions = append(out.permissions, n)
	}
	for i, pr := range p.GetPrincipals() {
		n, err := c.principal(pr)
		if err != nil {
			return policy{}, fieldpath.In(fmt.Sprintf("principals[%d]", i), err)
		}
		out.principals = append(out.principals, n)
	}
	return out, nil
}

func (c *compiler) permission(p *rbacpb.Permission) (node, error) {
	switch r := p.GetRule().(type) {
	case *rbacpb.Permission_AndRules:
		return c.permissionSet(kindAnd, "and_rules", r.AndRules.GetRules())
	case *rbacpb.Permission_OrRules:
		return c.permissionSet(kindOr, "or_rules", r.OrRules.GetRules())
	case *rbacpb.Permission_Any:
		if !r.Any {
			return node{}, fieldpath.Errorf("any", "false, want true")
		}
		return node{kind: kindConst, value: true}, nil
	case *rbacpb.Permission_Header:
		return c.header("header", r.Header)
	case *rbacpb.Permission_UrlPath:
		return c.urlPath(r.UrlPath)
	case *rbacpb.Permission_DestinationIp:
		m, err := matcher.NewCIDRMatcher(r.DestinationIp)
		if err != nil {
			return node{}, fieldpath.In("destination_ip", err)
		}
		return node{kind: kindDstIP, cidr: m}, nil
	case *rbacpb.Permission_DestinationPort:
		if r.DestinationPort > 65535 {
			return node{}, fieldpath.Errorf("destination_port", "%d, want at most 65535", r.DestinationPort)
		}
		return node{kind: kindDstPort, lo: int64(r.DestinationPort)}, nil
	case *rbacpb.Permission_DestinationPortRange:
		rg := r.DestinationPortRange
		if rg.GetStart() > rg.GetEnd() {
			return node{}, fieldpath.Errorf("destination_port_range", "start %d is greater than end %d", rg.GetStart(), rg.GetEnd())
		}
		return node{kind: kindPortRange, lo: int64(rg.GetStart()), hi: int64(rg.GetEnd())}, nil
	case *rbacpb.Permission_Metadata:
		return metadata(r.Metadata), nil
	case *rbacpb.Permission_SourcedMetadata:
		return metadata(r.SourcedMetadata.GetMetadataMatcher()), nil
	case *rbacpb.Permission_NotRule:
		n, err := c.permission(r.NotRule)
		if err != nil {
			return node{}, fieldpath.In("not_rule", err)
		}
		return node{kind: kindNot, children: []node{n}}, nil
	case *rbacpb.Permission_RequestedServerName:
		// gRFC A41: hard-coded as the empty string; "requested_server_name
		// can match if the matcher accepts empty string".
		m, err := c.stringMatcher(r.RequestedServerName)
		if err != nil {
			return node{}, fieldpath.In("requested_server_name", err)
		}
		return node{kind: kindConst, value: m.Match("")}, nil
	case *rbacpb.Permission_Matcher:
		return node{}, fieldpath.Errorf("matcher", "extension matchers are not supported")
	case *rbacpb.Permission_UriTemplate:
		return node{}, fieldpath.Errorf("uri_template", "is not supported")
	case nil:
		return node{}, fieldpath.Errorf("rule", "unset, want a permission")
	default:
		return node{}, fieldpath.Errorf("rule", "unsupported %T", r)
	}
}

func (c *compiler) permissionSet(kind nodeKind, field string, rules []*rbacpb.Permission) (node, error) {
	if len(rules) == 0 {
		return node{}, fieldpath.Errorf(fmt.Sprintf("%s.rules", field), "empty, want at least one")
	}
	n := node{kind: kind, children: make([]node, 0, len(rules))}
	for i, r := range rules {
		ch, err := c.permission(r)
		if err != nil {
			return node{}, fieldpath.In(fmt.Sprintf("%s.rules[%d]", field, i), err)
		}
		n.children = append(n.children, ch)
	}
	return n, nil
}

func (c *compiler) principal(p *rbacpb.Principal) (node, error) {
	switch id := p.GetIdentifier().(type) {
	case *rbacpb.Principal_AndIds:
		return c.principalSet(kindAnd, "and_ids", id.AndIds.GetIds())
	case *rbacpb.Principal_OrIds:
		return c.principalSet(kindOr, "or_ids", id.OrIds.GetIds())
	case *rbacpb.Principal_Any:
		if !id.Any {
			return node{}, fieldpath.Errorf("any", "false, want true")
		}
		return node{kind: kindConst, value: true}, nil
	case *rbacpb.Principal_Authenticated_:
		n := node{kind: kindAuthenticated}
		if pn := id.Authenticated.GetPrincipalName(); pn != nil {
			m, err := c.stringMatcher(pn)
			if err != nil {
				return node{}, fieldpath.In("authenticated.principal_name", err)
			}
			n.str, n.hasStr = m, true
		}
		return n, nil
	case *rbacpb.Principal_SourceIp:
		return remoteIP("source_ip", id.SourceIp)
	case *rbacpb.Principal_DirectRemoteIp:
		return remoteIP("direct_remote_ip", id.DirectRemoteIp)
	case *rbacpb.Principal_RemoteIp:
		// gRFC A41: the same as direct_remote_ip while xff_num_trusted_hops
		// and PROXY protocol are not supported (filterchain NACKs them).
		return remoteIP("remote_ip", id.RemoteIp)
	case *rbacpb.Principal_Header:
		return c.header("header", id.Header)
	case *rbacpb.Principal_UrlPath:
		return c.urlPath(id.UrlPath)
	case *rbacpb.Principal_Metadata:
		return metadata(id.Metadata), nil
	case *rbacpb.Principal_SourcedMetadata:
		return metadata(id.SourcedMetadata.GetMetadataMatcher()), nil
	case *rbacpb.Principal_FilterState:
		// Envoy filter state, like Envoy metadata, is empty in gRPC; its
		// matcher has no invert, so it never matches.
		return node{kind: kindConst, value: false}, nil
	case *rbacpb.Principal_NotId:
		n, err := c.principal(id.NotId)
		if err != nil {
			return node{}, fieldpath.In("not_id", err)
		}
		return node{kind: kindNot, children: []node{n}}, nil
	case *rbacpb.Principal_Custom:
		return node{}, fieldpath.Errorf("custom", "extension principals are not supported")
	case nil:
		return node{}, fieldpath.Errorf("identifier", "unset, want a principal")
	default:
		return node{}, fieldpath.Errorf("identifier", "unsupported %T", id)
	}
}

func (c *compiler) principalSet(kind nodeKind, field string, ids []*rbacpb.Principal) (node, error) {
	if len(ids) == 0 {
		return node{}, fieldpath.Errorf(fmt.Sprintf("%s.ids", field), "empty, want at least one")
	}
	n := node{kind: kind, children: make([]node, 0, len(ids))}
	for i, id := range ids {
		ch, err := c.principal(id)
		if err != nil {
			return node{}, fieldpath.In(fmt.Sprintf("%s.ids[%d]", field, i), err)
		}
		n.children = append(n.children, ch)
	}
	return n, nil
}

// metadata compiles a matcher of Envoy metadata, from any source (dynamic
// or route). gRFC A41: Envoy metadata is an empty map in gRPC, so "the
// metadata matcher is guaranteed not to match"; invert inverts that result,
// so an inverted matcher always matches.
func metadata(m *matcherpb.MetadataMatcher) node {
	return node{kind: kindConst, value: m.GetInvert()}
}

func remoteIP(field string, r *corepb.CidrRange) (node, error) {
	m, err := matcher.NewCIDRMatcher(r)
	if err != nil {
		return node{}, fieldpath.In(field, err)
	}
	return node{kind: kindRemoteIP, cidr: m}, nil
}

func (c *compiler) stringMatcher(m *matcherpb.StringMatcher) (matcher.StringMatcher, error) {
	return c.m.StringMatcher(m)
}

func (c *compiler) urlPath(p *matcherpb.PathMatcher) (node, error) {
	sm := p.GetPath()
	if sm == nil {
		return node{}, fieldpath.Errorf("url_path.path", "unset, want a StringMatcher")
	}
	m, err := c.stringMatcher(sm)
	if err != nil {
		return node{}, fieldpath.In("url_path.path", err)
	}
	return node{kind: kindPath, str: m}, nil
}

// header compiles a header matcher with gRFC A41's view of the request: a
// matcher on a "grpc-" header or on :scheme is a validation failure;
// :path is the method, :method is POST, host is :authority; a binary
// ("-bin") header is seen base64-encoded; hop-by-hop and other
// pseudo-headers are absent. Names are case-insensitive: the matcher's name
// is lower-cased (ASCII) before any of these rules apply.
func (c *compiler) header(field string, h *routepb.HeaderMatcher) (node, error) {
	m, err := c.m.HeaderMatcher(h)
	if err != nil {
		return node{}, fieldpath.In(field, err)
	}
	name := m.Name()
	if strings.HasPrefix(name, "grpc-") {
		return node{}, fieldpath.Errorf(fmt.Sprintf("%s.name", field), "%q: matchers on grpc- headers are not allowed", h.GetName())
	}
	if name == ":scheme" {
		return node{}, fieldpath.Errorf(fmt.Sprintf("%s.name", field), "%q: matchers on :scheme are not allowed", h.GetName())
	}
	hm := headerMatcher{m: m}
	switch {
	case name == ":path":
		hm.src = fromPath
	case name == ":method":
		hm.src = fromMethod
	case name == ":authority" || name == "host":
		hm.src = fromAuthority
	case hiddenHeader(name):
		hm.src = fromNowhere
	case strings.HasSuffix(name, "-bin") && !isPresentMatch(h):
		// A present_match reads whether the header is there, not its
		// value: it needs no encoding.
		hm.src = fromBinary
	}
	return node{kind: kindHeader, header: hm}, nil
}

// anyMatch reports whether one of ns matches.
func anyMatch(ns []node, ri *RequestInfo) bool {
	for i := range ns {
		if ns[i].match(ri) {
			return true
		}
	}
	return false
}

func (n *node) match(ri *RequestInfo) bool {
	switch n.kind {
	case kindConst:
		return n.value
	case kindAnd:
		for i := range n.children {
			if !n.children[i].match(ri) {
				return false
			}
		}
		return true
	case kindOr:
		return anyMatch(n.children, ri)
	case kindNot:
		return !n.children[0].match(ri)
	case kindHeader:
		return n.header.match(ri)
	case kindPath:
		return n.str.Match(ri.FullMethod)
	case kindDstIP:
		return ri.Local.IsValid() && n.cidr.Contains(ri.Local.Addr())
	case kindDstPort:
		return ri.Local.IsValid() && int64(ri.Local.Port()) == n.lo
	case kindPortRange:
		p := int64(ri.Local.Port())
		return ri.Local.IsValid() && n.lo <= p && p < n.hi
	case kindRemoteIP:
		return ri.Remote.IsValid() && n.cidr.Contains(ri.Remote.Addr())
	case kindAuthenticated:
		return n.matchAuthenticated(ri)
	}
	return false
}

func (hm *headerMatcher) match(ri *RequestInfo) bool {
	var one [1]string
	var vals []string
	switch hm.src {
	case fromPath:
		one[0] = ri.FullMethod
		vals = one[:]
	case fromMethod:
		one[0] = postMethod
		vals = one[:]
	case fromAuthority:
		if ri.Authority != "" {
			one[0] = ri.Authority
			vals = one[:]
		}
	case fromHeader:
		if ri.Header != nil {
			vals = ri.Header.Get(hm.m.Name())
		}
	case fromBinary:
		if ri.Header != nil {
			vals = base64Values(ri.Header.Get(hm.m.Name()))
		}
	}
	return hm.m.MatchValues(vals)
}

func isPresentMatch(h *routepb.HeaderMatcher) bool {
	_, ok := h.GetHeaderMatchSpecifier().(*routepb.HeaderMatcher_PresentMatch)
	return ok
}

// base64Values returns the values of a binary header as gRFC A41 has RBAC
// see them, "in their base64-encoded form": as they were on the wire
// (matcher.WireBinary); gRPC hands them over decoded. It allocates.
func base64Values(vals []string) []string {
	if len(vals) == 0 {
		return nil
	}
	enc := make([]string, len(vals))
	for i, v := range vals {
		enc[i] = matcher.WireBinary(v)
	}
	return enc
}

// matchAuthenticated follows gRFC A41: a plaintext peer never matches;
// without principal_name any TLS peer matches; otherwise the leaf
// certificate's URI SANs are checked, or if it has none its DNS SANs, or if
// it has none its subject (RFC 2253); a TLS peer without a certificate is
// checked as the empty string (A41: "If there is no client certificate
// (thus no SAN nor Subject), check if "" (empty string) matches").
func (n *node) matchAuthenticated(ri *RequestInfo) bool {
	if !ri.TLS {
		return false
	}
	if !n.hasStr {
		return true
	}
	if len(ri.PeerCertificates) == 0 || ri.PeerCertificates[0] == nil {
		return n.str.Match("")
	}
	cert := ri.PeerCertificates[0]
	if len(cert.URIs) > 0 {
		for _, u := range cert.URIs {
			if n.str.Match(u.String()) {
				return true
			}
		}
		return false
	}
	if len(cert.DNSNames) > 0 {
		for _, d := range cert.DNSNames {
			if n.str.Match(d) {
				return true
			}
		}
		return false
	}
	return n.str.Match(cert.Subject.String())
}
