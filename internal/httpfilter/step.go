package httpfilter

import (
	"context"
	"crypto/x509"
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
	// not block. It may return a derived context. A non-nil error fails the
	// RPC and stops the filter chain: a gRPC status error keeps its code,
	// any other error fails the RPC with PERMISSION_DENIED.
	Run(ctx context.Context, rpc RPC) (context.Context, error)
}
