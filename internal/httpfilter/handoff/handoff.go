// Package handoff carries what the public package httpfilter hands to the
// server's filter framework (internal/httpfilter) without either importing
// the other's registry: the filters users register, and the context key
// of the work steps leave for after the tap. It imports nothing of this
// module, so both can import it.
package handoff

import (
	"context"
	"sync"
)

// AfterKey is the context key under which httpfilter.WithAfter stores the
// work to run after the tap: the newest *Deferred.
type AfterKey struct{}

// Work is what a step leaves for after the tap (httpfilter.After).
type Work = interface{ RunAfter(context.Context) error }

// Deferred is one piece of work a step left in a context, linked to the
// work left before it in the same context (nil for the first). A new one
// is made by every httpfilter.WithAfter, so the server tells whether a
// step left work by comparing the pointer before and after the step.
type Deferred struct {
	Work Work
	Prev *Deferred
}

// DeferredOf returns the newest work left in ctx, or nil. It does not
// allocate.
func DeferredOf(ctx context.Context) *Deferred {
	d, _ := ctx.Value(AfterKey{}).(*Deferred)
	return d
}

// RunSince runs the work left after since, up to and including head,
// oldest first, each with the context the previous one returned
// (RunAfter); the first error ends it. since must be head or one of its
// predecessors (nil: all of head's chain).
func RunSince(ctx context.Context, head, since *Deferred) (context.Context, error) {
	if head == since || head == nil {
		return ctx, nil
	}
	// The older work first; a chain is as long as the steps that left work.
	ctx, err := RunSince(ctx, head.Prev, since)
	if err != nil {
		return ctx, err
	}
	return RunAfter(ctx, head.Work)
}

var (
	mu    sync.RWMutex
	users []any // adapters of registered filters, in registration order; guarded by mu
)

// Add records f, an adapter of a user's filter that implements the
// framework's Filter interface. A later filter takes over the types of an
// earlier one.
func Add(f any) {
	mu.Lock()
	defer mu.Unlock()
	users = append(users, f)
}

// Filters returns the filters added so far, the latest first.
func Filters() []any {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]any, len(users))
	for i, f := range users {
		out[len(users)-1-i] = f
	}
	return out
}

// ContextAfter is work left for after the tap that returns the context the
// rest of the RPC sees (see internal/httpfilter.ContextAfter). It is here
// so that the public package's pairs of After values pass it on.
type ContextAfter interface {
	RunAfter(ctx context.Context) error
	RunAfterContext(ctx context.Context) (context.Context, error)
}

// RunAfter runs a with ctx and returns the context the rest of the RPC
// gets: ctx itself unless a is a ContextAfter.
func RunAfter(ctx context.Context, a interface{ RunAfter(context.Context) error }) (context.Context, error) {
	if ca, ok := a.(ContextAfter); ok {
		return ca.RunAfterContext(ctx)
	}
	return ctx, a.RunAfter(ctx)
}
