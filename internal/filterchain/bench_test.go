package filterchain_test

import (
	"fmt"
	"net/netip"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/proxyless-grpc/xds/internal/filterchain"
)

// benchListener has n chains with distinct destination /24s in 10/8, a
// source /16, and, on every third chain, a source port; plus a default
// chain. With ipv6, the destinations are distinct /128s instead, the
// deepest tries there are. Every chain has the same HCM and TLS config.
func benchListener(n int, ipv6 bool) *listenerpb.Listener {
	l := withDefault(newListener())
	for i := range n {
		dst := cidrLen(fmt.Sprintf("10.%d.%d.0", i>>8, i&255), 24)
		if ipv6 {
			dst = cidrLen(fmt.Sprintf("2001:db8::%x:%x", i>>8, i&255), 128)
		}
		m := &listenerpb.FilterChainMatch{PrefixRanges: []*corepb.CidrRange{dst}, SourcePrefixRanges: cidrs("192.168.0.0/16", "2001:db8:ffff::/48")}
		if i%3 == 0 {
			m.SourcePorts = []uint32{443, 8443}
		}
		fc := chain(fmt.Sprint(i), m)
		fc.TransportSocket = tlsSocket()
		l.FilterChains = append(l.FilterChains, fc)
	}
	return l
}

// benchConns are connections to the chains of benchListener(n, ipv6), to
// its default chain, and to nothing.
func benchConns(n int, ipv6 bool) [][2]netip.AddrPort {
	var out [][2]netip.AddrPort
	for k := range 64 {
		i := (k * 7919) % n
		dst := fmt.Sprintf("10.%d.%d.%d:80", i>>8, i&255, k)
		src := fmt.Sprintf("192.168.%d.%d:%d", k, k, 443+k%2)
		if ipv6 {
			dst = fmt.Sprintf("[2001:db8::%x:%x]:80", i>>8, i&255)
			src = fmt.Sprintf("[2001:db8:ffff::%x]:%d", k, 443+k%2)
		}
		out = append(out, [2]netip.AddrPort{ap(src), ap(dst)})
	}
	return out
}

// reportCPU measures the process's CPU time until the returned function
// runs, and reports it per operation as cpu-ns/op: on a busy machine it is
// steadier than the wall time of ns/op. It counts every thread, so GC work
// is included.
func reportCPU(b *testing.B) func() {
	start, ok := processCPUTime()
	return func() {
		end, _ := processCPUTime()
		if ok && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1, 100, 10_000} {
		for _, ipv6 := range []bool{false, true} {
			name := fmt.Sprintf("chains=%d/ipv4", n)
			if ipv6 {
				name = fmt.Sprintf("chains=%d/ipv6", n)
			}
			b.Run(name, func(b *testing.B) {
				tbl := mustCompile(b, benchListener(n, ipv6))
				conns := benchConns(n, ipv6)
				b.ReportAllocs()
				defer reportCPU(b)()
				i := 0
				for b.Loop() {
					c := conns[i%len(conns)]
					if tbl.Lookup(c[0], c[1]) == nil {
						b.Fatal("Lookup() = nil")
					}
					i++
				}
			})
		}
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	tbl := mustCompile(t, benchListener(1000, false))
	conns := append(benchConns(1000, false),
		[2]netip.AddrPort{ap("[::ffff:192.168.0.1]:443"), ap("[::ffff:10.0.1.1]:80")},
		[2]netip.AddrPort{ap("[fe80::1%eth0]:1"), ap("[fe80::2%eth0]:80")},
		[2]netip.AddrPort{{}, {}},
	)
	for _, c := range conns {
		if allocs := testing.AllocsPerRun(100, func() { tbl.Lookup(c[0], c[1]) }); allocs != 0 {
			t.Errorf("Lookup(%v, %v) allocates %v times, want 0", c[0], c[1], allocs)
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("chains=%d", n), func(b *testing.B) {
			l := benchListener(n, false)
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if _, err := filterchain.Compile(l, filterchain.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
