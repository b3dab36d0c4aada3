package netaddr_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/proxyless-grpc/xds/internal/netaddr"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

func TestFromNet(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		in     net.Addr
		want   netip.AddrPort
		wantOK bool
	}{
		{desc: "IPv4", in: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 80}, want: netip.MustParseAddrPort("10.0.0.1:80"), wantOK: true},
		{desc: "IPv4-mapped", in: &net.TCPAddr{IP: netip.MustParseAddr("::ffff:10.0.0.1").AsSlice(), Port: 80}, want: netip.MustParseAddrPort("10.0.0.1:80"), wantOK: true},
		{desc: "IPv6", in: &net.TCPAddr{IP: net.IPv6loopback, Port: 443}, want: netip.MustParseAddrPort("[::1]:443"), wantOK: true},
		{desc: "no IP", in: &net.TCPAddr{Port: 1}},
		{desc: "nil", in: (*net.TCPAddr)(nil)},
		{desc: "unix", in: &net.UnixAddr{Name: "/s", Net: "unix"}},
	} {
		got, ok := netaddr.FromNet(tc.in)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: FromNet(%v) = %v, %v; want %v, %v", tc.desc, tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
	if got := netaddr.Unmap(netip.MustParseAddrPort("[::ffff:127.0.0.1]:5")); got != netip.MustParseAddrPort("127.0.0.1:5") {
		t.Errorf("Unmap = %v, want 127.0.0.1:5", got)
	}
}
