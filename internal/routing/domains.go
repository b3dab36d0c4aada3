package routing

import (
	"slices"
	"strings"
)

// domainIndex finds the virtual host of an authority without scanning the
// virtual hosts: exact domains are a map; wildcard domains are maps keyed by
// the fixed part, probed once per distinct fixed-part length, longest first.
// A lookup therefore costs one map probe plus one per distinct wildcard
// length, whatever the number of virtual hosts. Immutable after build.
type domainIndex struct {
	exact map[string]int // lower-case domain -> virtual host index
	// suffix holds the parts after a leading '*' ("*.foo.com" -> ".foo.com").
	suffix wildcards
	// prefix holds the parts before a trailing '*' ("foo.*" -> "foo.").
	prefix wildcards
	star   int // virtual host of "*"; -1 if none
}

// wildcards indexes the fixed parts of wildcard domains of one kind.
type wildcards struct {
	keys map[string]int // fixed part -> virtual host index
	lens []keyLength    // distinct key lengths, longest first
}

// keyLength is a length of wildcard keys with the set of bytes those keys
// have at their inner edge (next to the '*'): the first byte of a suffix, the
// last of a prefix. Checking that byte of the host first skips most map
// probes that would miss, which matters when thousands of keys make the map
// probe hash the host.
type keyLength struct {
	n    int
	edge [4]uint64 // bit b is set if some key has byte b at its edge
}

func (k *keyLength) has(b byte) bool { return k.edge[b>>6]&(1<<(b&63)) != 0 }

// add indexes key for virtual host vh unless key is already there; edge is
// its inner edge byte.
func (w *wildcards) add(key string, edge byte, vh int) {
	if w.keys == nil {
		w.keys = map[string]int{}
	}
	if _, ok := w.keys[key]; ok {
		return
	}
	w.keys[key] = vh
	i := slices.IndexFunc(w.lens, func(k keyLength) bool { return k.n == len(key) })
	if i < 0 {
		w.lens = append(w.lens, keyLength{n: len(key)})
		i = len(w.lens) - 1
	}
	w.lens[i].edge[edge>>6] |= 1 << (edge & 63)
}

// sort orders the lengths longest first, so that the first hit is the
// longest match.
func (w *wildcards) sort() {
	slices.SortFunc(w.lens, func(a, b keyLength) int { return b.n - a.n })
}

// domainKind classifies a domain pattern.
type domainKind uint8

const (
	domainExact domainKind = iota
	domainSuffix
	domainPrefix
	domainStar
	domainInvalid
)

// classifyDomain returns the kind of a domain pattern and its fixed part,
// lower-cased. As in Envoy, a wildcard is one '*' at either end and stands
// for at least one character. Any other '*' makes the domain invalid: it
// never matches (a host name has no '*'), as in gRPC's implementations.
func classifyDomain(d string) (domainKind, string) {
	d = lowerASCII(d)
	switch n := strings.Count(d, "*"); {
	case d == "*":
		return domainStar, ""
	case n == 0:
		return domainExact, d
	case n == 1 && d[0] == '*':
		return domainSuffix, d[1:]
	case n == 1 && d[len(d)-1] == '*':
		return domainPrefix, d[:len(d)-1]
	default:
		return domainInvalid, ""
	}
}

// newDomainIndex indexes the domains of each virtual host (domains[i] are
// those of virtual host i). When two virtual hosts list the same pattern, the
// first one keeps it.
func newDomainIndex(domains [][]string) domainIndex {
	x := domainIndex{star: -1}
	for vh, ds := range domains {
		for _, d := range ds {
			kind, key := classifyDomain(d)
			switch kind {
			case domainExact:
				x.exact = addFirst(x.exact, key, vh)
			case domainSuffix:
				x.suffix.add(key, key[0], vh)
			case domainPrefix:
				x.prefix.add(key, key[len(key)-1], vh)
			case domainStar:
				if x.star < 0 {
					x.star = vh
				}
			}
		}
	}
	x.suffix.sort()
	x.prefix.sort()
	return x
}

// addFirst sets m[k] = v unless k is already there, allocating m if nil.
func addFirst(m map[string]int, k string, v int) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	if _, ok := m[k]; !ok {
		m[k] = v
	}
	return m
}

// maxStackAuthority is the longest authority lower-cased on the stack; a
// longer one with upper-case letters costs an allocation.
const maxStackAuthority = 256

// find returns the index of the virtual host for authority, or -1.
func (x *domainIndex) find(authority string) int {
	if !hasUpperASCII(authority) {
		return lookup(x, authority)
	}
	if len(authority) > maxStackAuthority {
		return lookup(x, lowerASCII(authority))
	}
	var buf [maxStackAuthority]byte
	b := buf[:len(authority)]
	for i := 0; i < len(authority); i++ {
		c := authority[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	return lookup(x, b)
}

// lookup does find's work on a lower-case host, given as a string or as
// bytes so that a lower-cased copy can live on the stack; map probes with
// string(bytes) keys do not allocate.
func lookup[S string | []byte](x *domainIndex, host S) int {
	if vh, ok := x.exact[string(host)]; ok {
		return vh
	}
	n := len(host)
	for i := range x.suffix.lens {
		l := &x.suffix.lens[i]
		if l.n < n && l.has(host[n-l.n]) {
			if vh, ok := x.suffix.keys[string(host[n-l.n:])]; ok {
				return vh
			}
		}
	}
	for i := range x.prefix.lens {
		l := &x.prefix.lens[i]
		if l.n < n && l.has(host[l.n-1]) {
			if vh, ok := x.prefix.keys[string(host[:l.n])]; ok {
				return vh
			}
		}
	}
	return x.star
}

// hasUpperASCII reports whether s has an ASCII upper-case letter.
func hasUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

// lowerASCII lower-cases the ASCII letters of s; it returns s itself when
// there are none.
func lowerASCII(s string) string {
	if !hasUpperASCII(s) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}
