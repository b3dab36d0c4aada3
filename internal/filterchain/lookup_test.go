package filterchain_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
)

const (
	sameIP   = listenerpb.FilterChainMatch_SAME_IP_OR_LOOPBACK
	external = listenerpb.FilterChainMatch_EXTERNAL
)

// probe is one connection and the name of the chain it must get ("<nil>"
// for none).
type probe struct {
	src, dst string
	want     string
}

func TestLookup(t *testing.T) {
	tests := []struct {
		desc   string
		lis    *listenerpb.Listener
		probes []probe
	}{
		{
			desc: "destination: longest prefix wins",
			lis: newListener(
				chain("8", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/8")}),
				chain("16", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.1.0.0/16")}),
				chain("any", nil),
			),
			probes: []probe{
				{"1.1.1.1:5", "10.1.2.3:80", "16"},
				{"1.1.1.1:5", "10.2.0.1:80", "8"},
				{"1.1.1.1:5", "192.168.0.1:80", "any"},
				{"[2001:db8::1]:5", "[2001:db8::2]:80", "any"},
			},
		},
		{
			desc: "destination: no fallback to a shorter prefix",
			lis: withDefault(newListener(
				chain("16-src", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.1.0.0/16"), SourcePrefixRanges: cidrs("192.168.0.0/16")}),
				chain("8", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/8")}),
			)),
			probes: []probe{
				{"192.168.1.1:5", "10.1.0.1:80", "16-src"},
				{"172.16.0.1:5", "10.1.0.1:80", "default"},
				{"172.16.0.1:5", "10.2.0.1:80", "8"},
			},
		},
		{
			desc: "destination: the local address is used on a specific listener address",
			lis: func() *listenerpb.Listener {
				l := newListener(
					chain("lo", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("127.0.0.2/32")}),
					chain("other", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("127.0.0.0/8")}),
				)
				l.Address = socketAddress("127.0.0.2", 8080)
				return l
			}(),
			probes: []probe{
				{"127.0.0.1:5", "127.0.0.2:8080", "lo"},
				{"127.0.0.1:5", "127.0.0.3:8080", "other"},
			},
		},
		{
			desc: "source type: specific beats ANY",
			lis: newListener(
				chain("local", &listenerpb.FilterChainMatch{SourceType: sameIP}),
				chain("external", &listenerpb.FilterChainMatch{SourceType: external}),
				chain("any", nil),
			),
			probes: []probe{
				{"127.0.0.1:5", "10.0.0.1:80", "local"},
				{"10.0.0.1:5", "10.0.0.1:80", "local"},
				{"[::1]:5", "[2001:db8::1]:80", "local"},
				{"10.0.0.2:5", "10.0.0.1:80", "external"},
			},
		},
		{
			desc: "source type: ANY when the specific type has no chain",
			lis: newListener(
				chain("local", &listenerpb.FilterChainMatch{SourceType: sameIP}),
				chain("any", nil),
			),
			probes: []probe{
				{"127.0.0.1:5", "10.0.0.1:80", "local"},
				{"10.0.0.2:5", "10.0.0.1:80", "any"},
			},
		},
		{
			desc: "source type: no fallback to ANY",
			lis: withDefault(newListener(
				chain("local-10", &listenerpb.FilterChainMatch{SourceType: sameIP, SourcePrefixRanges: cidrs("10.0.0.0/8")}),
				chain("any", nil),
			)),
			probes: []probe{
				{"10.0.0.1:5", "10.0.0.1:80", "local-10"},
				{"192.168.0.1:5", "192.168.0.1:80", "default"},
				{"192.168.0.1:5", "10.0.0.1:80", "any"},
			},
		},
		{
			desc: "source IP: longest prefix wins",
			lis: newListener(
				chain("16", &listenerpb.FilterChainMatch{SourcePrefixRanges: cidrs("192.168.0.0/16")}),
				chain("24", &listenerpb.FilterChainMatch{SourcePrefixRanges: cidrs("192.168.1.0/24")}),
				chain("any", nil),
			),
			probes: []probe{
				{"192.168.1.7:5", "10.0.0.1:80", "24"},
				{"192.168.2.7:5", "10.0.0.1:80", "16"},
				{"172.16.0.1:5", "10.0.0.1:80", "any"},
			},
		},
		{
			desc: "source IP: no fallback to a shorter prefix",
			lis: withDefault(newListener(
				chain("16-port", &listenerpb.FilterChainMatch{SourcePrefixRanges: cidrs("10.1.0.0/16"), SourcePorts: []uint32{80}}),
				chain("8", &listenerpb.FilterChainMatch{SourcePrefixRanges: cidrs("10.0.0.0/8")}),
			)),
			probes: []probe{
				{"10.1.2.3:80", "1.1.1.1:80", "16-port"},
				{"10.1.2.3:81", "1.1.1.1:80", "default"},
				{"10.2.2.3:81", "1.1.1.1:80", "8"},
			},
		},
		{
			desc: "source port: exact beats any",
			lis: withDefault(newListener(
				chain("80", &listenerpb.FilterChainMatch{SourcePorts: []uint32{80, 8080}}),
				chain("any", nil),
				chain("only-443", &listenerpb.FilterChainMatch{SourcePrefixRanges: cidrs("10.0.0.0/8"), SourcePorts: []uint32{443}}),
			)),
			probes: []probe{
				{"1.1.1.1:80", "2.2.2.2:80", "80"},
				{"1.1.1.1:8080", "2.2.2.2:80", "80"},
				{"1.1.1.1:81", "2.2.2.2:80", "any"},
				{"10.0.0.1:443", "2.2.2.2:80", "only-443"},
				{"10.0.0.1:444", "2.2.2.2:80", "default"},
			},
		},
		{
			desc: "A36's four-matcher example",
			lis: withDefault(newListener(chain("four", &listenerpb.FilterChainMatch{
				PrefixRanges:       cidrs("192.168.0.0/24", "10.1.0.0/16"),
				SourcePrefixRanges: cidrs("192.168.1.0/24", "10.2.0.0/16"),
				SourceType:         external,
			}))),
			probes: []probe{
				{"192.168.1.1:5", "192.168.0.1:80", "four"},
				{"10.2.0.1:5", "192.168.0.1:80", "four"},
				{"192.168.1.1:5", "10.1.0.1:80", "four"},
				{"10.2.0.1:5", "10.1.0.1:80", "four"},
				{"10.3.0.1:5", "10.1.0.1:80", "default"},
				{"10.2.0.1:5", "10.3.0.1:80", "default"},
				{"10.1.0.1:5", "10.1.0.1:80", "default"}, // same IP: not EXTERNAL
			},
		},
		{
			desc: "IPv6",
			lis: withDefault(newListener(
				chain("32", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("2001:db8::/32")}),
				chain("48", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("2001:db8:1::/48"), SourcePrefixRanges: cidrs("fd00::/8")}),
				chain("128", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("2001:db8:1::1/128")}),
			)),
			probes: []probe{
				{"[fd00::1]:5", "[2001:db8:1::2]:80", "48"},
				{"[fe80::1]:5", "[2001:db8:1::2]:80", "default"},
				{"[fe80::1]:5", "[2001:db8:1::1]:80", "128"},
				{"[fe80::1]:5", "[2001:db8:2::1]:80", "32"},
				{"[fe80::1]:5", "[2001:db9::1]:80", "default"},
				{"1.2.3.4:5", "10.0.0.1:80", "default"},
			},
		},
		{
			desc: "IPv4-mapped IPv6 in config and in addresses",
			lis: withDefault(newListener(
				chain("mapped", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("::ffff:10.0.0.0/104")}),
				chain("v4-src", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("192.168.0.0/16"), SourcePrefixRanges: cidrs("172.16.0.0/12")}),
			)),
			probes: []probe{
				{"1.1.1.1:5", "10.1.2.3:80", "mapped"},
				{"[::ffff:1.1.1.1]:5", "[::ffff:10.1.2.3]:80", "mapped"},
				{"[::ffff:172.16.0.1]:5", "[::ffff:192.168.0.1]:80", "v4-src"},
				{"[2001:db8::1]:5", "[::a01:203]:80", "default"}, // ::10.1.2.3 is not mapped
			},
		},
		{
			desc: "a /0 matches only its own family",
			lis: withDefault(newListener(
				chain("v4", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("0.0.0.0/0")}),
				chain("v6-src", &listenerpb.FilterChainMatch{SourcePrefixRanges: cidrs("::/0"), SourceType: external}),
			)),
			probes: []probe{
				{"1.1.1.1:5", "1.1.1.1:80", "v4"},
				// v6-src's absent destination shares v4's /0; its EXTERNAL
				// type beats ANY, then its ::/0 source fails: no fallback.
				{"1.1.1.1:5", "2.2.2.2:80", "default"},
				{"[2001:db8::1]:5", "[2001:db8::2]:80", "v6-src"},
				{"[::ffff:1.1.1.1]:5", "[::1]:80", "default"},
			},
		},
		{
			desc: "an explicit /0 and an absent prefix compete at the same specificity",
			lis: newListener(
				chain("v4-zero", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("0.0.0.0/0")}),
				chain("absent-local", &listenerpb.FilterChainMatch{SourceType: sameIP}),
				chain("absent", nil),
			),
			probes: []probe{
				{"1.1.1.1:5", "2.2.2.2:80", "v4-zero"},
				{"127.0.0.1:5", "2.2.2.2:80", "absent-local"},
				{"[2001:db8::1]:5", "[2001:db8::2]:80", "absent"},
			},
		},
		{
			desc: "overlapping prefixes at every IP stage",
			lis: withDefault(newListener(
				chain("d8", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/8")}),
				chain("d8-s8", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/8"), SourcePrefixRanges: cidrs("172.0.0.0/8")}),
				chain("d8-s16", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/8"), SourcePrefixRanges: cidrs("172.16.0.0/16")}),
				chain("d24-s16", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/24"), SourcePrefixRanges: cidrs("172.16.0.0/16")}),
			)),
			probes: []probe{
				{"172.16.1.1:5", "10.0.0.1:80", "d24-s16"},
				{"172.17.1.1:5", "10.0.0.1:80", "default"},
				{"172.16.1.1:5", "10.0.1.1:80", "d8-s16"},
				{"172.17.1.1:5", "10.0.1.1:80", "d8-s8"},
				{"1.1.1.1:5", "10.0.1.1:80", "d8"},
			},
		},
		{
			desc: "direct source prefix comes before source type",
			lis: withDefault(newListener(
				chain("direct", &listenerpb.FilterChainMatch{DirectSourcePrefixRanges: cidrs("10.0.0.0/8"), SourcePorts: []uint32{1}}),
				chain("local", &listenerpb.FilterChainMatch{SourceType: sameIP}),
			)),
			probes: []probe{
				{"10.0.0.1:1", "10.0.0.1:80", "direct"},
				{"10.0.0.1:2", "10.0.0.1:80", "default"},
				{"11.0.0.1:2", "11.0.0.1:80", "local"},
			},
		},
		{
			desc: "transport protocol: raw_buffer beats empty, without fallback",
			lis: withDefault(newListener(
				chain("raw-port", &listenerpb.FilterChainMatch{TransportProtocol: "raw_buffer", SourcePorts: []uint32{1}}),
				chain("empty", nil),
				chain("empty-10", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/8")}),
			)),
			probes: []probe{
				{"1.1.1.1:1", "2.2.2.2:80", "raw-port"},
				{"1.1.1.1:2", "2.2.2.2:80", "default"},
				{"1.1.1.1:2", "10.0.0.1:80", "empty-10"},
			},
		},
		{
			desc: "chains that can never match are never selected",
			lis: withDefault(newListener(
				chain("sni", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/8"), ServerNames: []string{"x"}}),
				chain("alpn", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/16"), ApplicationProtocols: []string{"h2"}}),
				chain("dport", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/24"), DestinationPort: wrapperspb.UInt32(80)}),
				chain("tls", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.0.0.0/32"), TransportProtocol: "tls"}),
				chain("raw", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.1.0.0/16"), TransportProtocol: "raw_buffer"}),
			)),
			probes: []probe{
				{"1.1.1.1:5", "10.0.0.0:80", "default"},
				{"1.1.1.1:5", "10.1.0.0:80", "raw"},
			},
		},
		{
			desc: "prefix_len clamped, absent, and low bits masked",
			lis: withDefault(newListener(
				chain("clamped", &listenerpb.FilterChainMatch{PrefixRanges: []*corepb.CidrRange{cidrLen("10.0.0.1", 40)}}),
				chain("masked", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("10.1.2.3/8")}),
				chain("absent-len", &listenerpb.FilterChainMatch{PrefixRanges: cidrs("172.16.0.0/12"), SourcePrefixRanges: cidrs("192.168.0.0")}),
				chain("clamped-v6", &listenerpb.FilterChainMatch{PrefixRanges: []*corepb.CidrRange{cidrLen("2001:db8::1", 200)}}),
			)),
			probes: []probe{
				{"1.1.1.1:5", "10.0.0.1:80", "clamped"},
				{"1.1.1.1:5", "10.0.0.2:80", "masked"},
				{"1.1.1.1:5", "10.200.0.1:80", "masked"},
				{"1.1.1.1:5", "172.16.0.1:80", "absent-len"},
				{"[::2]:5", "172.16.0.1:80", "default"},
				{"[::2]:5", "[2001:db8::1]:80", "clamped-v6"},
				{"[::2]:5", "[2001:db8::2]:80", "default"},
			},
		},
		{
			desc:   "no chains and no default chain",
			lis:    newListener(),
			probes: []probe{{"1.1.1.1:5", "2.2.2.2:80", "<nil>"}},
		},
		{
			desc:   "only a default chain",
			lis:    withDefault(newListener()),
			probes: []probe{{"1.1.1.1:5", "2.2.2.2:80", "default"}},
		},
		{
			desc:   "no match and no default chain",
			lis:    newListener(chain("a", &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}})),
			probes: []probe{{"1.1.1.1:5", "2.2.2.2:80", "<nil>"}, {"1.1.1.1:1", "2.2.2.2:80", "a"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			tbl := mustCompile(t, tc.lis)
			var got, want []string
			for _, p := range tc.probes {
				got = append(got, fmt.Sprintf("%s->%s: %s", p.src, p.dst, chainName(tbl.Lookup(ap(p.src), ap(p.dst)))))
				want = append(want, fmt.Sprintf("%s->%s: %s", p.src, p.dst, p.want))
			}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("Lookup() mismatch (-got, +want):\n%s", diff)
			}
		})
	}
}

func TestCheckAddress(t *testing.T) {
	tests := []struct {
		desc      string
		lisAddr   string
		anyPort   bool // the Listener's port is 0
		listening string
		wantErr   bool
	}{
		{desc: "same", lisAddr: "0.0.0.0", listening: "0.0.0.0:8080"},
		// gRFC A36 (2026 update): port 0 matches any listening port; the IP
		// must still match.
		{desc: "port 0 matches any port", lisAddr: "127.0.0.1", anyPort: true, listening: "127.0.0.1:43210"},
		{desc: "port 0, mapped listening address", lisAddr: "0.0.0.0", anyPort: true, listening: "[::ffff:0.0.0.0]:1"},
		{desc: "port 0, other IP", lisAddr: "127.0.0.1", anyPort: true, listening: "127.0.0.2:43210", wantErr: true},
		{desc: "port 0, other family", lisAddr: "0.0.0.0", anyPort: true, listening: "[::]:43210", wantErr: true},
		{desc: "mapped listening address", lisAddr: "0.0.0.0", listening: "[::ffff:0.0.0.0]:8080"},
		{desc: "mapped Listener address", lisAddr: "::ffff:127.0.0.1", listening: "127.0.0.1:8080"},
		{desc: "other family", lisAddr: "0.0.0.0", listening: "[::]:8080", wantErr: true},
		{desc: "other port", lisAddr: "0.0.0.0", listening: "0.0.0.0:8081", wantErr: true},
		{desc: "other IP", lisAddr: "127.0.0.1", listening: "127.0.0.2:8080", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			l := newListener()
			port := uint32(8080)
			if tc.anyPort {
				port = 0
			}
			l.Address = socketAddress(tc.lisAddr, port)
			tbl := mustCompile(t, l)
			err := tbl.CheckAddress(ap(tc.listening))
			var me *filterchain.AddressMismatchError
			if got := errors.As(err, &me); got != tc.wantErr {
				t.Fatalf("CheckAddress(%v) = %v, want an *AddressMismatchError: %v", tc.listening, err, tc.wantErr)
			}
			if me != nil && (me.Listener != tbl.Address() || me.Listening != ap(tc.listening)) {
				t.Errorf("CheckAddress(%v) = %+v, want Listener %v, Listening %v", tc.listening, me, tbl.Address(), tc.listening)
			}
		})
	}
}

func TestChainContents(t *testing.T) {
	tsV1 := chain("ts-v1", &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}})
	tsV1.Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: typedStructHCM(false, hcmURL, hcmJSON())}
	tsV3 := chain("ts-v3", &listenerpb.FilterChainMatch{SourcePorts: []uint32{2}})
	tsV3.Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: typedStructHCM(true, hcmURL, hcmJSON())}
	inline := chain("inline", &listenerpb.FilterChainMatch{SourcePorts: []uint32{3}})
	inline.Filters = []*listenerpb.Filter{hcmFilter(inlineHCM())}
	inline.TransportSocket = tlsSocket()
	l := withDefault(newListener(chain("a", nil), tsV1, tsV3, inline))
	tbl := mustCompile(t, l)

	type summary struct {
		Name      string
		IsDefault bool
		RDSName   string
		Inline    bool
		Filters   []string
		MTLS      bool
	}
	var got []summary
	for _, c := range tbl.Chains() {
		s := summary{Name: c.Name, IsDefault: c.IsDefault, RDSName: c.HCM.RDSName, Inline: c.HCM.Routes != nil, MTLS: c.TLS.GetRequireClientCertificate().GetValue()}
		for _, f := range c.HCM.Filters {
			s.Filters = append(s.Filters, f.Name)
		}
		got = append(got, s)
	}
	want := []summary{
		{Name: "a", RDSName: "routes", Filters: []string{"router"}},
		{Name: "ts-v1", RDSName: "routes", Filters: []string{"router"}},
		{Name: "ts-v3", RDSName: "routes", Filters: []string{"router"}},
		{Name: "inline", Inline: true, Filters: []string{"router"}, MTLS: true},
		{Name: "default", IsDefault: true, RDSName: "routes", Filters: []string{"router"}},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Chains() mismatch (-got, +want):\n%s", diff)
	}
	chains := tbl.Chains()
	if tbl.DefaultChain() != chains[4] {
		t.Errorf("DefaultChain() = %p, want the last of Chains() %p", tbl.DefaultChain(), chains[4])
	}
	if chains[0].HCM != chains[4].HCM {
		t.Errorf("chains with identical HCM configs have different *HTTPConnectionManager values %p, %p", chains[0].HCM, chains[4].HCM)
	}
	if chains[0].TLS != nil {
		t.Errorf("TLS of a chain without transport_socket = %v, want nil", chains[0].TLS)
	}
}

