package rpcpath

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
)

// The filters of an RPC run as one sequence, in http_filters order (gRFC
// A39), each seeing the RPC as the ones before it left it, and each only if
// they let it through, after the route's action check (gRFC A36, in the tap
// handle, rpcpath.go). The sequence starts in gRPC's tap handle, which must
// not block, and moves to the RPC's own goroutine at the first step that
// returns work (httpfilter.After), as Envoy's filter manager resumes
// iteration after a filter that stopped it:
//
//	tap handle (the connection's reader goroutine)
//	  step 1 … step k            run here while none returns work
//	  step k returns work     →  stop; the sequence, at k+1 with k's work pending, goes in the context
//	first interceptor (the RPC's goroutine: unaryAfter, streamAfter)
//	  step k's work              may block (ext_authz's Check, a fault delay),
//	                             may refuse the RPC or change its request headers
//	  step k+1 … step n          on the headers as changed; work one returns runs at once
//	user's interceptors (single and chained), handler
//
// One loop (sequence.run) runs both halves: the tap runs it until it stops,
// the interceptor from where it stopped. What a step leaves is its return
// value; the request headers are read again whenever a step or its work
// returns a new context (the one way a filter changes them: new incoming
// metadata), so each step sees what the steps before it left. A panic in a
// step or its work, and work returned by a filter that did not declare
// Needs.After, fail the RPC with INTERNAL, logged with the filter's name
// and counted; never the process, and never an RPC that goes on without
// the work. Chains whose filters never return work (Needs.After false)
// run everything in the tap, allocation-free.

// stage is one filter instance's step on a route. Comparable.
type stage struct {
	step   httpfilter.Step
	filter *filterInfo
}

// filterInfo is what the pipeline knows of one filter instance of a
// chain's routes, shared by its stages on every route of one build.
type filterInfo struct {
	name    string            // immutable
	mayWait bool              // the filter reports Needs.After; immutable
	events  httpfilter.Events // the filter's Needs.Events; immutable
	metrics *metrics.Listener // counts the filter's errors; nil: not counted; immutable
	// lastLog is when the pipeline last logged an error of the filter
	// (Unix nanoseconds): one line per filter per logEvery, however many
	// RPCs fail.
	lastLog atomic.Int64
}

// logEvery bounds how often the pipeline logs the errors of one filter.
const logEvery = 10 * time.Second

// sequence is one RPC's way through its route's stages. Made per RPC, on
// the tap's stack unless a step stops it there.
type sequence struct {
	stages  []stage
	next    int              // the stage to run next
	pending httpfilter.After // work the stage before next returned and has not run
	rpc     httpfilter.RPC   // Header as the stages before next left it
	// calls are the work that runs which is also a Call (httpfilter.Call),
	// in http_filters order: each is owed an End, and the ones of an RPC
	// the filters let through get its events (events.go).
	calls []call
	// callRefused: the last of calls refused the RPC in its RunAfter.
	callRefused bool
	// held holds the headers and trailers the work sets once a call
	// started (events.go); nil before.
	held *heldStream
}

// errStopped is sequence.run's report, in the tap, that a stage returned
// work: the rest runs on the RPC's goroutine.
var errStopped = errors.New("rpcpath: the sequence continues after the tap")

// run runs the sequence from where it stands: first the pending work, then
// the stages from next on. In the tap (inTap), it stops at the first stage
// that returns work, with that work pending, and returns errStopped; on
// the RPC's goroutine it runs the work where it is returned. It returns the
// context the rest of the RPC sees, or the error that ends the RPC.
func (q *sequence) run(ctx context.Context, inTap bool) (out context.Context, err error) {
	running := q.next - 1 // the stage whose code runs, for a panic
	defer func() {
		if r := recover(); r != nil {
			out, err = ctx, q.stages[running].filter.failed(ctx, metrics.ReasonPanic, fmt.Sprintf("panicked (%v)", r), debug.Stack())
		}
	}()
	if w := q.pending; w != nil {
		q.pending = nil
		ctx = q.started(ctx, w, q.stages[running].filter)
		if ctx, err = w.RunAfter(ctx); err != nil {
			q.refusedBy(w)
			return ctx, err
		}
		// gRPC keeps no header map past the tap: after the move, the
		// headers are the context's, read once if a step is left to read
		// them.
		if q.next < len(q.stages) {
			q.rpc.Header = incoming(ctx)
		}
	}
	for q.next < len(q.stages) {
		running = q.next
		st := q.stages[running]
		q.next++
		in := ctx
		var w httpfilter.After
		if ctx, w, err = st.step.Run(ctx, q.rpc); err != nil {
			return ctx, stepError(err)
		}
		if w != nil {
			if !st.filter.mayWait {
				return ctx, st.filter.failed(ctx, metrics.ReasonUndeclaredWork, "returned work for after the tap without declaring Needs.After", nil)
			}
			if inTap {
				q.pending = w
				return ctx, errStopped
			}
			ctx = q.started(ctx, w, st.filter)
			if ctx, err = w.RunAfter(ctx); err != nil {
				q.refusedBy(w)
				return ctx, err
			}
		}
		if ctx != in && q.next < len(q.stages) {
			q.rpc.Header = incoming(ctx)
		}
	}
	return ctx, nil
}

