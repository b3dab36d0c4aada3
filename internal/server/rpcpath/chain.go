package rpcpath

import (
	"context"
	"crypto/x509"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
)

// Chain gives the gRPC servers of one filter chain's connections what the
// chain's HTTP filters need (httpfilter.Needs): always the tap handle; the
// interceptors that run the work steps return for after the tap when a
// filter may return some, ahead of every interceptor of the user's; and,
// when a filter keeps per-connection state, a tap handle of each
// connection's own that carries that state. A chain whose filters need
// neither gets exactly the tap handle, shared by its connections.
// Immutable.
type Chain struct {
	tap     *tapper // the shared handle (its conn is nil)
	needs   httpfilter.Needs
	localID bool // a filter reads the local identity
}

// DefaultMaxRequestHeaderBytes bounds the request headers of the RPCs of a
// filter chain whose HttpConnectionManager sets no max_request_headers_kb
// and which runs a filter that copies the request into a call to another
// service (httpfilter.SideCaller): Envoy's default, 60 KiB. gRPC's own
// bound (16 MiB) is over what a default gRPC server takes in one message
// (4 MiB), so a client could otherwise make the side call fail on purpose.
const DefaultMaxRequestHeaderBytes = 60 << 10

// NewChain returns the Chain of the filter chain named name, whose
// HttpConnectionManager is hcm and whose RPCs route with what src holds when
// each arrives. The filter list of an HttpConnectionManager comes with the
// Listener and never changes under a chain, so what the chain needs is
// known here, once.
func NewChain(name string, hcm *filterchain.HTTPConnectionManager, src *Source) *Chain {
	c := &Chain{tap: &tapper{chain: name, src: src}}
	if hcm != nil {
		c.needs = httpfilter.NeedsOf(hcm.Filters)
		c.localID = httpfilter.UsesLocalIdentity(hcm.Filters)
		c.tap.maxHeaderBytes, c.tap.maxHeaders = hcm.MaxRequestHeaderBytes, hcm.MaxRequestHeaders
		if c.tap.maxHeaderBytes == 0 && httpfilter.CallsOut(hcm.Filters) {
			c.tap.maxHeaderBytes = DefaultMaxRequestHeaderBytes
		}
	}
	return c
}

// MaxRequestHeaderBytes returns the bound of the size of the chain's
// request headers (as Envoy counts it); 0 when only gRPC's own applies.
func (c *Chain) MaxRequestHeaderBytes() int { return c.tap.maxHeaderBytes }

// OnUnregistered has the function given to OnRefused also told of every
// RPC the tap handles let through for a method that registered reports
// false for: gRPC refuses those with UNIMPLEMENTED after the tap, runs no
// interceptor for them and reports them to nothing else. Give it only when
// the server has no grpc.UnknownServiceHandler (which serves those RPCs
// through the interceptors). Call it before ServerOptions. Returns c.
func (c *Chain) OnUnregistered(registered func(method string) bool) *Chain {
	c.tap.unregistered = func(m string) bool { return !registered(m) }
	return c
}

// WithLocalIdentity gives the chain's filters that read the server's own
// certificate (httpfilter.LocalIdentityUser) id, which returns the leaf of
// the chain's current identity certificate; it does nothing for other
// chains. Call it before ServerOptions. Returns c.
func (c *Chain) WithLocalIdentity(id func() *x509.Certificate) *Chain {
	if c.localID {
		c.tap.localID = id
	}
	return c
}

// OnRefused has f told of every RPC the chain's tap handles refuse (a
// route that does not exist, a filter step's refusal in the tap), with the
// RPC's context, its headers and the refusal: gRPC reports no end of such
// an RPC to its stats handlers. Several functions are told in the order
// given. Call it before ServerOptions. Returns c.
func (c *Chain) OnRefused(f func(ctx context.Context, info *tap.Info, err error)) *Chain {
	if prev := c.tap.refused; prev != nil {
		c.tap.refused = func(ctx context.Context, info *tap.Info, err error) {
			prev(ctx, info, err)
			f(ctx, info, err)
		}
		return c
	}
	c.tap.refused = f
	return c
}

// WithAccessLog has the chain's tap handles put each RPC's RPCInfo in its
// context (InfoOf), with the request headers named reads (lower-case), for
// the chain's access log: each connection then gets a tap handle of its
// own, which carries the connection's ConnInfo (ConnOptions), as for
// per-connection filter state. Call it before ServerOptions. Returns c.
func (c *Chain) WithAccessLog(reads []string) *Chain {
	c.tap.logs, c.tap.logReads = true, reads
	return c
}