func TestChainIDs(t *testing.T) {
	build := func(f func(l *listenerpb.Listener)) []string {
		l := withDefault(newListener(
			chain("a", &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}, PrefixRanges: cidrs("10.0.0.0/8")}),
			chain("b", &listenerpb.FilterChainMatch{SourcePorts: []uint32{2}}),
		))
		f(l)
		var ids []string
		for _, c := range mustCompile(t, l).Chains() {
			ids = append(ids, c.ID)
		}
		return ids
	}
	base := build(func(*listenerpb.Listener) {})
	tests := []struct {
		desc     string
		change   func(l *listenerpb.Listener)
		wantSame []bool // per chain: a, b, default
	}{
		{desc: "nothing changed", change: func(*listenerpb.Listener) {}, wantSame: []bool{true, true, true}},
		{desc: "chain renamed", change: func(l *listenerpb.Listener) { l.FilterChains[1].Name = "b2" }, wantSame: []bool{true, true, true}},
		{
			desc:     "listener-level field changed",
			change:   func(l *listenerpb.Listener) { l.StatPrefix = "x" },
			wantSame: []bool{true, true, true},
		},
		{
			desc: "HCM changed",
			change: func(l *listenerpb.Listener) {
				h := rdsHCM("other")
				l.FilterChains[0].Filters = []*listenerpb.Filter{hcmFilter(h)}
			},
			wantSame: []bool{false, true, true},
		},
		{
			desc: "same HCM bytes under another type URL prefix",
			change: func(l *listenerpb.Listener) {
				a := l.FilterChains[0].Filters[0].GetTypedConfig()
				a.TypeUrl = "example.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
			},
			wantSame: []bool{false, true, true},
		},
		{
			desc:     "match equal after normalization",
			change:   func(l *listenerpb.Listener) { l.FilterChains[0].FilterChainMatch.PrefixRanges = cidrs("10.1.2.3/8") },
			wantSame: []bool{true, true, true},
		},
		{
			desc: "default chain's match, which is ignored, changed",
			change: func(l *listenerpb.Listener) {
				l.DefaultFilterChain.FilterChainMatch = &listenerpb.FilterChainMatch{SourcePorts: []uint32{9}}
			},
			wantSame: []bool{true, true, true},
		},
		{
			desc:     "match changed",
			change:   func(l *listenerpb.Listener) { l.FilterChains[1].FilterChainMatch.SourcePorts = []uint32{3} },
			wantSame: []bool{true, false, true},
		},
		{
			desc:     "transport socket added",
			change:   func(l *listenerpb.Listener) { l.DefaultFilterChain.TransportSocket = tlsSocket() },
			wantSame: []bool{true, true, false},
		},
		{
			desc: "order of chains changed",
			change: func(l *listenerpb.Listener) {
				l.FilterChains[0], l.FilterChains[1] = l.FilterChains[1], l.FilterChains[0]
				l.FilterChains[0].Name, l.FilterChains[1].Name = "a", "b"
			},
			wantSame: []bool{false, false, true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ids := build(tc.change)
			var got []bool
			for i := range ids {
				got = append(got, ids[i] == base[i])
			}
			if diff := cmp.Diff(got, tc.wantSame); diff != "" {
				t.Errorf("ID unchanged per chain (-got, +want):\n%s", diff)
			}
		})
	}
	// The default chain and a chain of filter_chains with the same content
	// are different chains.
	l := newListener(chain("a", nil))
	l.DefaultFilterChain = chain("a", nil)
	chains := mustCompile(t, l).Chains()
	if chains[0].ID == chains[1].ID {
		t.Errorf("filter chain and default chain with the same content have the same ID %q", chains[0].ID)
	}
}

// TestLookupConcurrent shares one Table between goroutines; run with -race.
func TestLookupConcurrent(t *testing.T) {
	tbl := mustCompile(t, benchListener(100, false))
	conns := benchConns(100, false)
	want := make([]*filterchain.FilterChain, len(conns))
	for i, c := range conns {
		want[i] = tbl.Lookup(c[0], c[1])
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				for i, c := range conns {
					if got := tbl.Lookup(c[0], c[1]); got != want[i] {
						t.Errorf("Lookup(%v, %v) = %s, want %s", c[0], c[1], chainName(got), chainName(want[i]))
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
