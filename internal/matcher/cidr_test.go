package matcher_test

import (
	"net/netip"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/matcher"
)

func cidr(addr string, n *uint32) *corepb.CidrRange {
	r := &corepb.CidrRange{AddressPrefix: addr}
	if n != nil {
		r.PrefixLen = wrapperspb.UInt32(*n)
	}
	return r
}

func u32(n uint32) *uint32 { return &n }

func TestCIDRMatcher(t *testing.T) {
	tests := []struct {
		desc       string
		r          *corepb.CidrRange
		wantPrefix string
		in, out    []string
	}{
		{desc: "ipv4", r: cidr("10.1.2.3", u32(16)), wantPrefix: "10.1.0.0/16", in: []string{"10.1.255.1", "::ffff:10.1.0.1"}, out: []string{"10.2.0.0", "::1"}},
		{desc: "unset prefix_len is 0", r: cidr("10.1.2.3", nil), wantPrefix: "0.0.0.0/0", in: []string{"1.2.3.4"}, out: []string{"::1"}},
		{desc: "ipv4 prefix_len clamped", r: cidr("10.1.2.3", u32(99)), wantPrefix: "10.1.2.3/32", in: []string{"10.1.2.3"}, out: []string{"10.1.2.4"}},
		{desc: "ipv6", r: cidr("2001:db8::1", u32(32)), wantPrefix: "2001:db8::/32", in: []string{"2001:db8:ffff::1"}, out: []string{"2001:db9::", "10.0.0.1"}},
		{desc: "ipv6 prefix_len clamped", r: cidr("2001:db8::1", u32(1000)), wantPrefix: "2001:db8::1/128", in: []string{"2001:db8::1"}, out: []string{"2001:db8::2"}},
		{desc: "ipv4-mapped range is ipv4", r: cidr("::ffff:10.0.0.0", u32(8)), wantPrefix: "10.0.0.0/8", in: []string{"10.9.9.9"}},
		{desc: "zone of the address ignored", r: cidr("fe80::", u32(10)), wantPrefix: "fe80::/10", in: []string{"fe80::1%eth0"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			m, err := matcher.NewCIDRMatcher(tc.r)
			if err != nil {
				t.Fatalf("NewCIDRMatcher(%v) failed: %v", tc.r, err)
			}
			if got := m.Prefix().String(); got != tc.wantPrefix {
				t.Errorf("Prefix() = %s, want %s", got, tc.wantPrefix)
			}
			for _, a := range tc.in {
				if !m.Contains(netip.MustParseAddr(a)) {
					t.Errorf("Contains(%s) = false, want true", a)
				}
			}
			for _, a := range tc.out {
				if m.Contains(netip.MustParseAddr(a)) {
					t.Errorf("Contains(%s) = true, want false", a)
				}
			}
		})
	}
	var zero matcher.CIDRMatcher
	if zero.Contains(netip.MustParseAddr("1.2.3.4")) {
		t.Errorf("zero CIDRMatcher contains 1.2.3.4, want nothing")
	}
}

func TestNewCIDRMatcherErrors(t *testing.T) {
	for _, r := range []*corepb.CidrRange{nil, cidr("", nil), cidr("10.0.0.0/8", nil), cidr("host", u32(1)), cidr("fe80::1%eth0", u32(64))} {
		if _, err := matcher.NewCIDRMatcher(r); err == nil || !strings.HasPrefix(err.Error(), "address_prefix") {
			t.Errorf("NewCIDRMatcher(%v) = %v, want an error naming address_prefix", r, err)
		}
	}
}

func TestCIDRContainsNoAllocs(t *testing.T) {
	m, err := matcher.NewCIDRMatcher(cidr("10.0.0.0", u32(8)))
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("::ffff:10.1.1.1")
	if n := testing.AllocsPerRun(100, func() { m.Contains(a) }); n != 0 {
		t.Errorf("Contains allocates %v times, want 0", n)
	}
}
