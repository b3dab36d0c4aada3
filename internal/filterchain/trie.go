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

// The tries of a lookupTable live in one arena, a []trieNode, and are named
// by their root index (-1 for an empty trie). Each is a path-compressed
// binary trie over the prefixes of one address family, mapping each stored
// prefix to a non-negative int32 (an index into the next stage). A lookup
// visits at most one node per stored prefix on the address's path, so it
// costs O(address bits) whatever the number of prefixes, and it does not
// allocate.
type trieNode struct {
	key   key128 // bits past n are zero
	n     uint8  // prefix length
	val   int32  // -1 for a branching node that stores no prefix
	child [2]int32
}

// lookupPrefix returns the value of the longest prefix containing k in the
// trie at root, or -1.
func lookupPrefix(nodes []trieNode, root int32, k key128) int32 {
	best := int32(-1)
	for i := root; i >= 0; {
		nd := &nodes[i]
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

// insertPrefix stores val for the prefix (k, n) in the trie at *root, whose
// nodes are in *nodes; k's bits past n must be zero. A prefix stored before
// is overwritten.
func insertPrefix(nodes *[]trieNode, root *int32, k key128, n uint8, val int32) {
	add := func(nd trieNode) int32 {
		*nodes = append(*nodes, nd)
		return int32(len(*nodes) - 1)
	}
	link := func(parent int32, slot int) *int32 { // valid until the next add
		if parent < 0 {
			return root
		}
		return &(*nodes)[parent].child[slot]
	}
	leaf := trieNode{key: k, n: n, val: val, child: [2]int32{-1, -1}}
	parent, slot := int32(-1), 0
	for {
		cur := *link(parent, slot)
		if cur < 0 {
			i := add(leaf)
			*link(parent, slot) = i
			return
		}
		nd := (*nodes)[cur]
		c := commonLen(k, nd.key, min(n, nd.n))
		switch {
		case c == nd.n && c == n:
			(*nodes)[cur].val = val
			return
		case c == nd.n:
			// The new prefix lies below this node.
			parent, slot = cur, k.bit(nd.n)
		case c == n:
			// The new prefix contains this node.
			leaf.child[nd.key.bit(n)] = cur
			i := add(leaf)
			*link(parent, slot) = i
			return
		default:
			// They diverge at bit c: a branching node takes both.
			br := trieNode{key: maskKey(k, c), n: c, val: -1}
			br.child[k.bit(c)] = add(leaf)
			br.child[nd.key.bit(c)] = cur
			i := add(br)
			*link(parent, slot) = i
			return
		}
	}
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
