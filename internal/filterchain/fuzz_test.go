package filterchain_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
)

// FuzzCompile feeds arbitrary bytes, read as a Listener, to Compile: it must
// not panic, must fail only with a *ValidationError, and a Table it returns
// must answer lookups.
func FuzzCompile(f *testing.F) {
	seeds := []*listenerpb.Listener{
		newListener(),
		withDefault(newListener(chain("a", &listenerpb.FilterChainMatch{
			PrefixRanges: cidrs("10.0.0.0/8", "::ffff:10.0.0.0/104"), SourcePrefixRanges: cidrs("2001:db8::/32"),
			SourcePorts: []uint32{1, 2}, SourceType: external, ServerNames: []string{"x"},
		}))),
	}
	for _, l := range seeds {
		b, err := proto.Marshal(l)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l := &listenerpb.Listener{}
		if err := proto.Unmarshal(b, l); err != nil {
			return
		}
		tbl, err := filterchain.Compile(l, filterchain.Options{})
		// CompileRaw of the same bytes, alone and reusing its own result,
		// must agree with Compile.
		raw, rerr := filterchain.Split(b)
		if rerr != nil {
			t.Fatalf("Split() failed on bytes proto.Unmarshal accepts: %v", rerr)
		}
		rawTbl, rawErr := filterchain.CompileRaw(raw, filterchain.Options{})
		if (err == nil) != (rawErr == nil) || err != nil && err.Error() != rawErr.Error() {
			t.Fatalf("Compile() error = %v, CompileRaw() error = %v; want the same", err, rawErr)
		}
		if err != nil {
			var ve *filterchain.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Compile() error = %v (%T), want a *ValidationError", err, err)
			}
			return
		}
		again, err := filterchain.CompileRaw(raw, filterchain.Options{Previous: rawTbl})
		if err != nil {
			t.Fatalf("CompileRaw() reusing its own result failed: %v", err)
		}
		for _, other := range []*filterchain.Table{rawTbl, again} {
			if !tbl.Equal(other) {
				t.Fatalf("CompileRaw() table differs from Compile()'s")
			}
		}
		for _, src := range fuzzAddrs {
			for _, dst := range fuzzAddrs {
				want := tbl.Lookup(src, dst)
				for _, other := range []*filterchain.Table{rawTbl, again} {
					if got := other.Lookup(src, dst); (got == nil) != (want == nil) || got != nil && got.ID != want.ID {
						t.Fatalf("Lookup(%v, %v): CompileRaw's table picks %v, Compile's %v", src, dst, got, want)
					}
				}
			}
		}
	})
}

// fuzzPrefixes and fuzzAddrs are small pools that make overlaps likely.
var (
	fuzzPrefixes = []*corepb.CidrRange{
		cidr("10.0.0.0/8"), cidr("10.1.0.0/16"), cidr("10.1.1.0/24"), cidr("10.1.1.1/32"), cidr("0.0.0.0/0"),
		cidr("127.0.0.0/8"), cidr("::/0"), cidr("2001:db8::/32"), cidr("2001:db8::1/128"), cidr("::ffff:10.0.0.0/104"),
		cidr("10.1.0.0"), cidrLen("10.1.1.1", 99), cidrLen("2001:db8::", 300), cidr("10.1.2.0/23"),
	}
	fuzzAddrs = []netip.AddrPort{
		ap("10.1.1.1:1"), ap("10.1.2.3:2"), ap("10.2.0.1:3"), ap("127.0.0.1:1"), ap("1.2.3.4:4"),
		ap("[2001:db8::1]:1"), ap("[2001:db8::2]:2"), ap("[::1]:3"), ap("[::ffff:10.1.1.1]:2"), ap("[::ffff:10.1.2.3]:1"),
	}
)

// byteReader hands out fuzz bytes, then zeros.
type byteReader []byte

func (r *byteReader) next(n int) int {
	if len(*r) == 0 {
		return 0
	}
	b := (*r)[0]
	*r = (*r)[1:]
	return int(b) % n
}

