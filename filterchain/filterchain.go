// Package filterchain validates an xDS Listener as this library's server
// does and tells which of its filter chains would serve a connection (gRFC
// A36, "FilterChainMatch").
//
// Compile applies every rule by which the server accepts or NACKs a
// Listener (gRFC A36, A29, A39 and the HTTP filters' own), so a control
// plane or a CI check can test its Listeners offline. Table.Lookup picks a
// connection's chain exactly as the server does.
//
// The package is pure: it starts no goroutine, does no I/O and does not use
// gRPC.
//
// # Stability
//
// Stable: Compile, Table and its methods, and the error types keep their
// meaning; FilterChain and Options may gain fields. What a chain contains
// beyond its name, role, routes and TLS is not part of this package.
package filterchain

import (
	"errors"
	"net/netip"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	internal "github.com/proxyless-grpc/xds/internal/filterchain"
)

// Options configures Compile. The zero value is ready to use.
type Options struct {
	// CertProviderInstances are the certificate provider instances of the
	// server's bootstrap (certificate_providers), each mapped to whether the
	// server can run its plugin (file_watcher, or a plugin registered with
	// grpc-go's certprovider package). Every instance a
	// DownstreamTlsContext names must be there with true, or the Listener
	// is invalid (gRFC A29). nil skips that check.
	CertProviderInstances map[string]bool
}

// Compile validates lis and compiles its filter chains. The error is a
// *ValidationError naming the offending chain and field: the server would
// NACK lis with it.
func Compile(lis *listenerpb.Listener, opts Options) (*Table, error) {
	t, err := internal.Compile(lis, internal.Options{CertProviderInstances: opts.CertProviderInstances})
	if err != nil {
		var ve *internal.ValidationError
		if errors.As(err, &ve) {
			return nil, &ValidationError{Chain: ve.Chain, Field: ve.Field, Err: ve.Err}
		}
		return nil, err
	}
	chains := t.Chains()
	out := &Table{t: t, chains: make([]*FilterChain, len(chains)), of: make(map[*internal.FilterChain]*FilterChain, len(chains))}
	for i, c := range chains {
		fc := &FilterChain{Name: c.Name, IsDefault: c.IsDefault, RouteConfigName: c.HCM.RDSName, TLS: c.TLS}
		for _, f := range c.HCM.Filters {
			fc.HTTPFilters = append(fc.HTTPFilters, f.Name)
		}
		out.chains[i], out.of[c] = fc, fc
	}
	return out, nil
}

// Table is a compiled Listener. It is immutable and safe for concurrent
// use.
type Table struct {
	t      *internal.Table
	chains []*FilterChain
	of     map[*internal.FilterChain]*FilterChain
}

// Lookup returns the chain that serves a connection from src to dst (the
// server's local address), or nil when none matches and the Listener has
// no default chain: the server then closes the connection.
func (t *Table) Lookup(src, dst netip.AddrPort) *FilterChain {
	return t.of[t.t.Lookup(src, dst)]
}

// Chains returns the chains in the Listener's order, the default chain
// last.
func (t *Table) Chains() []*FilterChain {
	return append([]*FilterChain(nil), t.chains...)
}

// CheckAddress reports, with an *AddressMismatchError, that the Listener is
// not for an xDS server listening on listening: the server then does not
// serve (gRFC A36; a Listener with port 0 matches any port of its IP).
func (t *Table) CheckAddress(listening netip.AddrPort) error {
	err := t.t.CheckAddress(listening)
	var am *internal.AddressMismatchError
	if errors.As(err, &am) {
		return &AddressMismatchError{Listener: am.Listener, Listening: am.Listening}
	}
	return err
}

// FilterChain is one validated filter chain. Immutable.
type FilterChain struct {
	// Name is the chain's name in the Listener; it may be empty.
	Name string
	// IsDefault reports that this is the Listener's default_filter_chain.
	IsDefault bool
	// RouteConfigName is the RouteConfiguration the chain takes from RDS;
	// empty when its HttpConnectionManager has an inline route_config.
	RouteConfigName string
	// HTTPFilters are the names of the HTTP filters the chain runs, in
	// order, the router last (optional filters of unknown types left out).
	HTTPFilters []string
	// TLS is the chain's validated DownstreamTlsContext, or nil when the
	// chain has no transport_socket. It must not be modified.
	TLS *tlspb.DownstreamTlsContext
}

// ValidationError says why a Listener is invalid.
type ValidationError struct {
	// Chain names the invalid chain by position and name, as in
	// `filter_chains[2] "foo"` or `default_filter_chain "bar"`; empty when
	// the problem is in a Listener-level field.
	Chain string
	// Field is the path of the offending field, relative to the chain (or
	// to the Listener), e.g. "filters[0].typed_config".
	Field string
	// Err says what is wrong with it.
	Err error
}

func (e *ValidationError) Error() string {
	return (&internal.ValidationError{Chain: e.Chain, Field: e.Field, Err: e.Err}).Error()
}

func (e *ValidationError) Unwrap() error { return e.Err }

// AddressMismatchError reports that a Listener is for another address.
type AddressMismatchError struct {
	// Listener is the address in the Listener resource.
	Listener netip.AddrPort
	// Listening is the address the server listens on.
	Listening netip.AddrPort
}

func (e *AddressMismatchError) Error() string {
	return (&internal.AddressMismatchError{Listener: e.Listener, Listening: e.Listening}).Error()
}
