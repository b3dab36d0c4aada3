// Package filterchain validates an xDS Listener for a gRPC server and
// compiles its filter chains into an immutable table that picks the chain of
// each new connection (gRFC A36, "xDS Protocol" and "FilterChainMatch").
//
// Compile is the only constructor. It either returns a precise error, which
// the caller turns into a NACK of the Listener, or a *Table. A Table and
// everything reachable from it are immutable and safe for concurrent use;
// Table.Lookup does not allocate and its cost does not depend on the number
// of filter chains.
//
// The package is pure: it starts no goroutines, does no I/O and does not
// depend on gRPC.
package filterchain

import (
	"fmt"
	"net/netip"
	"slices"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/routing"
)

// Options configures Compile. The zero value is ready to use.
type Options struct {
	// Filters validates the HTTP filters of every HttpConnectionManager and
	// of inline route configurations. Use one Parser per Listener decode, so
	// that identical filter configs are parsed once and shared. nil means
	// httpfilter.NewParser(nil), a fresh parser over the default registry.
	Filters *httpfilter.Parser
	// CertProviderInstances are the certificate provider instances of the
	// bootstrap (certificate_providers), each mapped to whether this server
	// can run its plugin (file_watcher, or a plugin registered with grpc-go's
	// certprovider registry). Every instance a DownstreamTlsContext names must
	// be in it with true, or the Listener is NACKed (gRFC A29). nil skips
	// that check (the other A29 rules still apply); an empty, non-nil map
	// means the bootstrap has no instances.
	CertProviderInstances map[string]bool
	// Previous, for CompileRaw, is the table of an earlier version of the
	// same Listener, compiled with the same CertProviderInstances and a
	// Filters of the same registry and bootstrap: chains whose bytes are
	// unchanged are reused from it, except the chains whose HTTP filters
	// depend on the environment (httpfilter.EnvFilter, gRFC A102's trust)
	// when the table was compiled under another Filters.EnvKey. nil
	// compiles every chain.
	Previous *Table
}

// Table is a compiled Listener: its address, its filter chains and the
// structure that selects one of them for a connection. A Table is immutable
// and safe for concurrent use.
type Table struct {
	address      netip.AddrPort
	chains       []*FilterChain // filter_chains in order, then the default chain
	defaultChain *FilterChain   // nil when the Listener has none
	lookup       lookupTable
	ignored      []string
	// envKey is the Filters.EnvKey the table was compiled under.
	envKey string
	// compiled are the filter_chains entries compiled by CompileRaw, by the
	// hash of their bytes, for the next version of the Listener; nil after
	// Compile.
	compiled map[uint64][]*compiledChain
}

// Ignored lists the fields of the Listener that were accepted but have no
// effect on a gRPC server, each as "where: field: why", for a debug log:
// fields gRFC A29 says to ignore, and deprecated fields next to the current
// ones that are used instead. A config shared by several chains is listed
// once. The slice must not be modified.
func (t *Table) Ignored() []string { return t.ignored }

// EnvKey returns the Filters.EnvKey the table was compiled under: the
// same bytes compiled under another key may configure the server otherwise.
func (t *Table) EnvKey() string { return t.envKey }

// Address returns the Listener's socket address, with an IPv4-mapped IPv6
// address turned into IPv4.
func (t *Table) Address() netip.AddrPort { return t.address }

// CheckAddress reports, with an *AddressMismatchError, that the Listener's
// address is not the one the server listens on; the server must then stop
// serving (gRFC A36, "xDS Protocol"). This is not a reason to NACK. A
// Listener with port 0 matches the listening address on any port, so that
// one Listener can serve instances whose ports are assigned dynamically; its
// IP must still match (gRFC A36 as updated in 2026, grpc/proposal#559).
// Zones are ignored and IPv4-mapped IPv6 addresses compare equal to IPv4
// ones.
func (t *Table) CheckAddress(listening netip.AddrPort) error {
	ip := listening.Addr().Unmap().WithZone("")
	if ip != t.address.Addr() || (t.address.Port() != 0 && t.address.Port() != listening.Port()) {
		return &AddressMismatchError{Listener: t.address, Listening: listening}
	}
	return nil
}

