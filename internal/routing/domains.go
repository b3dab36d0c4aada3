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
	// suffix maps the part after a leading '*' ("*.foo.com" -> ".foo.com").
	suffix     map[string]int
	suffixLens []int // distinct key lengths, descending
	// prefix maps the part before a trailing '*' ("foo.*" -> "foo.").
	prefix     map[string]int
	prefixLens []int // distinct key lengths, descending
	star       int   // virtual host of "*"; -1 if none
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
				x.suffix = addFirst(x.suffix, key, vh)
			case domainPrefix:
				x.prefix = addFirst(x.prefix, key, vh)
			case domainStar:
				if x.star < 0 {
					x.star = vh
				}
			}
		}
	}
	x.suffixLens = keyLengths(x.suffix)
	x.prefixLens = keyLengths(x.prefix)
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

// keyLengths returns the distinct lengths of m's keys, longest first.
func keyLengths(m map[string]int) []int {
	var lens []int
	for k := range m {
		if !slices.Contains(lens, len(k)) {
			lens = append(lens, len(k))
		}
	}
	slices.Sort(lens)
	slices.Reverse(lens)
	return lens
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
	for _, l := range x.suffixLens {
		if l < n {
			if vh, ok := x.suffix[string(host[n-l:])]; ok {
				return vh
			}
		}
	}
	for _, l := range x.prefixLens {
		if l < n {
			if vh, ok := x.prefix[string(host[:l])]; ok {
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
