package filterchain

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
)

// maxMatchers bounds the normalized matchers of one Listener. Normalization
// is a Cartesian product, so a few long lists in one filter_chain_match
// could otherwise make Compile use unbounded memory and time. A Listener
// over the limit is rejected; no real deployment comes near it.
const maxMatchers = 1 << 18

// Source types, indexing per-type tables; the values are the proto's.
const (
	srcAny      = int(listenerpb.FilterChainMatch_ANY)
	srcLocal    = int(listenerpb.FilterChainMatch_SAME_IP_OR_LOOPBACK)
	srcExternal = int(listenerpb.FilterChainMatch_EXTERNAL)
)

// matcher is one normalized filter_chain_match (gRFC A36,
// "FilterChainMatch"): a single value per field, CIDRs clamped and masked,
// IPv4-mapped prefixes turned into IPv4. An invalid netip.Prefix, a port of
// -1 and a has* of false mean the field is absent. Two chains with equal
// matchers make the Listener invalid.
type matcher struct {
	dst           netip.Prefix // prefix_ranges
	directSrc     netip.Prefix // direct_source_prefix_ranges
	srcType       int          // source_type
	src           netip.Prefix // source_prefix_ranges
	srcPort       int64        // source_ports
	dstPort       int64        // destination_port
	serverName    string       // server_names
	hasServerName bool
	transport     string // transport_protocol
	alpn          string // application_protocols
	hasALPN       bool
}

// String describes the present fields, for error messages.
func (m matcher) String() string {
	var b strings.Builder
	add := func(field string, v any) {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %v", field, v)
	}
	if m.dstPort >= 0 {
		add("destination_port", m.dstPort)
	}
	if m.dst.IsValid() {
		add("prefix_ranges", m.dst)
	}
	if m.hasServerName {
		add("server_names", fmt.Sprintf("%q", m.serverName))
	}
	if m.transport != "" {
		add("transport_protocol", fmt.Sprintf("%q", m.transport))
	}
	if m.hasALPN {
		add("application_protocols", fmt.Sprintf("%q", m.alpn))
	}
	if m.directSrc.IsValid() {
		add("direct_source_prefix_ranges", m.directSrc)
	}
	add("source_type", listenerpb.FilterChainMatch_ConnectionSourceType(m.srcType))
	if m.src.IsValid() {
		add("source_prefix_ranges", m.src)
	}
	if m.srcPort >= 0 {
		add("source_ports", m.srcPort)
	}
	return "{" + b.String() + "}"
}

// appendBinary appends an unambiguous encoding of m, for chain IDs.
func (m *matcher) appendBinary(b []byte) []byte {
	for _, p := range [...]netip.Prefix{m.dst, m.directSrc, m.src} {
		switch {
		case !p.IsValid():
			b = append(b, 0)
		case p.Addr().Is4():
			a := p.Addr().As4()
			b = append(append(b, 4, byte(p.Bits())), a[:]...)
		default:
			a := p.Addr().As16()
			b = append(append(b, 6, byte(p.Bits())), a[:]...)
		}
	}
	b = append(b, byte(m.srcType))
	b = binary.AppendVarint(b, m.srcPort)
	b = binary.AppendVarint(b, m.dstPort)
	b = appendString(b, m.transport)
	b = append(b, byte(boolInt(m.hasServerName)))
	b = appendString(b, m.serverName)
	b = append(b, byte(boolInt(m.hasALPN)))
	return appendString(b, m.alpn)
}

// chainSpec is a filter chain with its normalized matchers.
type chainSpec struct {
	ref      chainRef
	chain    *FilterChain
	matchers []matcher
	// canMatch is false when a field can never match a gRPC server's
	// connection: destination_port (needs use_original_dst), server_names,
	// application_protocols, or a transport_protocol other than raw_buffer
	// (they need listener filters). Such chains take part in the duplicate
	// check but are never selected (gRFC A36, "FilterChainMatch").
	canMatch bool
}

// normalize expands m into the Cartesian product of its present fields. It
// spends the product's size from *budget and fails when that runs out.
func normalize(m *listenerpb.FilterChainMatch, budget *int) ([]matcher, bool, error) {
	st := m.GetSourceType()
	if _, ok := listenerpb.FilterChainMatch_ConnectionSourceType_name[int32(st)]; !ok {
		return nil, false, fieldErrorf("source_type", "unknown value %d", int32(st))
	}
	dsts, err := cidrs("prefix_ranges", m.GetPrefixRanges())
	if err != nil {
		return nil, false, err
	}
	directSrcs, err := cidrs("direct_source_prefix_ranges", m.GetDirectSourcePrefixRanges())
	if err != nil {
		return nil, false, err
	}
	srcs, err := cidrs("source_prefix_ranges", m.GetSourcePrefixRanges())
	if err != nil {
		return nil, false, err
	}
	n := 1
	for _, l := range []int{len(dsts), len(directSrcs), len(srcs), len(m.GetSourcePorts()), len(m.GetServerNames()), len(m.GetApplicationProtocols())} {
		n *= max(l, 1)
		if n > *budget {
			return nil, false, fieldErrorf("", "expands to more than %d normalized matchers in the Listener", maxMatchers)
		}
	}
	*budget -= n

	base := matcher{srcType: int(st), srcPort: -1, dstPort: -1, transport: m.GetTransportProtocol()}
	if dp := m.GetDestinationPort(); dp != nil {
		base.dstPort = int64(dp.GetValue())
	}
	// Matcher i takes value (i/stride)%len(vals) of each present field, the
	// stride shrinking field by field: an odometer over the fields.
	ms := make([]matcher, n)
	for i := range ms {
		ms[i] = base
	}
	stride := n
	stride = spread(ms, stride, dsts, func(x *matcher, p netip.Prefix) { x.dst = p })
	stride = spread(ms, stride, directSrcs, func(x *matcher, p netip.Prefix) { x.directSrc = p })
	stride = spread(ms, stride, srcs, func(x *matcher, p netip.Prefix) { x.src = p })
	stride = spread(ms, stride, m.GetSourcePorts(), func(x *matcher, p uint32) { x.srcPort = int64(p) })
	stride = spread(ms, stride, m.GetServerNames(), func(x *matcher, s string) { x.serverName, x.hasServerName = s, true })
	spread(ms, stride, m.GetApplicationProtocols(), func(x *matcher, s string) { x.alpn, x.hasALPN = s, true })

	canMatch := base.dstPort < 0 && len(m.GetServerNames()) == 0 && len(m.GetApplicationProtocols()) == 0 &&
		(base.transport == "" || base.transport == "raw_buffer")
	return ms, canMatch, nil
}

