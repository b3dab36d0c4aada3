package httpfilter

import (
	"context"
	"crypto/x509"
	"errors"
	"net/netip"
)

// Headers is the request metadata a step reads: keys are lower-case, Get
// returns every value of a header in order and nothing when it is absent.
// gRPC's metadata.MD satisfies it.
type Headers interface {
	Get(key string) []string
}

// RPC is what a filter's per-RPC step sees of an RPC. It is built by the
// server for each RPC that reaches a route with steps, passed by value, and
// only valid during the call; the slices and maps it refers to belong to gRPC
// and must not be modified or kept.
type RPC struct {
	// FullMethod is the RPC's method, "/pkg.Service/Method": the :path
	// header.
	FullMethod string
	// Authority is the :authority header.
	Authority string
	// Header is the request metadata as gRPC received it, :authority
	// included; binary ("-bin") values are decoded.
	Header Headers
	// Remote is the peer's address; Local is the connection's local address
	// (the destination the client connected to). The zero value when unknown.
	Remote, Local netip.AddrPort
	// TLS reports whether the connection is secured by TLS.
	TLS bool
	// PeerCertificates is the peer's certificate chain, leaf first; nil on a
	// plaintext connection or when the peer sent none.
	PeerCertificates []*x509.Certificate
	// Conn is the state the steps share for the RPC's connection; nil
	// unless a filter of the chain needs it (Needs.ConnState).
	Conn *ConnState
}

// Step is the per-RPC work of one filter instance on one route, built by
// Filter.BuildStep from the filter's top-level config merged with the
// route's override when a configuration is applied. It is immutable and
// safe for concurrent use.
type Step interface {
	// Run runs for every RPC on the route, in filter order, after the route
	// was matched and before the route's action is checked. It runs in
	// gRPC's tap handle: before the method is looked up and before any
	// interceptor, with a transport lock held, so it must be fast and must
	// not block. It may return a derived context, for example one carrying
	// work for after the tap (WithAfter). A non-nil error fails the RPC and
	// stops the filter chain: a gRPC status error keeps its code, any other
	// error fails the RPC with PERMISSION_DENIED.
	Run(ctx context.Context, rpc RPC) (context.Context, error)
}

// After is work a Step leaves for after the tap handle, because it may
// block (a delay) or needs what the tap cannot give (trailing metadata on a
// refused RPC). A step returns WithAfter(ctx, a) from Run; once gRPC has
// dispatched the RPC to its own goroutine, the server runs a, before the
// user's interceptors (those given with grpc.ChainUnaryInterceptor or
// grpc.ChainStreamInterceptor; a single grpc.UnaryInterceptor or
// grpc.StreamInterceptor always runs first) and before the handler. The
// filter must report Needs.After, or nothing runs a.
//
// Deferred work runs only for RPCs that every step let through and that
// gRPC dispatches: an RPC a later step refuses, or whose method the server
// does not have (UNIMPLEMENTED), ends without it.
type After interface {
	// RunAfter runs on the RPC's goroutine, with the RPC's context: it may
	// block, and must return when ctx is done (deadline or cancellation).
	// A nil error lets the RPC proceed; ErrSkipHandler ends it with status
	// OK without calling the handler; any other error fails it (a gRPC
	// status error keeps its code, ctx's errors become DEADLINE_EXCEEDED or
	// CANCELED, others UNKNOWN). ctx carries the RPC's grpc.ServerTransportStream,
	// so grpc.SetTrailer works on it.
	RunAfter(ctx context.Context) error
}

// ErrSkipHandler is returned by After.RunAfter to end an RPC with status OK
// at once: the handler is not called. A streaming RPC ends without a
// message; a unary RPC's client receives an empty response message (gRPC
// sends the response of a unary RPC with its status).
var ErrSkipHandler = errors.New("httpfilter: end the RPC with status OK without calling the handler")

type afterKey struct{}

// WithAfter returns a context carrying a, to be run after the tap handle
// (see After). Several steps of one RPC may each add work; it runs in the
// order it was added, and the first error ends it.
func WithAfter(ctx context.Context, a After) context.Context {
	if prev := AfterOf(ctx); prev != nil {
		a = afterPair{first: prev, then: a}
	}
	return context.WithValue(ctx, afterKey{}, a)
}

// AfterOf returns the work the steps left in ctx, or nil.
func AfterOf(ctx context.Context) After {
	a, _ := ctx.Value(afterKey{}).(After)
	return a
}

// afterPair runs first, then then.
type afterPair struct{ first, then After }

func (p afterPair) RunAfter(ctx context.Context) error {
	if err := p.first.RunAfter(ctx); err != nil {
		return err
	}
	return p.then.RunAfter(ctx)
}