// Equal reports whether t and o serve every connection the same way: the
// same address and, in order, chains with the same IDs (their content),
// names and roles. It compares IDs, so it costs a few string comparisons
// per chain, and lets a re-sent Listener that serializes differently be
// recognized as unchanged without decoding it again.
func (t *Table) Equal(o *Table) bool {
	if t == o {
		return true
	}
	if t == nil || o == nil || t.address != o.address || len(t.chains) != len(o.chains) {
		return false
	}
	for i, c := range t.chains {
		oc := o.chains[i]
		if c.ID != oc.ID || c.Name != oc.Name || c.IsDefault != oc.IsDefault {
			return false
		}
	}
	return true
}

// Chains returns every filter chain of the Listener: the entries of
// filter_chains in order, then the default chain if there is one. Chains
// that can never match a connection are included. The slice is a copy; the
// chains are shared and must not be modified.
func (t *Table) Chains() []*FilterChain { return slices.Clone(t.chains) }

// DefaultChain returns the chain built from default_filter_chain, or nil
// when the Listener has none.
func (t *Table) DefaultChain() *FilterChain { return t.defaultChain }

// Lookup returns the filter chain for a connection from src (the peer's
// address) to dst (the connection's local address, whatever address the
// listener is bound to). It follows gRFC A36 "FilterChainMatch" and Envoy's
// order: destination IP (longest prefix), transport protocol ("raw_buffer"
// beats unset), directly connected source IP (longest prefix), source type
// (SAME_IP_OR_LOOPBACK or EXTERNAL beats ANY), source IP (longest prefix),
// source port (exact beats unset). Each stage keeps only the most specific
// candidates that match, and never falls back to less specific ones when a
// later stage rejects them all. An unset prefix list ranks with an explicit
// /0 of the connection's family; should both select chains in the last
// stage, the chain with explicit prefixes in earlier stages wins. Chains
// that can never match (see Chains) are skipped. When no chain matches,
// Lookup returns the default chain, or nil when there is none (the
// connection must then be closed without writing to it).
//
// IPv4-mapped IPv6 addresses are treated as IPv4. Lookup does not allocate
// and its cost is bounded by the address length, not the number of chains.
func (t *Table) Lookup(src, dst netip.AddrPort) *FilterChain {
	if c := t.lookup.find(src, dst); c != nil {
		return c
	}
	return t.defaultChain
}

// FilterChain is one validated filter chain. It is immutable; its pointer
// fields are shared and must not be modified.
type FilterChain struct {
	// ID identifies the chain's content: its normalized filter_chain_match
	// (ignored for the default chain), the serialized configs of its network
	// filters and transport socket, and whether it is the default chain;
	// for a chain whose HTTP filters depend on the environment
	// (httpfilter.EnvFilter), also the parser's EnvKey, since the same
	// bytes from a server of another trust configure it otherwise (gRFC
	// A102).
	// Chains with the same content have the same ID, also across Listener
	// updates and processes, so a connection on a chain whose ID is
	// unchanged can be kept without a drain. The name is not part of the
	// ID; an inline route_config is (it is in the HttpConnectionManager), a
	// RouteConfiguration from RDS is not.
	ID string
	// Name is the chain's name from the Listener; it may be empty.
	Name string
	// IsDefault reports whether this is the Listener's default_filter_chain.
	IsDefault bool
	// HCM is the chain's HttpConnectionManager. It is never nil, and chains
	// whose HttpConnectionManager configs are byte-for-byte identical share
	// one value.
	HCM *HTTPConnectionManager
	// TLS is the DownstreamTlsContext of the chain's transport socket, or nil
	// when the chain has no transport_socket (plaintext, or the fallback
	// credentials; gRFC A29). Security is what a server uses of it.
	TLS *tlspb.DownstreamTlsContext
	// Security is the validated TLS configuration of the chain (gRFC A29),
	// set exactly when TLS is. Chains with byte-for-byte identical
	// DownstreamTlsContexts share one value.
	Security *Security
}

// HTTPConnectionManager is a validated HttpConnectionManager network filter.
// Exactly one of RDSName and Routes is set.
type HTTPConnectionManager struct {
	// RDSName is the RouteConfiguration to watch when the HCM uses rds.
	RDSName string
	// Routes is the compiled inline route_config, when the HCM has one.
	Routes *routing.Router
	// Filters are the HTTP filters to run, in order, ending with the router
	// (gRFC A39). Optional filters of unknown types are left out.
	Filters []httpfilter.Instance
	// AccessLog is the compiled access_log (package internal/accesslog):
	// the loggers of the RPCs of chains using this HCM; nil without one.
	// Chains whose access_log configs serialize alike share one value, also
	// across the versions of a Listener that CompileRaw reuses chains from.
	AccessLog *accesslog.Config
	// MaxRequestHeaderBytes is max_request_headers_kb in bytes, and
	// MaxRequestHeaders common_http_protocol_options.max_headers_count: the
	// bounds of an RPC's request headers, their size and number as Envoy
	// counts them; 0 when the field is not set.
	MaxRequestHeaderBytes, MaxRequestHeaders int
}