// spread sets one field of the Cartesian product ms: matcher i gets
// vals[(i/next)%len(vals)], where next is stride/len(vals), which it
// returns. An absent field (no vals) leaves ms and stride unchanged.
func spread[T any](ms []matcher, stride int, vals []T, set func(*matcher, T)) int {
	if len(vals) == 0 {
		return stride
	}
	next := stride / len(vals)
	for i := range ms {
		set(&ms[i], vals[(i/next)%len(vals)])
	}
	return next
}

// cidrs normalizes a list of CIDR ranges.
func cidrs(field string, ranges []*corepb.CidrRange) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(ranges))
	for i, r := range ranges {
		p, err := normalizeCIDR(r)
		if err != nil {
			return nil, inField(fmt.Sprintf("%s[%d]", field, i), err)
		}
		out = append(out, p)
	}
	return out, nil
}

// normalizeCIDR turns a CidrRange into a masked prefix (gRFC A36,
// "FilterChainMatch"): an absent prefix_len is 0, one past the address
// length is clamped to it, and bits past the prefix are cleared. A prefix
// within ::ffff:0:0/96 becomes the IPv4 prefix it denotes.
func normalizeCIDR(r *corepb.CidrRange) (netip.Prefix, error) {
	a, err := netip.ParseAddr(r.GetAddressPrefix())
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fieldErrorf("address_prefix", "%q is not an IP address", r.GetAddressPrefix())
	}
	n := int(min(r.GetPrefixLen().GetValue(), uint32(a.BitLen())))
	if a.Is4In6() && n >= 96 {
		a, n = a.Unmap(), n-96
	}
	p, err := a.Prefix(n)
	if err != nil {
		return netip.Prefix{}, fieldErrorf("prefix_len", "%d: %v", n, err)
	}
	return p, nil
}

// CIDRPrefix returns the prefix a CidrRange of a filter_chain_match
// matches, as the server applies it (see normalizeCIDR).
func CIDRPrefix(r *corepb.CidrRange) (netip.Prefix, error) { return normalizeCIDR(r) }

// checkDuplicates reports a normalized matcher shared by two chains, or
// listed twice by one chain: the most specific chain for a connection
// would not be unique (gRFC A36, "FilterChainMatch"). Chains that can never
// match are checked too. It sorts the matchers, so that duplicates are
// neighbours, and reports the duplicate whose later chain comes first.
func checkDuplicates(specs []chainSpec) error {
	type entry struct {
		m    *matcher
		spec int
	}
	n := 0
	for _, s := range specs {
		n += len(s.matchers)
	}
	all := make([]entry, 0, n)
	for i := range specs {
		for j := range specs[i].matchers {
			all = append(all, entry{m: &specs[i].matchers[j], spec: i})
		}
	}
	slices.SortFunc(all, func(a, b entry) int {
		if c := compareMatchers(a.m, b.m); c != 0 {
			return c
		}
		return cmp.Compare(a.spec, b.spec)
	})
	found := -1 // index in all of the later entry of the reported duplicate
	for k := 1; k < len(all); k++ {
		if *all[k].m == *all[k-1].m && (found < 0 || all[k].spec < all[found].spec) {
			found = k
		}
	}
	if found < 0 {
		return nil
	}
	later, earlier := all[found], all[found-1]
	other := "another of its own matchers"
	if earlier.spec != later.spec {
		other = "a matcher of " + specs[earlier.spec].ref.String()
	}
	return &ValidationError{Chain: specs[later.spec].ref.String(), Field: "filter_chain_match",
		Err: fmt.Errorf("normalized matcher %v duplicates %s", *later.m, other)}
}

// compareMatchers is a total order on matchers, most selective fields first.
func compareMatchers(a, b *matcher) int {
	if c := comparePrefix(a.dst, b.dst); c != 0 {
		return c
	}
	if c := comparePrefix(a.src, b.src); c != 0 {
		return c
	}
	if c := cmp.Compare(a.srcPort, b.srcPort); c != 0 {
		return c
	}
	if c := cmp.Compare(a.srcType, b.srcType); c != 0 {
		return c
	}
	if c := comparePrefix(a.directSrc, b.directSrc); c != 0 {
		return c
	}
	if c := cmp.Compare(a.dstPort, b.dstPort); c != 0 {
		return c
	}
	if c := cmp.Compare(a.transport, b.transport); c != 0 {
		return c
	}
	if c := compareOpt(a.serverName, a.hasServerName, b.serverName, b.hasServerName); c != 0 {
		return c
	}
	return compareOpt(a.alpn, a.hasALPN, b.alpn, b.hasALPN)
}

// compareOpt orders optional strings: absent first.
func compareOpt(a string, hasA bool, b string, hasB bool) int {
	if c := cmp.Compare(boolInt(hasA), boolInt(hasB)); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}
