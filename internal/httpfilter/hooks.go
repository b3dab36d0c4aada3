package httpfilter

import (
	"context"
	"crypto/x509"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/proxyless-grpc/xds/internal/ratelimitdesc"
)

// The interfaces below are the framework's hooks for built-in filters that
// need more than a Step: none is part of the public filter API.

// EnvFilter is implemented by filters whose top-level config is validated
// against where it came from (gRFC A102: a side channel's target must be
// allowed by the bootstrap, unless the management server is trusted). The
// parser calls ParseConfigEnv, with the value given to WithEnv (nil
// without one: a Listener checked offline, whose origin is unknown),
// instead of ParseConfig.
type EnvFilter interface {
	Filter
	ParseConfigEnv(env any, raw RawConfig) (Config, error)
}

// EnvOverrideFilter is implemented by filters whose override configs are
// validated against where they came from, as EnvFilter's top-level
// configs are (ext_proc: an ExtProcPerRoute may name its own grpc_service,
// gRFC A93, whose target and credentials gRFC A102 judges by the trust of
// the management server that sent the resource). The parser calls
// ParseOverrideEnv, with the value given to WithEnv (nil without one),
// instead of ParseOverride, for overrides in a Listener's inline
// RouteConfiguration and in an RDS RouteConfiguration alike.
type EnvOverrideFilter interface {
	Filter
	ParseOverrideEnv(env any, raw RawConfig) (Config, error)
}

// WithEnv sets what the parser gives EnvFilters, and returns p. The
// resource decoders pass the bootstrap and the management server the
// resource came from; the filter package that reads it defines its type.
//
// key identifies env to whatever keeps parsed configs (the parser's memo,
// filterchain's compiled chains of a previous Listener version): EnvFilters
// parse a config under any env of the same key as under env, and a config
// parsed under one key must not be used under another. gRFC A102's key is
// the trust of the server that sent the resource (grpcservice.Env.Key), so
// that a resource a trusted server sent and an untrusted one sends again,
// byte for byte, is checked again.
func (p *Parser) WithEnv(env any, key string) *Parser {
	if key != p.envKey {
		p.memo = map[memoKey]Config{}
		p.usedEnv = false
	}
	p.env, p.envKey = env, key
	return p
}

// EnvKey returns the key given to WithEnv ("" without one).
func (p *Parser) EnvKey() string { return p.envKey }

// UsedEnv reports whether p gave its env to a filter (EnvFilter,
// EnvOverrideFilter) for a config or override it parsed since its env key
// last changed: what p returned then holds only under its EnvKey. A
// RouteConfiguration whose overrides did is judged again when the same
// bytes come from a server of another trust.
func (p *Parser) UsedEnv() bool { return p.usedEnv }

// DependOnEnv reports whether some of filters had its config parsed by an
// EnvFilter, or is an EnvOverrideFilter whose overrides (those of the
// chain's inline routes, parsed by the same parser) were, so that it holds
// only under the parser's EnvKey.
func DependOnEnv(filters []Instance) bool {
	for _, in := range filters {
		switch in.Filter.(type) {
		case EnvFilter, EnvOverrideFilter:
			return true
		}
	}
	return false
}

// Acquirer is implemented by filters whose configs hold resources that
// outlive a configuration update but not their last user (gRFC A83: the
// ext_authz side channel). The server calls Acquire for each instance of a
// filter chain when it starts serving the chain, and the returned release
// once the chain is retired and its last connection has closed.
type Acquirer interface {
	Filter
	Acquire(config Config) (release func())
}

// AcquireAll acquires what the instances' configs hold (Acquirer) and
// returns the function that releases it all; never nil.
func AcquireAll(filters []Instance) (release func()) {
	var rels []func()
	for _, in := range filters {
		if a, ok := in.Filter.(Acquirer); ok {
			rels = append(rels, a.Acquire(in.Config))
		}
	}
	return func() {
		for _, r := range rels {
			r()
		}
	}
}

// SideCaller is implemented by filters that copy the request into a call
// to another service (ext_authz's Check, the global rate limit's
// ShouldRateLimit). A filter chain that runs one bounds its request headers
// by default (Envoy's max_request_headers_kb default), so that a client
// cannot send a request too large for that call and so make it fail.
type SideCaller interface {
	CallsOut() bool
}

// CallsOut reports whether one of filters calls another service with the
// request (SideCaller).
func CallsOut(filters []Instance) bool {
	for _, in := range filters {
		if c, ok := in.Filter.(SideCaller); ok && c.CallsOut() {
			return true
		}
	}
	return false
}

// Describer is implemented by filters that say more about an instance on
// the status page than its type (ext_authz: its authorization server).
type Describer interface {
	Describe(config Config) string
}

// LocalIdentityUser is implemented by filters whose steps read the
// server's own certificate (ext_authz: the destination principal, gRFC
// A92). The server then puts, in the context of each RPC of the chains
// that run them, a function returning the chain's current identity
// certificate (LocalIdentity).
type LocalIdentityUser interface {
	UsesLocalIdentity() bool
}

// UsesLocalIdentity reports whether one of filters reads the local identity.
func UsesLocalIdentity(filters []Instance) bool {
	for _, in := range filters {
		if u, ok := in.Filter.(LocalIdentityUser); ok && u.UsesLocalIdentity() {
			return true
		}
	}
	return false
}

type localIdentityKey struct{}

// WithLocalIdentity returns ctx carrying id, which returns the leaf of the
// identity certificate the connection's filter chain serves (nil without
// TLS, or before the chain has one).
func WithLocalIdentity(ctx context.Context, id func() *x509.Certificate) context.Context {
	return context.WithValue(ctx, localIdentityKey{}, id)
}

// LocalIdentity returns the certificate of WithLocalIdentity's function;
// nil when there is none.
func LocalIdentity(ctx context.Context) *x509.Certificate {
	if f, ok := ctx.Value(localIdentityKey{}).(func() *x509.Certificate); ok && f != nil {
		return f()
	}
	return nil
}

// ApplyHeader applies one header mutation to md (gRPC metadata: lower-case
// keys) as Envoy's append_action says, and reports whether md changed. An
// action it does not know changes nothing. The filters that change
// metadata (local rate limit, ext_authz) validate key and value first, each
// by its own rules.
func ApplyHeader(md map[string][]string, key, value string, action corepb.HeaderValueOption_HeaderAppendAction) bool {
	_, exists := md[key]
	switch action {
	case corepb.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
		md[key] = append(md[key], value)
	case corepb.HeaderValueOption_ADD_IF_ABSENT:
		if exists {
			return false
		}
		md[key] = []string{value}
	case corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
		md[key] = []string{value}
	case corepb.HeaderValueOption_OVERWRITE_IF_EXISTS:
		if !exists {
			return false
		}
		md[key] = []string{value}
	default:
		return false
	}
	return true
}

// RouteInfo is what a RouteFilter reads of the route a step is built for.
// Comparable; what it points to is immutable.
type RouteInfo struct {
	// Metadata is the route's metadata; nil without.
	Metadata *corepb.Metadata
	// VirtualHostRateLimits are the rate_limits of the route's virtual
	// host; nil without.
	VirtualHostRateLimits *ratelimitdesc.Policy
}

// RouteFilter is implemented by filters whose steps read more of their
// route than its overrides (the global rate limit: its virtual host's
// rate_limits, the route's metadata). The server calls BuildRouteStep
// instead of BuildStep; a nil Step still means nothing to do on the route.
type RouteFilter interface {
	Filter
	BuildRouteStep(instance string, config, override Config, route RouteInfo) (Step, error)
}
