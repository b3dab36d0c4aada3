package filterchain

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestTrieMatchesBruteForce inserts random overlapping prefixes of both
// families and checks every lookup against a scan of all prefixes.
func TestTrieMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randAddr := func(v6 bool) netip.Addr {
		if v6 {
			var b [16]byte
			b[0], b[1], b[15] = 0x20, byte(rng.IntN(4)), byte(rng.IntN(256))
			b[2] = byte(rng.IntN(256))
			return netip.AddrFrom16(b)
		}
		return netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))})
	}
	for round := range 200 {
		var nodes []trieNode
		roots := [2]int32{-1, -1}
		var stored []netip.Prefix
		for i := range 1 + rng.IntN(60) {
			a := randAddr(rng.IntN(2) == 0)
			p := netip.PrefixFrom(a, rng.IntN(a.BitLen()+1)).Masked()
			fam, k := addrKey(p.Addr())
			insertPrefix(&nodes, &roots[fam], k, uint8(p.Bits()), int32(i))
			stored = append(stored, p)
		}
		for range 200 {
			a := randAddr(rng.IntN(2) == 0)
			fam, k := addrKey(a)
			got := lookupPrefix(nodes, roots[fam], k)
			want, bestLen := int32(-1), -1
			for i, p := range stored {
				// A prefix stored again overwrites the earlier value.
				if p.Contains(a) && p.Bits() >= bestLen {
					want, bestLen = int32(i), p.Bits()
				}
			}
			if got != want {
				t.Fatalf("round %d: lookup(%v) = %d, want %d (prefixes %v)", round, a, got, want, stored)
			}
		}
	}
}

func TestMaskKey(t *testing.T) {
	k := key128{hi: ^uint64(0), lo: ^uint64(0)}
	for n := range 129 {
		m := maskKey(k, uint8(n))
		if got := commonLen(m, k, 128); got != uint8(n) {
			t.Errorf("commonLen(maskKey(ones, %d), ones) = %d, want %d", n, got, n)
		}
	}
}