// fuzzMatch builds a FilterChainMatch from r, drawing from the pools.
func fuzzMatch(r *byteReader) *listenerpb.FilterChainMatch {
	m := &listenerpb.FilterChainMatch{SourceType: listenerpb.FilterChainMatch_ConnectionSourceType(r.next(3))}
	pick := func() []*corepb.CidrRange {
		var out []*corepb.CidrRange
		for range r.next(3) {
			out = append(out, fuzzPrefixes[r.next(len(fuzzPrefixes))])
		}
		return out
	}
	m.PrefixRanges = pick()
	m.SourcePrefixRanges = pick()
	if r.next(4) == 0 {
		m.DirectSourcePrefixRanges = pick()
	}
	for range r.next(3) {
		m.SourcePorts = append(m.SourcePorts, uint32(1+r.next(4)))
	}
	switch r.next(8) {
	case 0:
		m.ServerNames = []string{"x"}
	case 1:
		m.TransportProtocol = "raw_buffer"
	case 2:
		m.DestinationPort = wrapperspb.UInt32(80)
	}
	return m
}

// FuzzLookup builds Listeners with random overlapping chains and checks
// every lookup against refLookup, a brute-force implementation of the same
// rules, and that a returned chain's match covers the connection.
func FuzzLookup(f *testing.F) {
	f.Add([]byte{3, 0, 1, 2, 1, 3, 0, 1, 1, 1, 2, 5, 0, 0, 0, 1, 2})
	f.Add([]byte{7, 1, 2, 6, 9, 1, 7, 0, 2, 1, 3, 2, 2, 4, 4, 0, 1, 1, 2, 12, 13, 1, 0})
	f.Fuzz(checkAgainstReference)
}

// TestLookupMatchesReference runs the FuzzLookup check on pseudo-random
// inputs, so that every test run covers a few thousand Listeners.
func TestLookupMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	b := make([]byte, 48)
	for range 3000 {
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		checkAgainstReference(t, b)
	}
}

// checkAgainstReference builds a Listener from b and compares every lookup
// in the address pools with refLookup.
func checkAgainstReference(t *testing.T, b []byte) {
	r := byteReader(b)
	l := newListener()
	n := 1 + r.next(8)
	for i := range n {
		l.FilterChains = append(l.FilterChains, chain(fmt.Sprint(i), fuzzMatch(&r)))
	}
	if r.next(2) == 0 {
		withDefault(l)
	}
	tbl, err := filterchain.Compile(l, filterchain.Options{})
	if err != nil {
		return // duplicates are frequent; TestCompileDuplicates covers them
	}
	for _, src := range fuzzAddrs {
		for _, dst := range fuzzAddrs {
			got := tbl.Lookup(src, dst)
			want, err := refLookup(l, src, dst)
			if err != nil {
				t.Fatalf("Lookup(%v, %v) on %v: reference: %v", src, dst, l.GetFilterChains(), err)
			}
			if chainName(got) != want {
				t.Fatalf("Lookup(%v, %v) = %s, want %s; chains: %v", src, dst, chainName(got), want, l.GetFilterChains())
			}
		}
	}
}

// refMatcher is one normalized matcher, computed independently of the
// package: prefixes as netip.Prefix (invalid = absent), ports -1 = absent.
type refMatcher struct {
	chain               string
	dst, directSrc, src netip.Prefix
	srcType             listenerpb.FilterChainMatch_ConnectionSourceType
	srcPort             int64
	rawBuffer           bool // transport_protocol "raw_buffer"
}

func refPrefix(r *corepb.CidrRange) netip.Prefix {
	a := netip.MustParseAddr(r.GetAddressPrefix())
	n := min(int(r.GetPrefixLen().GetValue()), a.BitLen())
	if a.Is4In6() && n >= 96 {
		return netip.PrefixFrom(a.Unmap(), n-96).Masked()
	}
	return netip.PrefixFrom(a, n).Masked()
}

func refPrefixes(rs []*corepb.CidrRange) []netip.Prefix {
	if len(rs) == 0 {
		return []netip.Prefix{{}}
	}
	var out []netip.Prefix
	for _, r := range rs {
		out = append(out, refPrefix(r))
	}
	return out
}

