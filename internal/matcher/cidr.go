package matcher

import (
	"net/netip"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
)

// CIDRMatcher is a compiled envoy.config.core.v3.CidrRange: a masked
// netip.Prefix. The zero value matches nothing. It is immutable and
// comparable.
type CIDRMatcher struct {
	prefix netip.Prefix
}

// NewCIDRMatcher compiles r. address_prefix must be an IPv4 or IPv6 address
// without a zone; an IPv4-mapped IPv6 address is taken as IPv4. prefix_len
// (0 when unset) is clamped to the family's length (32 or 128), as gRFC A36
// asks of FilterChainMatch ranges, and the address bits past it are cleared.
// Errors name the field relative to the CidrRange.
func NewCIDRMatcher(r *corepb.CidrRange) (CIDRMatcher, error) {
	if r == nil {
		return CIDRMatcher{}, fieldpath.Errorf("address_prefix", "empty, want an IP address")
	}
	s := r.GetAddressPrefix()
	if s == "" {
		return CIDRMatcher{}, fieldpath.Errorf("address_prefix", "empty, want an IP address")
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return CIDRMatcher{}, fieldpath.Errorf("address_prefix", "%q is not an IP address", s)
	}
	if addr.Zone() != "" {
		return CIDRMatcher{}, fieldpath.Errorf("address_prefix", "%q has a zone, want an address without one", s)
	}
	addr = addr.Unmap()
	bits := addr.BitLen()
	if n := r.GetPrefixLen().GetValue(); n < uint32(bits) {
		bits = int(n)
	}
	// Prefix cannot fail: the address is valid, has no zone and bits is in
	// range.
	p, err := addr.Prefix(bits)
	if err != nil {
		return CIDRMatcher{}, fieldpath.Errorf("address_prefix", "%q/%d: %w", s, bits, err)
	}
	return CIDRMatcher{prefix: p}, nil
}

// Contains reports whether a is in the range. An IPv4-mapped IPv6 address is
// matched as the IPv4 address it maps; a zone is ignored.
func (m CIDRMatcher) Contains(a netip.Addr) bool {
	return m.prefix.Contains(a.Unmap().WithZone(""))
}

// Prefix returns the masked prefix; it is the zero Prefix for the zero
// CIDRMatcher.
func (m CIDRMatcher) Prefix() netip.Prefix { return m.prefix }
