package filterchain

import (
	"net/netip"
)

// lookupTable selects a chain in stages, as Envoy does: destination IP,
// transport protocol, directly connected source IP, source type, source IP,
// source port. (Destination port, server name and application protocol
// stages are left out: only chains without those fields get here.) At each
// IP stage the longest matching prefix wins and the search continues only
// below it: there is no fallback to a shorter prefix when a later stage
// fails. Each stage is a trie or an array indexed by the previous stage's
// result, so a lookup costs O(address bits). Immutable after buildLookup.
type lookupTable struct {
	dst       ipStage     // values index transport
	transport [][2]int32  // by transport: "" and "raw_buffer"; values index directSrc, -1 when absent
	directSrc []ipStage   // values index types
	types     [][3]int32  // by source type; values index src, -1 when absent
	src       []ipStage   // values index ports
	ports     []portStage // the last stage
}

// ipStage holds one trie per address family.
type ipStage struct{ fam [2]trie }

func (s *ipStage) lookup(fam int, k key128) int32 { return s.fam[fam].lookup(k) }

// Transport protocol slots.
const (
	tpAny       = 0 // transport_protocol ""
	tpRawBuffer = 1 // transport_protocol "raw_buffer"
)

// portStage maps source ports to chains; any is the chain without
// source_ports, or nil.
type portStage struct {
	exact map[uint16]*FilterChain
	any   *FilterChain
}

// find returns the matching chain, or nil. It does not allocate.
func (l *lookupTable) find(src, dst netip.AddrPort) *FilterChain {
	sa, da := src.Addr().Unmap().WithZone(""), dst.Addr().Unmap().WithZone("")
	if !sa.IsValid() || !da.IsValid() {
		return nil
	}
	df, dk := addrKey(da)
	sf, sk := addrKey(sa)
	i := l.dst.lookup(df, dk)
	if i < 0 {
		return nil
	}
	// A connection's transport protocol is always raw_buffer: a chain that
	// names it is more specific than one that leaves it empty.
	tp := &l.transport[i]
	if i = tp[tpRawBuffer]; i < 0 {
		if i = tp[tpAny]; i < 0 {
			return nil
		}
	}
	if i = l.directSrc[i].lookup(sf, sk); i < 0 {
		return nil
	}
	// gRFC A36 / Envoy: a specific source type that matches beats ANY.
	types := &l.types[i]
	st := srcExternal
	if sa == da || sa.IsLoopback() {
		st = srcLocal
	}
	if i = types[st]; i < 0 {
		if i = types[srcAny]; i < 0 {
			return nil
		}
	}
	if i = l.src[i].lookup(sf, sk); i < 0 {
		return nil
	}
	p := &l.ports[i]
	if c, ok := p.exact[src.Port()]; ok {
		return c
	}
	return p.any
}

// The build* types are the mutable tree buildLookup fills before flattening
// it into a lookupTable. An absent prefix field is stored under the /0 of
// both families, so at each IP stage it competes with an explicit /0 at the
// same specificity (gRFC A36 still counts the two as different matchers).
type (
	dstBuild       map[netip.Prefix]*transportBuild
	transportBuild [2]directSrcBuild // by tpAny, tpRawBuffer
	directSrcBuild map[netip.Prefix]*typesBuild
	typesBuild     [3]srcBuild
	srcBuild       map[netip.Prefix]*portsBuild
	portsBuild     struct {
		exact map[uint16]candidate
		any   candidate
	}
)

// candidate is a chain in a port slot. When a chain with an absent prefix
// and one with an explicit /0 land in the same slot (the only way two chains
// can share one after the duplicate check), the one with explicit prefixes
// at earlier stages wins; rank orders them.
type candidate struct {
	chain *FilterChain
	rank  uint8
}

func (c candidate) beats(o candidate) bool { return o.chain == nil || c.rank > o.rank }