// refExpand normalizes the chains that can match into refMatchers.
func refExpand(l *listenerpb.Listener) []refMatcher {
	var out []refMatcher
	for _, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		if len(m.GetServerNames()) > 0 || len(m.GetApplicationProtocols()) > 0 || m.GetDestinationPort() != nil ||
			(m.GetTransportProtocol() != "" && m.GetTransportProtocol() != "raw_buffer") {
			continue
		}
		ports := []int64{-1}
		if len(m.GetSourcePorts()) > 0 {
			ports = nil
			for _, p := range m.GetSourcePorts() {
				ports = append(ports, int64(p))
			}
		}
		for _, d := range refPrefixes(m.GetPrefixRanges()) {
			for _, ds := range refPrefixes(m.GetDirectSourcePrefixRanges()) {
				for _, s := range refPrefixes(m.GetSourcePrefixRanges()) {
					for _, p := range ports {
						out = append(out, refMatcher{
							chain: fc.GetName(), dst: d, directSrc: ds, src: s, srcType: m.GetSourceType(), srcPort: p,
							rawBuffer: m.GetTransportProtocol() != "",
						})
					}
				}
			}
		}
	}
	return out
}

// prefixMatch is the specificity with which p matches a: its length, 0 when
// p is absent, -1 when it does not match.
func prefixMatch(p netip.Prefix, a netip.Addr) int {
	switch {
	case !p.IsValid():
		return 0
	case p.Contains(a):
		return p.Bits()
	default:
		return -1
	}
}

// keepBest keeps the matchers with the highest score >= 0.
func keepBest(ms []refMatcher, score func(refMatcher) int) []refMatcher {
	best := -1
	for _, m := range ms {
		best = max(best, score(m))
	}
	var out []refMatcher
	for _, m := range ms {
		if s := score(m); s >= 0 && s == best {
			out = append(out, m)
		}
	}
	return out
}

// refLookup selects a chain by filtering all normalized matchers stage by
// stage, and returns its name, the default chain's, or "<nil>". A matcher
// survives a stage only if it covers the connection, so a chain it returns
// always covers it.
func refLookup(l *listenerpb.Listener, src, dst netip.AddrPort) (string, error) {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	ms := refExpand(l)
	ms = keepBest(ms, func(m refMatcher) int { return prefixMatch(m.dst, da) })
	ms = keepBest(ms, func(m refMatcher) int {
		if m.rawBuffer {
			return 1
		}
		return 0
	})
	ms = keepBest(ms, func(m refMatcher) int { return prefixMatch(m.directSrc, sa) })
	want := listenerpb.FilterChainMatch_EXTERNAL
	if sa == da || sa.IsLoopback() {
		want = listenerpb.FilterChainMatch_SAME_IP_OR_LOOPBACK
	}
	ms = keepBest(ms, func(m refMatcher) int {
		switch m.srcType {
		case want:
			return 1
		case listenerpb.FilterChainMatch_ANY:
			return 0
		}
		return -1
	})
	ms = keepBest(ms, func(m refMatcher) int { return prefixMatch(m.src, sa) })
	ms = keepBest(ms, func(m refMatcher) int {
		switch m.srcPort {
		case int64(src.Port()):
			return 1
		case -1:
			return 0
		}
		return -1
	})
	// An explicit /0 beats an absent prefix, earlier stages first.
	ms = keepBest(ms, func(m refMatcher) int {
		s := 0
		for i, p := range []netip.Prefix{m.dst, m.directSrc, m.src} {
			if p.IsValid() {
				s |= 4 >> i
			}
		}
		return s
	})
	switch {
	case len(ms) == 1:
		return ms[0].chain, nil
	case len(ms) > 1:
		return "", fmt.Errorf("ambiguous: %v", ms)
	case l.GetDefaultFilterChain() != nil:
		return l.GetDefaultFilterChain().GetName(), nil
	default:
		return "<nil>", nil
	}
}
