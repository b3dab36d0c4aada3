package rpcpath

import (
	"context"
	"crypto/x509"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// Chain gives the gRPC servers of one filter chain's connections what the
// chain's HTTP filters need (httpfilter.Needs): always the tap handle; the
// interceptors that run the work steps leave for after the tap
// (httpfilter.WithAfter) when a filter may leave some; and, when a filter
// keeps per-connection state, a tap handle of each connection's own that
// carries that state. A chain whose filters need neither gets exactly the
// tap handle, shared by its connections. Immutable.
type Chain struct {
	tap     *tapper // the shared handle (its conn is nil)
	needs   httpfilter.Needs
	localID bool // a filter reads the local identity
}

// NewChain returns the Chain of the filter chain named name, whose HTTP
// filters are hcm's and whose RPCs route with what src holds when each
// arrives. The filter list of an HttpConnectionManager comes with the
// Listener and never changes under a chain, so what the chain needs is
// known here, once.
func NewChain(name string, hcm *filterchain.HTTPConnectionManager, src *Source) *Chain {
	c := &Chain{tap: &tapper{chain: name, src: src}}
	if hcm != nil {
		c.needs = httpfilter.NeedsOf(hcm.Filters)
		c.localID = httpfilter.UsesLocalIdentity(hcm.Filters)
		c.tap.defers = c.needs.After
	}
	return c
}

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
// an RPC to its stats handlers. Call it before ServerOptions. Returns c.
func (c *Chain) OnRefused(f func(ctx context.Context, info *tap.Info, err error)) *Chain {
	c.tap.refused = f
	return c
}

// ServerOptions returns the options of the chain's servers built around
// the user's: first outer (interceptors that must see every RPC the chain's
// own refuse: the mesh metrics'); then, when the chain's filters leave work
// for after the tap, the interceptors that run it (before the user's
// chained interceptors; a grpc.UnaryInterceptor or grpc.StreamInterceptor
// given by the user always runs first, by gRPC's rule); then user's
// options; then the chain's tap handle, unless each connection gets one of
// its own (ConnOptions). The result has no spare capacity, so appending to
// it copies.
func (c *Chain) ServerOptions(outer, user []grpc.ServerOption) []grpc.ServerOption {
	opts := make([]grpc.ServerOption, 0, len(outer)+len(user)+3)
	opts = append(opts, outer...)
	if c.needs.After {
		opts = append(opts, grpc.ChainUnaryInterceptor(unaryAfter), grpc.ChainStreamInterceptor(streamAfter))
	}
	opts = append(opts, user...)
	if !c.needs.ConnState {
		opts = append(opts, grpc.InTapHandle(c.tap.handle))
	}
	return opts[:len(opts):len(opts)]
}

// ConnOptions returns the options of the server of one new connection of
// the chain, given what ServerOptions returned: opts itself, or, when the
// chain's filters keep per-connection state, a copy with a tap handle that
// carries a new httpfilter.ConnState (a few small allocations per
// connection, none per RPC).
func (c *Chain) ConnOptions(opts []grpc.ServerOption) []grpc.ServerOption {
	if !c.needs.ConnState {
		return opts
	}
	return append(opts[:len(opts):len(opts)], grpc.InTapHandle(c.connHandle()))
}

// PerConn reports whether each connection's server needs options of its
// own (ConnOptions adds a tap handle with per-connection state), so that a
// server cannot serve another connection after the first.
func (c *Chain) PerConn() bool { return c.needs.ConnState }

// connHandle returns the tap handle of one new connection: the chain's
// shared one, or one with a ConnState of its own.
func (c *Chain) connHandle() tap.ServerInHandle {
	if !c.needs.ConnState {
		return c.tap.handle
	}
	t := &tapper{chain: c.tap.chain, src: c.tap.src, localID: c.tap.localID, defers: c.tap.defers, refused: c.tap.refused, unregistered: c.tap.unregistered, conn: &httpfilter.ConnState{}}
	return t.handle
}

// unaryAfter runs the rest of the RPC's filter sequence that the tap left
// (pipeline.go: the work a step left, the steps after it, the action
// check), then the rest of the chain (the user's interceptors and the
// handler) unless the sequence ended the RPC.
func unaryAfter(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if r := resumeOf(ctx); r != nil {
		var err error
		if ctx, err = r.run(ctx); err != nil {
			if errors.Is(err, httpfilter.ErrSkipHandler) {
				return nil, nil
			}
			return nil, err
		}
	}
	return handler(ctx, req)
}

// streamAfter is unaryAfter for streaming RPCs.
func streamAfter(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if r := resumeOf(ss.Context()); r != nil {
		ctx, err := r.run(ss.Context())
		if err != nil {
			if errors.Is(err, httpfilter.ErrSkipHandler) {
				return nil
			}
			return err
		}
		if ctx != ss.Context() {
			ss = &streamWithContext{ServerStream: ss, ctx: ctx}
		}
	}
	return handler(srv, ss)
}

// streamWithContext is a stream whose handler sees another context (the
// request headers a filter changed).
type streamWithContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *streamWithContext) Context() context.Context { return s.ctx }
