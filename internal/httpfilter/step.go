package httpfilter

import (
	"context"

	"github.com/proxyless-grpc/xds/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/handoff"
)

// The vocabulary of a filter's per-RPC work is the public package
// httpfilter's, documented there: the framework runs built-in filters and
// users' ones with the same types, and a request view that package rbac
// evaluates as it is (rbac.RequestInfo is httpfilter.Request).
type (
	// Headers is the request metadata a step reads.
	Headers = httpfilter.Headers
	// Request is the request view shared by filters and RBAC.
	Request = httpfilter.Request
	// RPC is what a step sees of an RPC.
	RPC = httpfilter.RPC
	// Step is the per-RPC work of one filter instance on one route.
	Step = httpfilter.Step
	// After is work a step leaves for after the tap handle.
	After = httpfilter.After
	// ConnState is the state the steps of one connection share.
	ConnState = httpfilter.ConnState
	// Needs is what a filter's steps need besides the tap handle.
	Needs = httpfilter.Needs
	// Config is a parsed and validated filter config, top-level or
	// override. It is immutable; its concrete type is the filter's own.
	Config = httpfilter.Config
)

// ErrSkipHandler is httpfilter.ErrSkipHandler.
var ErrSkipHandler = httpfilter.ErrSkipHandler

// WithAfter returns a context carrying a, to be run after the tap handle
// (httpfilter.WithAfter).
func WithAfter(ctx context.Context, a After) context.Context { return httpfilter.WithAfter(ctx, a) }

// AfterOf returns the work the steps left in ctx, or nil.
func AfterOf(ctx context.Context) After {
	a, _ := ctx.Value(handoff.AfterKey{}).(After)
	return a
}
