package httpfilter

import (
	"context"
	"crypto/x509"
	"errors"
	"net/netip"
	"sync/atomic"

	"github.com/proxyless-grpc/xds/internal/httpfilter/handoff"
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
type Step interface {
	// Run runs for every RPC on the route, in filter order, after the
	// route was matched and before the route's action is checked. It runs
	// in gRPC's tap handle, before the method is looked up and before any
	// interceptor, with a transport lock held: it must be fast and must
	// not block. It may return a derived context, for example one carrying
	// work for after the tap (WithAfter). A non-nil error fails the RPC
	// and stops the filter chain: a gRPC status error keeps its code, any
	// other error fails the RPC with PERMISSION_DENIED.
	Run(ctx context.Context, rpc RPC) (context.Context, error)
}

// After is work a Step leaves for after the tap handle, because it may
// block (a delay, a call to an authorization service) or needs what the
// tap cannot give (trailing metadata on a refused RPC). A step returns
// WithAfter(ctx, a) from Run; once gRPC has dispatched the RPC to its own
// goroutine, the server runs a, before the user's interceptors (those
// given with grpc.ChainUnaryInterceptor or grpc.ChainStreamInterceptor; a
// single grpc.UnaryInterceptor or grpc.StreamInterceptor always runs
// first) and before the handler. The filter must report Needs.After, or
// nothing runs a.
//
// Deferred work runs only for RPCs that every step let through and that
// gRPC dispatches: an RPC a later step refuses, or whose method the server
// does not have (UNIMPLEMENTED), ends without it.
type After interface {
	// RunAfter runs on the RPC's goroutine, with the RPC's context: it may
	// block, and must return when ctx is done (deadline or cancellation).
	// A nil error lets the RPC proceed; ErrSkipHandler ends it with status
	// OK without calling the handler; any other error fails it (a gRPC
	// status error keeps its code, ctx's errors become DEADLINE_EXCEEDED
	// or CANCELED, others UNKNOWN). ctx carries the RPC's
	// grpc.ServerTransportStream, so grpc.SetTrailer works on it.
	RunAfter(ctx context.Context) error
}

// ErrSkipHandler is returned by After.RunAfter to end an RPC with status OK
// at once: the handler is not called. A streaming RPC ends without a
// message; a unary RPC's client receives an empty response message (gRPC
// sends the response of a unary RPC with its status).
var ErrSkipHandler = errors.New("httpfilter: end the RPC with status OK without calling the handler")

// WithAfter returns a context carrying a, to be run after the tap handle
// (see After). Several steps of one RPC may each add work; it runs in the
// order it was added, and the first error ends it.
func WithAfter(ctx context.Context, a After) context.Context {
	if prev, ok := ctx.Value(handoff.AfterKey{}).(After); ok {
		a = afterPair{first: prev, then: a}
	}
	return context.WithValue(ctx, handoff.AfterKey{}, a)
}

// afterPair runs first, then then.
type afterPair struct{ first, then After }

func (p afterPair) RunAfter(ctx context.Context) error {
	_, err := p.RunAfterContext(ctx)
	return err
}

// RunAfterContext runs first, then then with the context first returned,
// for the server's filters whose work changes the context the handler
// sees (handoff.ContextAfter).
func (p afterPair) RunAfterContext(ctx context.Context) (context.Context, error) {
	ctx, err := handoff.RunAfter(ctx, p.first)
	if err != nil {
		return ctx, err
	}
	return handoff.RunAfter(ctx, p.then)
}

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