// UserOptions are the user's grpc.ServerOptions, as the chains' servers
// apply them: the single interceptors taken out of the rest
// (grpccompat.SplitInterceptors), so that they run behind the chain's
// filters.
type UserOptions struct {
	// Options are the user's options, without the ones that set Unary and
	// Stream.
	Options []grpc.ServerOption
	// Unary and Stream are the user's grpc.UnaryInterceptor and
	// grpc.StreamInterceptor; nil when not set.
	Unary  grpc.UnaryServerInterceptor
	Stream grpc.StreamServerInterceptor
	// Unknown says why the options could not be read; Options are then the
	// user's as given, and may set a single interceptor that gRPC would
	// run before any other: chains whose filters may refuse an RPC after
	// the tap refuse every RPC instead (Blocked).
	Unknown error
}

// ServerOptions returns the options of the chain's servers built around
// the user's: first outer (interceptors that must see every RPC the chain's
// own refuse: the mesh metrics'); then, when the chain's filters may return
// work, the interceptors that run it and the steps after it; then the
// user's single interceptors, chained, and the rest of the user's options
// (with their chained interceptors, which gRPC runs after the single
// ones, as before); then the chain's tap handle, unless each connection
// gets one of its own (ConnOptions). So no interceptor of the user's sees
// an RPC the filters refuse, or its request headers before a filter
// changed them. The result has no spare capacity, so appending to it
// copies.
//
// When the user's options could not be read (user.Unknown) and the chain's
// filters may return work, the chain's tap handles refuse every RPC with
// UNAVAILABLE (Blocked reports it): a single interceptor of the user's could
// run ahead of the filters.
func (c *Chain) ServerOptions(outer []grpc.ServerOption, user UserOptions) []grpc.ServerOption {
	if user.Unknown != nil && c.needs.After {
		c.tap.blocked = responseinfo.Refused(status.Errorf(codes.Unavailable, "xds: filter chain %q: its HTTP filters may refuse RPCs after gRPC's tap handle, and the server cannot tell whether its grpc.ServerOptions set a grpc.UnaryInterceptor or grpc.StreamInterceptor, which would run first (%v)", c.tap.chain, user.Unknown), 0, DetailsBlocked)
	}
	opts := make([]grpc.ServerOption, 0, len(outer)+len(user.Options)+5)
	opts = append(opts, outer...)
	if c.needs.After {
		opts = append(opts, grpc.ChainUnaryInterceptor(unaryAfter), grpc.ChainStreamInterceptor(streamAfter))
	}
	if user.Unary != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(user.Unary))
	}
	if user.Stream != nil {
		opts = append(opts, grpc.ChainStreamInterceptor(user.Stream))
	}
	opts = append(opts, user.Options...)
	if !c.PerConn() {
		opts = append(opts, grpc.InTapHandle(c.tap.handle))
	}
	return opts[:len(opts):len(opts)]
}

// Blocked returns why the chain's tap handles refuse every RPC (see
// ServerOptions); nil when they do not.
func (c *Chain) Blocked() error { return c.tap.blocked }

// ConnOptions returns the options of the server of one new connection of
// the chain, given what ServerOptions returned: opts itself, or, when the
// chain's filters keep per-connection state or the chain logs, a copy with
// a tap handle of the connection's own, carrying a new httpfilter.ConnState
// and info, the connection's ConnInfo (nil when the chain does not log; a
// few small allocations per connection, none per RPC).
func (c *Chain) ConnOptions(opts []grpc.ServerOption, info *ConnInfo) []grpc.ServerOption {
	if !c.PerConn() {
		return opts
	}
	return append(opts[:len(opts):len(opts)], grpc.InTapHandle(c.connHandle(info)))
}

// PerConn reports whether each connection's server needs options of its
// own (ConnOptions adds a tap handle with per-connection state), so that a
// server cannot serve another connection after the first.
func (c *Chain) PerConn() bool { return c.needs.ConnState || c.tap.logs }

// Logs reports whether the chain has an access log (WithAccessLog): each
// connection then needs a ConnInfo.
func (c *Chain) Logs() bool { return c.tap.logs }

// connHandle returns the tap handle of one new connection: the chain's
// shared one, or one with a ConnState of its own and info.
func (c *Chain) connHandle(info *ConnInfo) tap.ServerInHandle {
	if !c.PerConn() {
		return c.tap.handle
	}
	t := *c.tap
	if c.needs.ConnState {
		t.conn = &httpfilter.ConnState{}
	}
	t.connInfo = info
	return t.handle
}