// prefixes returns the keys an IP field is stored under: itself, or the /0
// of both families when absent.
func prefixes(p netip.Prefix) []netip.Prefix {
	if p.IsValid() {
		return []netip.Prefix{p}
	}
	return []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 0), netip.PrefixFrom(netip.IPv6Unspecified(), 0)}
}

func getOrNew[V any](m map[netip.Prefix]*V, k netip.Prefix) *V {
	v, ok := m[k]
	if !ok {
		v = new(V)
		m[k] = v
	}
	return v
}

// buildLookup compiles the matchers of the chains that can match.
func buildLookup(specs []chainSpec) lookupTable {
	root := dstBuild{}
	for _, s := range specs {
		if !s.canMatch {
			continue
		}
		for _, m := range s.matchers {
			root.add(s.chain, m)
		}
	}
	var l lookupTable
	l.dst = l.flattenDst(root)
	return l
}

func (b dstBuild) add(chain *FilterChain, m matcher) {
	if m.srcPort > 0xffff {
		return // no connection comes from such a port
	}
	var rank uint8
	for i, p := range []netip.Prefix{m.dst, m.directSrc, m.src} {
		if p.IsValid() {
			rank |= 4 >> i
		}
	}
	c := candidate{chain: chain, rank: rank}
	tp := tpAny
	if m.transport != "" {
		tp = tpRawBuffer
	}
	for _, d := range prefixes(m.dst) {
		tb := getOrNew(b, d)
		if tb[tp] == nil {
			tb[tp] = directSrcBuild{}
		}
		for _, dsrc := range prefixes(m.directSrc) {
			tb := getOrNew(tb[tp], dsrc)
			if tb[m.srcType] == nil {
				tb[m.srcType] = srcBuild{}
			}
			for _, sp := range prefixes(m.src) {
				getOrNew(tb[m.srcType], sp).put(m.srcPort, c)
			}
		}
	}
}

func (p *portsBuild) put(port int64, c candidate) {
	if port < 0 {
		if c.beats(p.any) {
			p.any = c
		}
		return
	}
	if p.exact == nil {
		p.exact = map[uint16]candidate{}
	}
	if c.beats(p.exact[uint16(port)]) {
		p.exact[uint16(port)] = c
	}
}

// newIPStage builds the tries of one IP stage; index gives each prefix's
// value.
func newIPStage[V any](m map[netip.Prefix]*V, index func(*V) int32) ipStage {
	s := ipStage{fam: [2]trie{newTrie(), newTrie()}}
	for p, v := range m {
		fam, k := addrKey(p.Addr())
		s.fam[fam].insert(k, uint8(p.Bits()), index(v))
	}
	return s
}

func (l *lookupTable) flattenDst(b dstBuild) ipStage {
	return newIPStage(b, func(tb *transportBuild) int32 {
		var idx [2]int32
		for tp, ds := range tb {
			idx[tp] = -1
			if ds != nil {
				l.directSrc = append(l.directSrc, newIPStage(ds, l.flattenTypes))
				idx[tp] = int32(len(l.directSrc) - 1)
			}
		}
		l.transport = append(l.transport, idx)
		return int32(len(l.transport) - 1)
	})
}

func (l *lookupTable) flattenTypes(tb *typesBuild) int32 {
	var idx [3]int32
	for t, sb := range tb {
		idx[t] = -1
		if sb != nil {
			idx[t] = l.flattenSrc(sb)
		}
	}
	l.types = append(l.types, idx)
	return int32(len(l.types) - 1)
}

func (l *lookupTable) flattenSrc(sb srcBuild) int32 {
	st := newIPStage(sb, func(pb *portsBuild) int32 {
		ps := portStage{any: pb.any.chain}
		if len(pb.exact) > 0 {
			ps.exact = make(map[uint16]*FilterChain, len(pb.exact))
			for port, c := range pb.exact {
				ps.exact[port] = c.chain
			}
		}
		l.ports = append(l.ports, ps)
		return int32(len(l.ports) - 1)
	})
	l.src = append(l.src, st)
	return int32(len(l.src) - 1)
}