// failed counts and logs (at most once per logEvery, with stack when there
// is one) an RPC that the filter failed because its own code broke, and
// returns the RPC's INTERNAL status, which names the filter and nothing
// else.
func (f *filterInfo) failed(ctx context.Context, reason, what string, stack []byte) error {
	f.metrics.FilterError(ctx, f.name, reason)
	now := time.Now().UnixNano()
	if last := f.lastLog.Load(); now-last >= int64(logEvery) && f.lastLog.CompareAndSwap(last, now) {
		serverlog.Component.Errorf("xds: HTTP filter %q %s; the RPC fails with INTERNAL (more failures of this filter in the next %v are counted in %s, not logged)\n%s", f.name, what, logEvery, metrics.FilterErrors, stack)
	}
	return responseinfo.Refused(status.Errorf(codes.Internal, "xds: HTTP filter %q failed", f.name), 0, DetailsFilterError)
}

// runInTap runs an RPC's stages in the tap handle. When a stage returns
// work, the rest of the sequence goes in the returned context, for the
// first interceptor (resumeOf).
func runInTap(ctx context.Context, rpc httpfilter.RPC, stages []stage) (context.Context, error) {
	q := sequence{stages: stages, rpc: rpc}
	ctx, err := q.run(ctx, true)
	if err != errStopped {
		return ctx, err
	}
	rest := new(sequence)
	*rest = q
	rest.rpc.Header = nil // gRPC's map, which is not kept past the tap
	return context.WithValue(ctx, sequenceKey{}, rest), nil
}

type sequenceKey struct{}

// resumeOf returns the rest of the RPC's sequence; nil when it ran whole in
// the tap.
func resumeOf(ctx context.Context) *sequence {
	q, _ := ctx.Value(sequenceKey{}).(*sequence)
	return q
}

// incoming returns the request headers of ctx as the steps see them.
func incoming(ctx context.Context) httpfilter.Headers {
	md, _ := metadata.FromIncomingContext(ctx)
	if md == nil {
		md = metadata.MD{}
	}
	return md
}

// stepError is what a step's error fails the RPC with: what gRPC makes of
// a tap handle's error (a status error keeps its code, any other error is
// PERMISSION_DENIED), so a step refuses an RPC the same way wherever it
// runs.
func stepError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.PermissionDenied, err.Error())
}

// unaryAfter runs the rest of the RPC's filter sequence that the tap left,
// then the rest of the chain (the user's interceptors and the handler)
// unless the sequence ended the RPC.
func unaryAfter(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if q := resumeOf(ctx); q != nil {
		in := ctx
		var err error
		ctx, err = q.run(ctx, false)
		if ctx != in {
			// What logs the RPC sees the headers as the filters left them,
			// whatever its outcome.
			responseinfo.RequestChanged(ctx)
		}
		if err != nil {
			if err = refuse(ctx, nil, true, q, err); errors.Is(err, httpfilter.ErrSkipHandler) {
				return nil, nil
			}
			return nil, err
		}
		if len(q.calls) > 0 {
			return serveUnary(ctx, q, req, handler)
		}
	}
	return handler(ctx, req)
}

// streamAfter is unaryAfter for streaming RPCs. An RPC ended OK without its
// handler gets what a unary one gets: when its client expects one response
// (client streaming), an empty message (nil, which gRPC sends empty with
// any codec), so that the client sees OK rather than a missing response;
// a server-streaming one ends without a message.
func streamAfter(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if q := resumeOf(ss.Context()); q != nil {
		ctx, err := q.run(ss.Context(), false)
		if ctx != ss.Context() {
			responseinfo.RequestChanged(ctx)
		}
		if err != nil {
			if err = refuse(ctx, ss, !info.IsServerStream, q, err); errors.Is(err, httpfilter.ErrSkipHandler) {
				if !info.IsServerStream {
					return ss.SendMsg(nil)
				}
				return nil
			}
			return err
		}
		if ctx != ss.Context() {
			ss = &streamWithContext{ServerStream: ss, ctx: ctx}
		}
		if len(q.calls) > 0 {
			return serveStream(srv, ss, q, !info.IsServerStream && info.IsClientStream, handler)
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
