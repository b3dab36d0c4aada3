package rpcpath

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/handoff"
	"github.com/proxyless-grpc/xds/internal/routing"
)

// The filters of an RPC run as one sequence, in http_filters order (gRFC
// A39), each seeing the RPC as the ones before it left it, and each only if
// they let it through. The sequence starts in gRPC's tap handle, which must
// not block, and moves to the RPC's own goroutine at the first step that
// leaves work for after the tap (httpfilter.WithAfter):
//
//	tap handle (the connection's reader goroutine)
//	  step 1 … step k            run here while none leaves work
//	  step k leaves work      →  the sequence stops; a resume is put in the context
//	first interceptor (the RPC's goroutine: unaryAfter, streamAfter)
//	  step k's work              may block (ext_authz's Check, a fault delay),
//	                             may refuse the RPC or change its request headers
//	  step k+1 … step n          on the headers as changed; work one leaves runs at once
//	  the route's action check   (gRFC A36: UNAVAILABLE unless non_forwarding_action)
//	user's interceptors, handler
//
// So no step decides on an RPC an earlier step's work would refuse, or on
// headers that work is about to change: with [ext_authz, rbac], RBAC judges
// the headers the authorization server left and only RPCs it allowed; with
// [ext_authz, local_ratelimit], a refused RPC spends no token. Chains
// whose filters never leave work (Needs.After false) run everything in the
// tap, allocation-free, exactly as before.

// runSteps runs the steps of route for one RPC in the tap handle, then the
// route's action check (actionCheck) if every step ran there. defers says whether a step may leave
// work; when one does, the rest of the sequence is put in the returned
// context for the first interceptor (resumeOf).
func runSteps(ctx context.Context, rpc httpfilter.RPC, steps []httpfilter.Step, defers bool, rt *Routes, route *routing.Route) (context.Context, error) {
	// The work in ctx before the steps: a step that leaves none leaves it
	// as it is, so one reading serves every step up to the first that does.
	var since *handoff.Deferred
	if defers {
		since = handoff.DeferredOf(ctx)
	}
	for i, s := range steps {
		var err error
		if ctx, err = s.Run(ctx, rpc); err != nil {
			return ctx, err
		}
		if !defers {
			continue
		}
		if head := handoff.DeferredOf(ctx); head != since {
			r := &resume{since: since, head: head, rest: steps[i+1:], rpc: rpc, final: actionCheck(rt, route)}
			// gRPC's header map is not kept past the tap: the steps after
			// read the request headers from the RPC's context.
			r.rpc.Header = nil
			return context.WithValue(ctx, resumeKey{}, r), nil
		}
	}
	return ctx, actionCheck(rt, route)
}

// resume is the rest of an RPC's filter sequence after the step that left
// work for after the tap. Made per RPC, used once.
type resume struct {
	since, head *handoff.Deferred // the work the step left: after since, up to head
	rest        []httpfilter.Step // the steps after it
	rpc         httpfilter.RPC    // the request view; Header is read again
	final       error             // the route's action check: nil, or its refusal
}

type resumeKey struct{}

// resumeOf returns the rest of the RPC's sequence; nil when it ran whole
// in the tap.
func resumeOf(ctx context.Context) *resume {
	r, _ := ctx.Value(resumeKey{}).(*resume)
	return r
}

// run runs, on the RPC's goroutine, the work that stopped the sequence in
// the tap, then the remaining steps, then the action check. It returns the
// context the user's interceptors and handler get (with the request headers
// the work changed) or the error that ends the RPC (httpfilter.ErrSkipHandler
// ends it with OK).
func (r *resume) run(ctx context.Context) (context.Context, error) {
	ctx, err := handoff.RunSince(ctx, r.head, r.since)
	if err != nil {
		return ctx, err
	}
	if len(r.rest) == 0 {
		return ctx, r.final
	}
	rpc := r.rpc
	rpc.Header = incoming(ctx)
	since := handoff.DeferredOf(ctx) // r.head, unless the work's context lost it
	for _, s := range r.rest {
		if ctx, err = s.Run(ctx, rpc); err != nil {
			return ctx, stepError(err)
		}
		if head := handoff.DeferredOf(ctx); head != since {
			if ctx, err = handoff.RunSince(ctx, head, since); err != nil {
				return ctx, err
			}
			since = head
			// The work may have changed the request headers.
			rpc.Header = incoming(ctx)
		}
	}
	return ctx, r.final
}

// incoming returns the request headers of ctx as the steps see them.
func incoming(ctx context.Context) httpfilter.Headers {
	md, _ := metadata.FromIncomingContext(ctx)
	if md == nil {
		md = metadata.MD{}
	}
	return md
}

// stepError is what a step's error fails the RPC with when the step runs
// after the tap: what gRPC makes of it in the tap (a status error keeps its
// code, any other error is PERMISSION_DENIED), so a step refuses an RPC the
// same way wherever it runs.
func stepError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.PermissionDenied, err.Error())
}
