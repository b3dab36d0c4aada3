package filterchain

import (
	"cmp"
	"net/netip"
	"slices"
)

// lookupTable selects a chain in stages, as Envoy does: destination IP,
// transport protocol, directly connected source IP, source type, source IP,
// source port. (Destination port, server name and application protocol
// stages are left out: only chains without those fields get here.) At each
// stage only the most specific candidates that match go on, and there is no
// fallback to less specific ones when a later stage fails. Each stage is a
// trie or an array indexed by the previous stage's result, so a lookup costs
// O(address bits). Immutable after buildLookup.
type lookupTable struct {
	nodes     []trieNode  // every trie of the table
	dst       ipStage     // values index transport
	transport [][2]int32  // by tpAny, tpRawBuffer; values index directSrc, -1 when absent
	directSrc []ipStage   // values index types
	types     [][3]int32  // by source type; values index src, -1 when absent
	src       []ipStage   // values index ports
	ports     []portStage // the last stage
}

// ipStage is a longest-prefix stage: the roots of one trie per family.
type ipStage struct{ root [2]int32 }

// Transport protocol slots.
const (
	tpAny       = 0 // transport_protocol ""
	tpRawBuffer = 1 // transport_protocol "raw_buffer"
)

// portStage maps source ports to chains: exact is sorted by port; any is
// the chain without source_ports, or nil.
type portStage struct {
	exact []portChain
	any   *FilterChain
}

type portChain struct {
	port  uint16
	chain *FilterChain
}

func (p *portStage) find(port uint16) *FilterChain {
	lo, hi := 0, len(p.exact)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch e := &p.exact[m]; {
		case e.port == port:
			return e.chain
		case e.port < port:
			lo = m + 1
		default:
			hi = m
		}
	}
	return p.any
}

