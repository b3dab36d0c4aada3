// Package netaddr is the one home of the server's address normalisation:
// the addresses of connections, as filter chains, RBAC and the status page
// compare them, are netip values with IPv4-mapped IPv6 addresses unmapped
// (a dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d). It is
// pure: the standard library only.
package netaddr

import (
	"net"
	"net/netip"
)

// Unmap returns ap with an IPv4-mapped IPv6 address unmapped, its port
// kept.
func Unmap(ap netip.AddrPort) netip.AddrPort {
	if !ap.Addr().Is4In6() {
		return ap
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// FromNet returns the address and port of a TCP address (a *net.TCPAddr,
// or any net.Addr with an AddrPort method), unmapped. It reports false,
// with the zero value, for other kinds of address and for one without a
// valid IP.
func FromNet(a net.Addr) (netip.AddrPort, bool) {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		if a == nil {
			return netip.AddrPort{}, false
		}
		ap = a.AddrPort()
	case interface{ AddrPort() netip.AddrPort }:
		ap = a.AddrPort()
	default:
		return netip.AddrPort{}, false
	}
	if !ap.Addr().IsValid() {
		return netip.AddrPort{}, false
	}
	return Unmap(ap), true
}
