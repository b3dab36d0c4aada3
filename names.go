package xds

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// xdstpPrefix starts new-style (gRFC A47) resource names.
const xdstpPrefix = "xdstp:"

// listenerResourceName returns the name of the Listener resource a server
// listening on addr watches: tmpl with every "%s" replaced by "ip:port"
// ("[ip]:port" for IPv6). gRFC A36 does no escaping; for an xdstp:// template
// gRFC A47 percent-encodes every character of the replacement that RFC 3986
// section 3.3 does not allow in a URI path.
func listenerResourceName(tmpl string, addr netip.AddrPort) string {
	hostPort := net.JoinHostPort(addr.Addr().Unmap().String(), strconv.Itoa(int(addr.Port())))
	if strings.HasPrefix(tmpl, xdstpPrefix) {
		hostPort = percentEncodePath(hostPort)
	}
	return strings.ReplaceAll(tmpl, "%s", hostPort)
}

// percentEncodePath percent-encodes every byte of s that is not a pchar or '/'
// (RFC 3986 section 3.3: unreserved, sub-delims, ':' and '@').
func percentEncodePath(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isPathChar(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

// isPathChar reports whether c may appear unencoded in a URI path segment
// or is the segment separator '/'.
func isPathChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// xdstpAuthority returns the authority of an xdstp:// template, and false
// when tmpl is not one.
func xdstpAuthority(tmpl string) (string, bool) {
	rest, ok := strings.CutPrefix(tmpl, xdstpPrefix+"//")
	if !ok {
		return "", false
	}
	auth, _, _ := strings.Cut(rest, "/")
	return auth, true
}
