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

// AfterOf returns the work the steps left in ctx, all of it in the order
// it was added, or nil. The server's pipeline (internal/server/rpcpath)
// runs work step by step instead; this is for a filter's own tests.
func AfterOf(ctx context.Context) After {
	d := handoff.DeferredOf(ctx)
	switch {
	case d == nil:
		return nil
	case d.Prev == nil:
		return d.Work
	}
	return deferredChain{d}
}

// deferredChain runs a chain of work, oldest first.
type deferredChain struct{ head *handoff.Deferred }

func (c deferredChain) RunAfter(ctx context.Context) error {
	_, err := handoff.RunSince(ctx, c.head, nil)
	return err
}

// RunAfterContext implements ContextAfter.
func (c deferredChain) RunAfterContext(ctx context.Context) (context.Context, error) {
	return handoff.RunSince(ctx, c.head, nil)
}
