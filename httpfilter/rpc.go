package httpfilter

import (
	"context"
	"crypto/x509"
	"errors"
	"net/netip"
	"sync/atomic"
)

// Headers is the request metadata of an RPC: keys are lower-case, Get
// returns every value of a header in order and nothing when it is absent.
// gRPC's metadata.MD satisfies it.
type Headers interface {
	Get(key string) []string
}

// Request is what the server knows of an RPC when its headers arrive: the
// view HTTP filters and RBAC policies (package rbac) read. The slices and
// maps it refers to belong to gRPC and must not be modified or kept past
// the call that received them.
type Request struct {
	// FullMethod is the RPC's method, "/pkg.Service/Method": the :path
	// header.
	FullMethod string
	// Authority is the :authority header.
	Authority string
	// Header is the request metadata as gRPC received it, :authority
	// included; binary ("-bin") values are decoded.
	Header Headers
	// Remote is the peer's address; Local is the connection's local address
	// (the destination the client connected to); IPv4-mapped IPv6
	// addresses are unmapped. The zero value when unknown.
	Remote, Local netip.AddrPort
	// TLS reports whether the connection is secured by TLS.
	TLS bool
	// PeerCertificates is the peer's certificate chain, leaf first; nil on a
	// plaintext connection or when the peer sent none.
	PeerCertificates []*x509.Certificate
}

// RPC is what a Step sees of an RPC: its Request and its connection's
// state. It is passed by value and valid only during Run.
type RPC struct {
	Request
	// Conn is the state the steps share for the RPC's connection; nil
	// unless a filter of the chain needs it (Needs.ConnState).
	Conn *ConnState
}

// Step is the per-RPC work of one filter instance on one route, built by
// Filter.BuildStep when a configuration is applied. It is immutable and
// safe for concurrent use.
//
// The steps of a route run as one sequence, in http_filters order, for the
// RPCs the route's action lets through (gRFC A36: a route whose action is
// not non_forwarding_action refuses its RPCs before any step runs). Each
// step runs only if every step before it let the RPC through, and sees the
// request as they left it.
type Step interface {
	// Run decides on an RPC from its request. It runs in gRPC's tap
	// handle, before the method is looked up and before any interceptor,
	// with a transport lock held; or, when a step before it left work
	// (below), on the RPC's own goroutine once that work let the RPC
	// through. Either way it must be fast and must not block.
	//
	// It returns the context the rest of the RPC sees (ctx, or one derived
	// from it) and one of three outcomes:
	//   - nil, nil: the step lets the RPC through, and the next step runs;
	//   - an error: the RPC fails, and no later step, interceptor or
	//     handler runs (a gRPC status error keeps its code; any other error
	//     fails the RPC with PERMISSION_DENIED);
	//   - work: the step decides later, in After.RunAfter, where it may
	//     block; the steps after it wait for that decision. Only a filter
	//     that reports Needs.After may return work: on any other, the RPC
	//     fails with INTERNAL and the server logs the filter's name.
	//
	// A step changes the request headers that the steps after it and the
	// handler see by returning a context whose incoming metadata
	// (metadata.NewIncomingContext) holds the new headers; the server reads
	// them once per change. A panic fails the RPC with INTERNAL, never the
	// server, and is logged with the filter's name and counted.
	Run(ctx context.Context, rpc RPC) (context.Context, After, error)
}

// After is work a Step leaves for later because it may block (a delay, a
// call to an authorization service) or needs what the tap cannot give
// (trailing metadata on a refused RPC). A step returns it from Run; the
// filter must report Needs.After.
//
// Once gRPC has dispatched the RPC to its own goroutine, the server runs
// the work, then, if it let the RPC through, the steps after its step
// (each seeing the request as the work changed it), all before any of the
// user's interceptors (grpc.UnaryInterceptor and grpc.StreamInterceptor as
// much as the chained ones) and the handler. So a step never decides on an
// RPC that an earlier step's work would refuse, and never on headers that
// work is about to change, and a refused RPC reaches no user code.
//
// Work runs only for RPCs that gRPC dispatches: an RPC whose method the
// server does not have (UNIMPLEMENTED) ends without it, and so without
// the steps after it.
type After interface {
	// RunAfter runs on the RPC's goroutine, with the RPC's context: it may
	// block, and must return when ctx is done (deadline or cancellation).
	// It returns the context the rest of the RPC sees (ctx, or one derived
	// from it: new incoming metadata changes the request headers, as for
	// Step.Run) and nil to let the RPC proceed; ErrSkipHandler ends it with
	// status OK without calling the handler; any other error fails it (a
	// gRPC status error keeps its code, ctx's errors become
	// DEADLINE_EXCEEDED or CANCELED, others UNKNOWN). ctx carries the RPC's
	// grpc.ServerTransportStream, so grpc.SetHeader and grpc.SetTrailer work
	// on it. A panic fails the RPC with INTERNAL, as in Step.Run.
	RunAfter(ctx context.Context) (context.Context, error)
}

// ErrSkipHandler is returned by After.RunAfter to end an RPC with status OK
// at once: the handler is not called. An RPC whose client expects one
// response (unary and client streaming) receives an empty response
// message; a server-streaming or bidirectional one ends without a message.
var ErrSkipHandler = errors.New("httpfilter: end the RPC with status OK without calling the handler")

// maxConnEntries bounds the entries of a ConnState: a connection outliving
// many configuration changes forgets its oldest entries rather than grow.
const maxConnEntries = 32

// ConnState is the state the steps of one connection share, such as
// per-connection token buckets, each under a key of the step's choosing
// (compared with ==; a pointer to the step's own shared state is a good
// one). It lives as long as the connection, and holds at most 32 entries
// (the oldest go first). Safe for concurrent use: Get takes no lock and
// allocates nothing; only storing a new entry allocates. The zero value is
// ready.
type ConnState struct {
	// entries is replaced, never modified, when an entry is added.
	entries atomic.Pointer[[]connEntry]
}

type connEntry struct {
	key, val any
}

// Get returns the value stored under key, or nil.
func (c *ConnState) Get(key any) any {
	if p := c.entries.Load(); p != nil {
		for i := range *p {
			if (*p)[i].key == key {
				return (*p)[i].val
			}
		}
	}
	return nil
}

// GetOrInit returns the value stored under key, storing init() first if
// there is none. When two callers race, one value wins and both get it
// (init may run for both).
func (c *ConnState) GetOrInit(key any, init func() any) any {
	if v := c.Get(key); v != nil {
		return v
	}
	v := init()
	for {
		old := c.entries.Load()
		var cur []connEntry
		if old != nil {
			cur = *old
		}
		for i := range cur {
			if cur[i].key == key {
				return cur[i].val
			}
		}
		if len(cur) >= maxConnEntries {
			cur = cur[len(cur)-maxConnEntries+1:]
		}
		next := make([]connEntry, 0, len(cur)+1)
		next = append(append(next, cur...), connEntry{key: key, val: v})
		if c.entries.CompareAndSwap(old, &next) {
			return v
		}
	}
}