// find returns the matching chain, or nil. It does not allocate.
func (l *lookupTable) find(src, dst netip.AddrPort) *FilterChain {
	sa, da := src.Addr().Unmap().WithZone(""), dst.Addr().Unmap().WithZone("")
	if !sa.IsValid() || !da.IsValid() {
		return nil
	}
	df, dk := addrKey(da)
	sf, sk := addrKey(sa)
	i := lookupPrefix(l.nodes, l.dst.root[df], dk)
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
	if i = lookupPrefix(l.nodes, l.directSrc[i].root[sf], sk); i < 0 {
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
	if i = lookupPrefix(l.nodes, l.src[i].root[sf], sk); i < 0 {
		return nil
	}
	return l.ports[i].find(src.Port())
}

// row is one normalized matcher of a chain that can match, as buildLookup
// sorts and groups them stage by stage.
type row struct {
	m     *matcher
	chain *FilterChain
	// rank orders chains that end up in the same port slot, which after the
	// duplicate check happens only when an absent prefix meets an explicit
	// /0 of the same stage: explicit prefixes at earlier stages win.
	rank uint8
}

// buildLookup compiles the matchers of the chains that can match.
func buildLookup(specs []chainSpec) lookupTable {
	n := 0
	for _, s := range specs {
		n += len(s.matchers)
	}
	rows := make([]row, 0, n)
	for _, s := range specs {
		if !s.canMatch {
			continue
		}
		for i := range s.matchers {
			m := &s.matchers[i]
			if m.srcPort > 0xffff {
				continue // no connection comes from such a port
			}
			r := row{m: m, chain: s.chain}
			for j, p := range [...]netip.Prefix{m.dst, m.directSrc, m.src} {
				if p.IsValid() {
					r.rank |= 4 >> j
				}
			}
			rows = append(rows, r)
		}
	}
	// Each row adds at most two nodes (a leaf and a branch) to each of the
	// three IP stages; most add fewer.
	l := lookupTable{nodes: make([]trieNode, 0, 2*len(rows)+8)}
	l.dst = l.buildIP(rows, func(m *matcher) netip.Prefix { return m.dst }, l.buildTransport)
	return l
}

// runs sorts rows by key and calls f with each run of rows with equal keys.
func runs[K any](rows []row, key func(*matcher) K, compare func(a, b K) int, f func(k K, run []row)) {
	slices.SortFunc(rows, func(a, b row) int { return compare(key(a.m), key(b.m)) })
	for len(rows) > 0 {
		k := key(rows[0].m)
		n := 1
		for n < len(rows) && compare(key(rows[n].m), k) == 0 {
			n++
		}
		f(k, rows[:n])
		rows = rows[n:]
	}
}

// comparePrefix orders prefixes: absent first, then by address and length.
func comparePrefix(a, b netip.Prefix) int {
	if c := cmp.Compare(boolInt(a.IsValid()), boolInt(b.IsValid())); c != 0 {
		return c
	}
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// buildIP builds a longest-prefix stage over rows, keyed by key, with next
// building the stage below each prefix. An absent prefix is stored as the
// /0 of both families, where it joins the rows of an explicit /0 (gRFC A36
// still counts the two as different matchers).
func (l *lookupTable) buildIP(rows []row, key func(*matcher) netip.Prefix, next func([]row) int32) ipStage {
	s := ipStage{root: [2]int32{-1, -1}}
	var absent []row
	var zero [2]bool
	runs(rows, key, comparePrefix, func(p netip.Prefix, run []row) {
		if !p.IsValid() {
			absent = run // sorted first
			return
		}
		fam, k := addrKey(p.Addr())
		if p.Bits() == 0 {
			zero[fam] = true
			if absent != nil {
				run = append(slices.Clip(run), absent...)
			}
		}
		v := next(run)
		insertPrefix(&l.nodes, &s.root[fam], k, uint8(p.Bits()), v)
	})
	if absent != nil {
		shared := int32(-1)
		for fam, explicit := range zero {
			if explicit {
				continue
			}
			if shared < 0 {
				shared = next(absent)
			}
			insertPrefix(&l.nodes, &s.root[fam], key128{}, 0, shared)
		}
	}
	return s
}

func (l *lookupTable) buildTransport(rows []row) int32 {
	idx := [2]int32{-1, -1}
	runs(rows, func(m *matcher) int { return boolInt(m.transport != "") }, cmp.Compare[int], func(tp int, run []row) {
		st := l.buildIP(run, func(m *matcher) netip.Prefix { return m.directSrc }, l.buildTypes)
		l.directSrc = append(l.directSrc, st)
		idx[tp] = int32(len(l.directSrc) - 1)
	})
	l.transport = append(l.transport, idx)
	return int32(len(l.transport) - 1)
}

func (l *lookupTable) buildTypes(rows []row) int32 {
	idx := [3]int32{-1, -1, -1}
	runs(rows, func(m *matcher) int { return m.srcType }, cmp.Compare[int], func(t int, run []row) {
		st := l.buildIP(run, func(m *matcher) netip.Prefix { return m.src }, l.buildPorts)
		l.src = append(l.src, st)
		idx[t] = int32(len(l.src) - 1)
	})
	l.types = append(l.types, idx)
	return int32(len(l.types) - 1)
}

func (l *lookupTable) buildPorts(rows []row) int32 {
	// Sort by port, and within a port by rank, best first.
	slices.SortFunc(rows, func(a, b row) int {
		if c := cmp.Compare(a.m.srcPort, b.m.srcPort); c != 0 {
			return c
		}
		return cmp.Compare(b.rank, a.rank)
	})
	var ps portStage
	for i, r := range rows {
		if i > 0 && rows[i-1].m.srcPort == r.m.srcPort {
			continue // a lower-ranked chain in the same slot
		}
		if r.m.srcPort < 0 {
			ps.any = r.chain
			continue
		}
		ps.exact = append(ps.exact, portChain{port: uint16(r.m.srcPort), chain: r.chain})
	}
	l.ports = append(l.ports, ps)
	return int32(len(l.ports) - 1)
}