// AddressMismatchError reports that a Listener's address is not the address
// the server listens on (gRFC A36, "xDS Protocol").
type AddressMismatchError struct {
	// Listener is the address in the Listener resource.
	Listener netip.AddrPort
	// Listening is the address the server listens on.
	Listening netip.AddrPort
}

// Error implements error.
func (e *AddressMismatchError) Error() string {
	return fmt.Sprintf("filterchain: Listener address %s does not match the listening address %s", e.Listener, e.Listening)
}

// ValidationError reports why a Listener is invalid; the caller NACKs it.
type ValidationError struct {
	// Chain names the invalid filter chain by position and name, as in
	// `filter_chains[2] "foo"` or `default_filter_chain "bar"`; it is empty
	// when the problem is in a Listener-level field.
	Chain string
	// Field is the path of the offending field, relative to the chain (or to
	// the Listener when Chain is empty), e.g. "filters[0].typed_config".
	Field string
	// Err says what is wrong with it.
	Err error
}

// Error implements error.
func (e *ValidationError) Error() string {
	if e.Chain == "" {
		return fmt.Sprintf("filterchain: %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("filterchain: %s: %s: %v", e.Chain, e.Field, e.Err)
}

// Unwrap returns the underlying error.
func (e *ValidationError) Unwrap() error { return e.Err }

// Compile validates lis (gRFC A36 "xDS Protocol", A39 for HTTP filters, A41
// for the HttpConnectionManager's client address settings) and compiles its
// filter chains. An error, always a *ValidationError, means the Listener
// must be NACKed.
func Compile(lis *listenerpb.Listener, opts Options) (*Table, error) {
	return compile(lis, len(lis.GetFilterChains()), opts, func(c *chainCompiler, i int) (chainSpec, error) {
		fc := lis.GetFilterChains()[i]
		_, spec, err := c.compile(chainRef{index: i, name: fc.GetName()}, fc)
		return spec, err
	})
}

// compile is Compile and CompileRaw: lis's Listener-level fields and
// default chain, and n filter_chains entries, which chainAt compiles.
func compile(lis *listenerpb.Listener, n int, opts Options, chainAt func(c *chainCompiler, i int) (chainSpec, error)) (*Table, error) {
	if lis == nil {
		return nil, &ValidationError{Field: "Listener", Err: errMissing}
	}
	p := opts.Filters
	if p == nil {
		p = httpfilter.NewParser(nil)
	}
	addr, err := listenerAddress(lis)
	if err != nil {
		return nil, err
	}
	c := newChainCompiler(p)
	c.instances = opts.CertProviderInstances
	t := &Table{address: addr, chains: make([]*FilterChain, 0, n+1), envKey: p.EnvKey()}
	specs := make([]chainSpec, 0, n)
	for i := range n {
		spec, err := chainAt(c, i)
		if err != nil {
			return nil, err
		}
		t.chains = append(t.chains, spec.chain)
		specs = append(specs, spec)
	}
	if fc := lis.GetDefaultFilterChain(); fc != nil {
		chain, _, err := c.compile(chainRef{index: -1, name: fc.GetName()}, fc)
		if err != nil {
			return nil, err
		}
		t.chains = append(t.chains, chain)
		t.defaultChain = chain
	}
	if err := checkDuplicates(specs); err != nil {
		return nil, err
	}
	t.lookup = buildLookup(specs)
	t.ignored = c.ignored
	return t, nil
}

// chainRef names a chain in errors.
type chainRef struct {
	index int // in filter_chains; -1 for default_filter_chain
	name  string
}

// String returns the chain's position and quoted name.
func (r chainRef) String() string {
	if r.index < 0 {
		return fmt.Sprintf("default_filter_chain %q", r.name)
	}
	return fmt.Sprintf("filter_chains[%d] %q", r.index, r.name)
}
