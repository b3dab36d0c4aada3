package filterchain

import (
	"errors"
	"fmt"
	"net/netip"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
)

var errMissing = errors.New("missing")

// listenerAddress checks the Listener-level fields gRFC A36 "xDS Protocol"
// constrains and returns the Listener's address: no listener filters, no
// use_original_dst, and a TCP socket address with a numeric IP and port.
func listenerAddress(lis *listenerpb.Listener) (netip.AddrPort, error) {
	if n := len(lis.GetListenerFilters()); n != 0 {
		return netip.AddrPort{}, &ValidationError{Field: "listener_filters", Err: fmt.Errorf("has %d entries, want none", n)}
	}
	if lis.GetUseOriginalDst().GetValue() {
		return netip.AddrPort{}, &ValidationError{Field: "use_original_dst", Err: errors.New("is true, want unset or false")}
	}
	ap, err := socketAddress(lis.GetAddress())
	if err != nil {
		return netip.AddrPort{}, &ValidationError{Field: "address", Err: err}
	}
	return ap, nil
}

// socketAddress converts a Listener address; only a TCP SocketAddress with
// an IP literal and a numeric port is usable by a gRPC server.
func socketAddress(a *corepb.Address) (netip.AddrPort, error) {
	if a == nil {
		return netip.AddrPort{}, errMissing
	}
	sa := a.GetSocketAddress()
	if sa == nil {
		return netip.AddrPort{}, fmt.Errorf("is a %T, want a socket_address", a.GetAddress())
	}
	if p := sa.GetProtocol(); p != corepb.SocketAddress_TCP {
		return netip.AddrPort{}, fmt.Errorf("socket_address.protocol is %v, want TCP", p)
	}
	if r := sa.GetResolverName(); r != "" {
		return netip.AddrPort{}, fmt.Errorf("socket_address.resolver_name is %q, want a numeric IP without a resolver", r)
	}
	ip, err := netip.ParseAddr(sa.GetAddress())
	if err != nil || ip.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("socket_address.address %q is not a numeric IP address", sa.GetAddress())
	}
	switch sa.GetPortSpecifier().(type) {
	case *corepb.SocketAddress_PortValue:
	case *corepb.SocketAddress_NamedPort:
		return netip.AddrPort{}, fmt.Errorf("socket_address has named_port %q, want port_value", sa.GetNamedPort())
	default:
		return netip.AddrPort{}, errors.New("socket_address.port_value is missing")
	}
	port := sa.GetPortValue()
	if port > 65535 {
		return netip.AddrPort{}, fmt.Errorf("socket_address.port_value %d is out of range", port)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
}
