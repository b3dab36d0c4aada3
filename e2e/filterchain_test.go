package e2e_test

import (
	"net"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// conn is one connection of a chain-selection test case: from srcIP
// (srcPort, if not 0) to the listener at index lis; wantChain is the chain
// that must serve it, "" meaning that the server must close it without a
// byte.
type conn struct {
	lis       int
	srcIP     string
	srcPort   uint16
	wantChain string
}

// TestFilterChainSelection checks on real connections that each one is
// served by the most specific filter chain (gRFC A36, Envoy's order:
// destination prefix, source type, source prefix, source port), that the
// default chain catches the rest, and that without a default chain an
// unmatched connection is closed without a byte.
func TestFilterChainSelection(t *testing.T) {
	t.Parallel()
	type fcm = listenerpb.FilterChainMatch
	srcPort := freePort(t, "127.0.0.6")
	tests := []struct {
		desc   string
		ips    []string // one listener on each ip; each gets the same chains
		chains []chainSpec
		def    *chainSpec
		conns  []conn
	}{
		{
			desc: "source prefix",
			ips:  []string{"127.0.0.1"},
			chains: []chainSpec{
				{name: "A", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.1/32")}}},
				{name: "B", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}},
			},
			def: &chainSpec{name: "D"},
			conns: []conn{
				{srcIP: "127.0.0.1", wantChain: "A"},
				{srcIP: "127.0.0.2", wantChain: "B"},
				{srcIP: "127.0.0.4", wantChain: "D"},
			},
		},
		{
			desc: "longest source prefix wins",
			ips:  []string{"127.0.0.1"},
			chains: []chainSpec{
				{name: "A", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.0/8")}}},
				{name: "B", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.0/30"), cidr("10.0.0.0/8")}}},
				{name: "C", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}},
			},
			conns: []conn{
				{srcIP: "127.0.0.1", wantChain: "B"},
				{srcIP: "127.0.0.2", wantChain: "C"},
				{srcIP: "127.0.0.3", wantChain: "B"},
				{srcIP: "127.0.0.5", wantChain: "A"},
			},
		},
		{
			desc: "prefix_len out of range is clamped, unused address bits are ignored (gRFC A36)",
			ips:  []string{"127.0.0.1"},
			chains: []chainSpec{
				{name: "A", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{{AddressPrefix: "127.0.0.2", PrefixLen: wrapperspb.UInt32(40)}}}},
				{name: "B", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{{AddressPrefix: "127.0.0.77", PrefixLen: wrapperspb.UInt32(30)}}}},
			},
			def: &chainSpec{name: "D"},
			conns: []conn{
				{srcIP: "127.0.0.2", wantChain: "A"},
				{srcIP: "127.0.0.3", wantChain: "D"},
				{srcIP: "127.0.0.78", wantChain: "B"},
				{srcIP: "127.0.0.79", wantChain: "B"},
				{srcIP: "127.0.0.80", wantChain: "D"},
			},
		},
		{
			desc: "IPv6: a /0 prefix still matches only its address family (gRFC A36)",
			ips:  []string{"::1"},
			chains: []chainSpec{
				{name: "A", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{cidr("0.0.0.0/0")}}},
				{name: "B", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{cidr("::/0")}}},
				{name: "C", match: &fcm{PrefixRanges: []*corepb.CidrRange{cidr("0.0.0.0/0")}}},
			},
			conns: []conn{
				{srcIP: "::1", wantChain: "B"},
			},
		},
		{
			desc: "no chain matches, no default chain: closed",
			ips:  []string{"127.0.0.1"},
			chains: []chainSpec{
				{name: "A", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.1/32")}}},
			},
			conns: []conn{
				{srcIP: "127.0.0.1", wantChain: "A"},
				{srcIP: "127.0.0.9", wantChain: ""},
			},
		},
		{
			desc: "destination prefix, on listeners bound to specific addresses",
			ips:  []string{"127.0.0.1", "127.0.0.3"},
			chains: []chainSpec{
				{name: "A", match: &fcm{PrefixRanges: []*corepb.CidrRange{cidr("127.0.0.1/32")}}},
				{name: "B", match: &fcm{PrefixRanges: []*corepb.CidrRange{cidr("127.0.0.0/24")}}},
			},
			conns: []conn{
				{lis: 0, srcIP: "127.0.0.1", wantChain: "A"},
				{lis: 0, srcIP: "127.0.0.3", wantChain: "A"},
				{lis: 1, srcIP: "127.0.0.1", wantChain: "B"},
				{lis: 1, srcIP: "127.0.0.3", wantChain: "B"},
			},
		},
		{
			desc: "destination prefix before source prefix",
			ips:  []string{"127.0.0.1", "127.0.0.3"},
			chains: []chainSpec{
				// More specific source, less specific destination.
				{name: "A", match: &fcm{PrefixRanges: []*corepb.CidrRange{cidr("127.0.0.0/8")}, SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}},
				{name: "B", match: &fcm{PrefixRanges: []*corepb.CidrRange{cidr("127.0.0.3/32")}}},
			},
			conns: []conn{
				{lis: 0, srcIP: "127.0.0.2", wantChain: "A"},
				{lis: 1, srcIP: "127.0.0.2", wantChain: "B"},
				// Destination 127.0.0.1 narrows to A, whose source does not match.
				{lis: 0, srcIP: "127.0.0.4", wantChain: ""},
			},
		},
		{
			desc: "source type SAME_IP_OR_LOOPBACK beats ANY with a longer source prefix; EXTERNAL never matches loopback",
			ips:  []string{"127.0.0.1"},
			chains: []chainSpec{
				{name: "A", match: &fcm{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}},
				{name: "B", match: &fcm{SourceType: listenerpb.FilterChainMatch_SAME_IP_OR_LOOPBACK}},
				{name: "C", match: &fcm{SourceType: listenerpb.FilterChainMatch_EXTERNAL}},
			},
			conns: []conn{
				{srcIP: "127.0.0.2", wantChain: "B"},
				{srcIP: "127.0.0.1", wantChain: "B"},
			},
		},
		{
			desc: "source type EXTERNAL only: loopback connections go to the default chain",
			ips:  []string{"127.0.0.1"},
			chains: []chainSpec{
				{name: "C", match: &fcm{SourceType: listenerpb.FilterChainMatch_EXTERNAL}},
			},
			def: &chainSpec{name: "D"},
			conns: []conn{
				{srcIP: "127.0.0.2", wantChain: "D"},
			},
		},
		{
			desc: "source port",
			ips:  []string{"127.0.0.1"},
			chains: []chainSpec{
				{name: "A", match: &fcm{SourcePorts: []uint32{uint32(srcPort)}}},
				{name: "B", match: &fcm{}},
			},
			conns: []conn{
				{srcIP: "127.0.0.6", srcPort: srcPort, wantChain: "A"},
				{srcIP: "127.0.0.6", wantChain: "B"},
			},
		},
		{
			desc: "chains that can never match are skipped",
			ips:  []string{"127.0.0.1"},
			chains: []chainSpec{
				{name: "S", match: &fcm{ServerNames: []string{"example.com"}}},
				{name: "P", match: &fcm{ApplicationProtocols: []string{"h2"}}},
				{name: "T", match: &fcm{TransportProtocol: "tls"}},
				{name: "R", match: &fcm{TransportProtocol: "raw_buffer", SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.7/32")}}},
			},
			def: &chainSpec{name: "D"},
			conns: []conn{
				{srcIP: "127.0.0.1", wantChain: "D"},
				{srcIP: "127.0.0.7", wantChain: "R"},
			},
		},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			t.Parallel()
			for _, ip := range test.ips {
				if lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0")); err != nil {
					t.Skipf("cannot listen on %s here: %v", ip, err)
				} else {
					lis.Close()
				}
			}
			ctx := testContext(t)
			env := newTestEnv(t)
			s := env.newServer(t)
			var addrs []net.Addr
			var listeners []*listenerpb.Listener
			for _, ip := range test.ips {
				lis, _ := listen(t, ip)
				s.serveOn(lis)
				addrs = append(addrs, lis.Addr())
				listeners = append(listeners, testListener(lis.Addr(), test.chains, test.def))
			}
			env.update(ctx, t, listeners, nil)
			for _, a := range addrs {
				s.modes.wait(ctx, t, a, connectivity.ServingModeServing)
			}
			names := []string{"D"}
			for _, c := range test.chains {
				names = append(names, c.name)
			}
			for _, c := range test.conns {
				if c.wantChain == "" {
					expectClosedNoBytes(t, addrs[c.lis], c.srcIP)
					continue
				}
				cl := newClient(t, addrs[c.lis], c.srcIP, c.srcPort)
				if got := cl.chainOf(ctx, t, names...); got != c.wantChain {
					t.Errorf("connection %s:%d -> %v served by chain %q, want %q", c.srcIP, c.srcPort, addrs[c.lis], got, c.wantChain)
				}
				if got := cl.dials.Load(); got != 1 {
					t.Errorf("client %s -> %v dialed %d times, want 1", c.srcIP, addrs[c.lis], got)
				}
			}
		})
	}
}
