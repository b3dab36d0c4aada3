package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Errors of ServerListenerName, for errors.Is; it wraps them in a
// *ListenerNameError.
var (
	// ErrNoServerListenerTemplate means the bootstrap has no
	// server_listener_resource_name_template, which an xDS server needs to
	// name its Listener resource (gRFC A36).
	ErrNoServerListenerTemplate = errors.New("the xDS bootstrap has no server_listener_resource_name_template, which an xDS server needs to name its Listener resource")

	// ErrBadXDSTPTemplate means the template is an xdstp:// name without an
	// authority part, "xdstp://<authority>/".
	ErrBadXDSTPTemplate = errors.New(`an xdstp name must start with "xdstp://<authority>/"`)

	// ErrUnknownAuthority means the template is an xdstp:// name whose
	// authority the bootstrap does not list (gRFC A47).
	ErrUnknownAuthority = errors.New("the authority is not in the bootstrap's authorities (gRFC A47)")
)

// ListenerNameError is why a server cannot name its Listener resource.
type ListenerNameError struct {
	// Template is the bootstrap's server_listener_resource_name_template.
	Template string
	// Authority is the template's xdstp:// authority, for
	// ErrUnknownAuthority.
	Authority string
	// Err is one of the sentinel errors above.
	Err error
}

func (e *ListenerNameError) Error() string {
	switch {
	case e.Template == "":
		return "bootstrap: " + e.Err.Error()
	case e.Authority != "":
		return fmt.Sprintf("bootstrap: server_listener_resource_name_template %q: authority %q: %v", e.Template, e.Authority, e.Err)
	}
	return fmt.Sprintf("bootstrap: server_listener_resource_name_template %q: %v", e.Template, e.Err)
}

func (e *ListenerNameError) Unwrap() error { return e.Err }

// xdstpScheme starts new-style (gRFC A47) resource names.
const xdstpScheme = "xdstp://"

// ServerListenerName returns the name of the Listener resource an xDS server
// listening on addr watches: server_listener_resource_name_template with
// every "%s" replaced by "ip:port" ("[ip]:port" for IPv6, an IPv4-mapped
// address unmapped). gRFC A36 does no escaping; for an xdstp:// template
// gRFC A47 percent-encodes every character of the replacement that a URI
// path may not hold (RFC 3986 section 3.3).
//
// It fails, with a *ListenerNameError, when the bootstrap has no template,
// or when the template is an xdstp:// name whose authority is malformed or
// not in the bootstrap's authorities. Those errors do not depend on addr,
// so a server can check them before it listens.
func (c *Config) ServerListenerName(addr netip.AddrPort) (string, error) {
	tmpl := c.ServerListenerResourceNameTemplate
	if tmpl == "" {
		return "", &ListenerNameError{Err: ErrNoServerListenerTemplate}
	}
	hostPort := net.JoinHostPort(addr.Addr().Unmap().String(), strconv.Itoa(int(addr.Port())))
	if strings.HasPrefix(tmpl, xdstpScheme) {
		if err := c.checkXDSTPAuthority(tmpl); err != nil {
			return "", err
		}
		hostPort = percentEncode(hostPort, pathChars)
	}
	return strings.ReplaceAll(tmpl, "%s", hostPort), nil
}

// checkXDSTPAuthority checks that the authority of an xdstp:// template is
// in the bootstrap, by its name as written or percent-decoded.
func (c *Config) checkXDSTPAuthority(tmpl string) error {
	auth, _, ok := strings.Cut(strings.TrimPrefix(tmpl, xdstpScheme), "/")
	if !ok || auth == "" {
		return &ListenerNameError{Template: tmpl, Err: ErrBadXDSTPTemplate}
	}
	if _, ok := c.ServersFor(auth); ok {
		return nil
	}
	if dec, err := url.PathUnescape(auth); err == nil {
		if _, ok := c.ServersFor(dec); ok {
			return nil
		}
	}
	return &ListenerNameError{Template: tmpl, Authority: auth, Err: ErrUnknownAuthority}
}

// Characters percentEncode keeps, besides ASCII letters and digits (RFC
// 3986): in an authority (section 3.2) unreserved characters, sub-delims,
// ':' and '@'; in a path (section 3.3) the same and the separator '/'.
const (
	authorityChars = "-._~!$&'()*+,;=:@"
	pathChars      = authorityChars + "/"
)

// percentEncode percent-encodes every byte of s that is not an ASCII letter
// or digit or in keep.
func percentEncode(s, keep string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(keep, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}
