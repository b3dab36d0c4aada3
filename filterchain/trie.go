package filterchain

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// Address families, used to index per-family tries. An IPv4-mapped IPv6
// address is IPv4 everywhere in this package.
const (
	famV4 = 0
	famV6 = 1
)

// key128 is an address as a 128-bit big-endian integer. IPv4 addresses sit in
// the top 32 bits of hi, so that bit i of a key is bit i of the address for
// both families.
type key128 struct{ hi, lo uint64 }

// addrKey returns the family and key of a, which must be unmapped and valid.
func addrKey(a netip.Addr) (int, key128) {
	if a.Is4() {
		b := a.As4()
		return famV4, key128{hi: uint64(binary.BigEndian.Uint32(b[:])) << 32}
	}
	b := a.As16()
	return famV6, key128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

// bit returns bit i (0 = most significant) of k.
func (k key128) bit(i uint8) int {
	if i < 64 {
		return int(k.hi>>(63-i)) & 1
	}
	return int(k.lo>>(127-i)) & 1
}

// commonLen returns the length of the common leading bits of a and b, at most
// limit.
func commonLen(a, b key128, limit uint8) uint8 {
	n := uint8(bits.LeadingZeros64(a.hi ^ b.hi))
	if n == 64 {
		n += uint8(bits.LeadingZeros64(a.lo ^ b.lo))
	}
	return min(n, limit)
}

// hasPrefix reports whether the first n bits of k and p are equal.
func (k key128) hasPrefix(p key128, n uint8) bool {
	return commonLen(k, p, n) == n
}

// trie is an immutable path-compressed binary trie over address prefixes of
// one family, mapping each stored prefix to a non-negative int32 (an index
// into a slice owned by the caller). A lookup visits at most one node per
// stored prefix length on the address's path, so it costs O(address bits)
// whatever the number of prefixes, and it does not allocate.
type trie struct {
	nodes []trieNode
	root  int32 // index into nodes; -1 when empty
}

type trieNode struct {
	key   key128 // low bits past n are zero
	n     uint8  // prefix length
	val   int32  // -1 for a branching node that stores no prefix
	child [2]int32
}

func newTrie() trie { return trie{root: -1} }

// lookup returns the value of the longest stored prefix containing k, or -1.
func (t *trie) lookup(k key128) int32 {
	best := int32(-1)
	if len(t.nodes) == 0 {
		return best
	}
	for i := t.root; i >= 0; {
		nd := &t.nodes[i]
		if !k.hasPrefix(nd.key, nd.n) {
			break
		}
		if nd.val >= 0 {
			best = nd.val
		}
		if nd.n >= 128 {
			break
		}
		i = nd.child[k.bit(nd.n)]
	}
	return best
}

// insert stores val for the prefix (k, n); k's bits past n must be zero. A
// prefix stored before is overwritten.
func (t *trie) insert(k key128, n uint8, val int32) {
	parent, slot := int32(-1), 0 // the link to follow: t.root, or a child slot
	for {
		cur := t.link(parent, slot)
		if cur < 0 {
			t.setLink(parent, slot, t.add(trieNode{key: k, n: n, val: val, child: [2]int32{-1, -1}}))
			return
		}
		nd := t.nodes[cur]
		c := commonLen(k, nd.key, min(n, nd.n))
		switch {
		case c == nd.n && c == n:
			t.nodes[cur].val = val
			return
		case c == nd.n:
			// The new prefix lies below this node.
			parent, slot = cur, k.bit(nd.n)
		case c == n:
			// The new prefix contains this node.
			nw := trieNode{key: k, n: n, val: val, child: [2]int32{-1, -1}}
			nw.child[nd.key.bit(n)] = cur
			t.setLink(parent, slot, t.add(nw))
			return
		default:
			// They diverge at bit c: a branching node takes both.
			leaf := t.add(trieNode{key: k, n: n, val: val, child: [2]int32{-1, -1}})
			br := trieNode{key: maskKey(k, c), n: c, val: -1}
			br.child[k.bit(c)] = leaf
			br.child[nd.key.bit(c)] = cur
			t.setLink(parent, slot, t.add(br))
			return
		}
	}
}

// add appends nd and returns its index.
func (t *trie) add(nd trieNode) int32 {
	t.nodes = append(t.nodes, nd)
	return int32(len(t.nodes) - 1)
}

// link returns the node index held by the root (parent -1) or by a child slot.
func (t *trie) link(parent int32, slot int) int32 {
	if parent < 0 {
		return t.root
	}
	return t.nodes[parent].child[slot]
}

// setLink stores v in the root (parent -1) or in a child slot.
func (t *trie) setLink(parent int32, slot int, v int32) {
	if parent < 0 {
		t.root = v
		return
	}
	t.nodes[parent].child[slot] = v
}

// maskKey clears the bits of k past the first n.
func maskKey(k key128, n uint8) key128 {
	switch {
	case n == 0:
		return key128{}
	case n < 64:
		return key128{hi: k.hi &^ (^uint64(0) >> n)}
	case n == 64:
		return key128{hi: k.hi}
	case n < 128:
		return key128{hi: k.hi, lo: k.lo &^ (^uint64(0) >> (n - 64))}
	default:
		return k
	}
}
