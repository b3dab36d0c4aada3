package rpcpath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
)

// The response path (ARCHITECTURE.md, "The response path"): the events of
// an RPC after its request headers, handed to the Calls its filters'
// work returned (httpfilter.Call). It is built per RPC, in the first
// interceptor, only for RPCs that have calls: an RPC whose route's filters
// return none pays nothing for it.
//
//	client ─ recv: calls in http_filters order ─▶ handler
//	client ◀ headers, messages, trailers: calls in reverse order ─ handler
//
// The handler gets a stream (or, for a unary RPC, a request and a context)
// whose receives go through the MessageReceivers and whose sends go
// through the HeaderSenders and MessageSenders; when the handler returns,
// the TrailerSenders see its status. What leaves goes to the stream and
// transport stream the interceptor was given (the access log's and the
// mesh metrics' wrappers are outside), so they see what the calls left.

// call is one filter's Call on one RPC, with its filter.
type call struct {
	c      httpfilter.Call
	filter *filterInfo
	events httpfilter.Events
}

// started records a call whose work is about to run: its End is owed. From
// the first call on, the headers and trailers the work of the RPC sets
// (grpc.SetHeader, grpc.SetTrailer: a refusal's trailers) are held in the
// returned context, so that they go through the calls' hooks.
func (q *sequence) started(ctx context.Context, w httpfilter.After, f *filterInfo) context.Context {
	c, ok := w.(httpfilter.Call)
	if !ok {
		return ctx
	}
	q.calls = append(q.calls, call{c: c, filter: f})
	if q.held == nil {
		if ts := grpc.ServerTransportStreamFromContext(ctx); ts != nil {
			q.held = &heldStream{below: ts}
			ctx = grpc.NewContextWithServerTransportStream(ctx, q.held)
		}
	}
	return ctx
}

// heldStream holds the headers and trailers set on an RPC's transport
// stream while its filters run, once a call started, until the response
// path takes them (take) and passes the rest through. Safe for concurrent
// use.
type heldStream struct {
	below grpc.ServerTransportStream

	mu              sync.Mutex
	taken           bool // the response path has them; the rest goes below
	header, trailer metadata.MD
}

func (h *heldStream) Method() string { return h.below.Method() }

func (h *heldStream) SetHeader(md metadata.MD) error {
	h.mu.Lock()
	if !h.taken {
		h.header = metadata.Join(h.header, md)
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	return h.below.SetHeader(md)
}

func (h *heldStream) SendHeader(md metadata.MD) error {
	// Sending headers before the handler is no filter's business: what
	// is held goes first, then these.
	header, trailer := h.take()
	if len(trailer) > 0 {
		_ = h.below.SetTrailer(trailer)
	}
	return h.below.SendHeader(metadata.Join(header, md))
}

func (h *heldStream) SetTrailer(md metadata.MD) error {
	h.mu.Lock()
	if !h.taken {
		h.trailer = metadata.Join(h.trailer, md)
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	return h.below.SetTrailer(md)
}

// take returns what is held, and passes whatever comes later below.
func (h *heldStream) take() (header, trailer metadata.MD) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.taken = true
	header, trailer = h.header, h.trailer
	h.header, h.trailer = nil, nil
	return header, trailer
}

// flush passes what h holds below (nil h: nothing).
func (h *heldStream) flush() {
	if h == nil {
		return
	}
	header, trailer := h.take()
	if len(header) > 0 {
		_ = h.below.SetHeader(header)
	}
	if len(trailer) > 0 {
		_ = h.below.SetTrailer(trailer)
	}
}

// adopt has e start from what h holds (nil h: the context's transport
// stream is the one below).
func (e *eventRPC) adopt(ctx context.Context, h *heldStream) {
	if h == nil {
		e.ts = grpc.ServerTransportStreamFromContext(ctx)
		return
	}
	e.ts = h.below
	e.header, e.trailer = h.take()
}

// refusedBy records that w, whose RunAfter just refused the RPC, was the
// last call started (if it is a call).
func (q *sequence) refusedBy(w httpfilter.After) {
	if _, ok := w.(httpfilter.Call); ok {
		q.callRefused = true
	}
}

// endCalls ends every call of the RPC with err, the status the client
// gets; a panic in End is logged and counted, and changes nothing.
func endCalls(ctx context.Context, calls []call, err error) {
	for _, c := range calls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					_ = c.filter.failed(ctx, metrics.ReasonPanic, fmt.Sprintf("panicked in End (%v)", r), debug.Stack())
				}
			}()
			c.c.End(err)
		}()
	}
}

// eventRPC is the response path of one RPC: its calls' hooks, the state of
// what the handler sent, and the error that ended it early.
type eventRPC struct {
	ctx    context.Context // the calls': cancelled when a call ends the RPC
	cancel context.CancelFunc
	// oneResponse: the client expects one response message (unary and
	// client-streaming RPCs).
	oneResponse bool
	hctx        context.Context // the handler's: ctx with the transport stream below replaced
	calls       []call          // in http_filters order
	unary       bool

	// Receive side: used by the one goroutine receiving.
	recv     []int                     // indices in calls of MessageReceivers, in order
	head     func() ([]byte, error)    // what the handler receives
	rawErr   error                     // the last error the stream below returned
	recvType proto.Message             // the type of the handler's messages; set before head runs
	below    func(proto.Message) error // receives a message from below (the stream's RecvMsg)
	recvEOF  bool                      // the handler has been given io.EOF's message; next is io.EOF
	unaryReq []byte                    // unary: the request as gRPC decoded it, encoded; nil once taken

	// Send side: under sendMu (gRPC lets one goroutine send, but a handler
	// may call grpc.SetHeader from another).
	sendMu     sync.Mutex
	ts         grpc.ServerTransportStream // below: where headers and trailers go
	ss         grpc.ServerStream          // below; nil for a unary RPC
	enc        []int                      // indices of the calls on the send path, in reverse order
	sendFns    []func([]byte) error       // sendFns[j]: sends into enc[j] (j == len(enc): below)
	header     metadata.MD                // set by the handler, not yet sent
	trailer    metadata.MD
	headerDone bool          // the headers left (or will leave with the response)
	sent       int           // messages sent below
	sendType   proto.Message // the type of the handler's responses
	unaryOut   [][]byte      // unary: the messages the calls left

	endMu sync.Mutex
	ended error // the error a call ended the RPC with; nil while none did
}

// newEventRPC returns the response path of an RPC whose filters let it
// through with calls, or nil when none of them handles an event. An error
// fails the RPC: a call that names an event its filter did not declare,
// or whose type does not handle an event it names.
func newEventRPC(ctx context.Context, calls []call, unary bool) (*eventRPC, error) {
	var any httpfilter.Events
	for i := range calls {
		c := &calls[i]
		ev, err := eventsOf(ctx, c)
		if err != nil {
			return nil, err
		}
		c.events = ev
		any |= ev
	}
	if any == 0 {
		return nil, nil
	}
	e := &eventRPC{calls: calls, unary: unary}
	e.ctx, e.cancel = context.WithCancel(ctx)
	for i, c := range calls {
		if c.events&httpfilter.ClientMessages != 0 {
			e.recv = append(e.recv, i)
		}
	}
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].events&(httpfilter.ServerHeaders|httpfilter.ServerMessages|httpfilter.ServerTrailers) != 0 {
			e.enc = append(e.enc, i)
		}
	}
	return e, nil
}

// eventsOf returns the events c handles, checked against its filter's
// declaration and its type.
func eventsOf(ctx context.Context, c *call) (ev httpfilter.Events, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = c.filter.failed(ctx, metrics.ReasonPanic, fmt.Sprintf("panicked in Events (%v)", r), debug.Stack())
		}
	}()
	ev = c.c.Events()
	if ev&^c.filter.events != 0 {
		return 0, c.filter.failed(ctx, metrics.ReasonUndeclaredWork, fmt.Sprintf("returned a call for events %b it did not declare in Needs.Events (%b)", ev, c.filter.events), nil)
	}
	for _, h := range []struct {
		ev httpfilter.Events
		ok bool
	}{
		{httpfilter.ClientMessages, implements[httpfilter.MessageReceiver](c.c)},
		{httpfilter.ServerHeaders, implements[httpfilter.HeaderSender](c.c)},
		{httpfilter.ServerMessages, implements[httpfilter.MessageSender](c.c)},
		{httpfilter.ServerTrailers, implements[httpfilter.TrailerSender](c.c)},
	} {
		if ev&h.ev != 0 && !h.ok {
			return 0, c.filter.failed(ctx, metrics.ReasonUndeclaredWork, fmt.Sprintf("returned a call (%T) for events %b that does not handle them", c.c, ev), nil)
		}
	}
	return ev, nil
}

func implements[T any](v any) bool {
	_, ok := v.(T)
	return ok
}

// end records that a call ended the RPC with err (the first one wins),
// cancels the handler's context, and returns the error the RPC ends with.
func (e *eventRPC) end(err error) error {
	e.endMu.Lock()
	defer e.endMu.Unlock()
	if e.ended == nil {
		e.ended = rpcError(err)
		e.cancel()
	}
	return e.ended
}

// endedWith returns the error a call ended the RPC with; nil while none did.
func (e *eventRPC) endedWith() error {
	e.endMu.Lock()
	defer e.endMu.Unlock()
	return e.ended
}

// rpcError is the status a call's error gives the client: a status error
// keeps its code, others are UNKNOWN (as a handler's error);
// httpfilter.ErrSkipHandler ends the RPC with OK (statusOf).
func rpcError(err error) error {
	if errors.Is(err, httpfilter.ErrSkipHandler) {
		return err
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unknown, err.Error())
}

// statusOf returns the status the client gets for err, the RPC's end: nil
// for OK (a call's httpfilter.ErrSkipHandler).
func statusOf(err error) error {
	if errors.Is(err, httpfilter.ErrSkipHandler) {
		return nil
	}
	return err
}

// hook runs f, one method of c: a panic becomes INTERNAL, logged and
// counted with the filter's name.
func hook(ctx context.Context, c *call, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = c.filter.failed(ctx, metrics.ReasonPanic, fmt.Sprintf("panicked (%v)", r), debug.Stack())
		}
	}()
	return f()
}

// messageOf returns m as a protocol buffer, or the error that fails an RPC
// whose messages are not.
func messageOf(m any) (proto.Message, error) {
	if pm, ok := m.(proto.Message); ok {
		return pm, nil
	}
	return nil, status.Errorf(codes.Internal, "xds: an HTTP filter of this route handles messages, and the RPC's message (%T) is not a protocol buffer", m)
}

// decode decodes b into m, or fails the RPC with INTERNAL as gRPC fails a
// message it cannot decode.
func decode(b []byte, m proto.Message) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return status.Errorf(codes.Internal, "xds: a message an HTTP filter of this route left cannot be decoded as %s: %v", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

func encode(m proto.Message) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "xds: encoding a message for an HTTP filter: %v", err)
	}
	return b, nil
}

// --- receive side ---

// buildRecv chains the MessageReceivers from below to the handler.
func (e *eventRPC) buildRecv() {
	next := e.fromBelow
	for _, i := range e.recv {
		c, prev := &e.calls[i], next
		r := c.c.(httpfilter.MessageReceiver)
		next = func() ([]byte, error) {
			var b []byte
			err := hook(e.ctx, c, func() (err error) {
				b, err = r.RecvMessage(e.ctx, prev)
				return err
			})
			return b, err
		}
	}
	e.head = next
}

// fromBelow is what the first MessageReceiver reads: the client's next
// message, encoded, or io.EOF at its half-close.
func (e *eventRPC) fromBelow() ([]byte, error) {
	if e.unary {
		b := e.unaryReq
		if b == nil {
			return nil, io.EOF
		}
		e.unaryReq = nil
		return b, io.EOF
	}
	m := e.recvType.ProtoReflect().New().Interface()
	if err := e.below(m); err != nil {
		e.rawErr = err
		return nil, err
	}
	return encode(m)
}

// recvMsg receives the handler's next message into m.
func (e *eventRPC) recvMsg(m any) error {
	if err := e.endedWith(); err != nil {
		return err
	}
	if e.recvEOF {
		return io.EOF
	}
	pm, err := messageOf(m)
	if err != nil {
		return e.end(err)
	}
	if e.head == nil {
		e.recvType = pm
		e.buildRecv()
	}
	b, err := e.head()
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		if b == nil {
			e.recvEOF = true
			return io.EOF
		}
		e.recvEOF = true
	case err == e.rawErr:
		// The stream's own failure (the client cancelled, a message gRPC
		// could not decode): as without filters.
		return err
	default:
		return e.end(err)
	}
	if err := decode(b, pm); err != nil {
		return e.end(err)
	}
	return nil
}

// recvUnary runs a unary RPC's request through the MessageReceivers: the
// handler gets the first message they leave; none fails the RPC with
// INTERNAL, as gRPC fails a unary RPC without a request.
func (e *eventRPC) recvUnary(req any) (any, error) {
	if len(e.recv) == 0 {
		return req, nil
	}
	pm, err := messageOf(req)
	if err != nil {
		return nil, e.end(err)
	}
	if e.unaryReq, err = encode(pm); err != nil {
		return nil, e.end(err)
	}
	e.recvType = pm
	e.buildRecv()
	b, err := e.head()
	if err != nil && (!errors.Is(err, io.EOF) || b == nil) {
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Internal, "xds: the HTTP filters of this route left the unary RPC no request message")
		}
		return nil, e.end(err)
	}
	out := pm.ProtoReflect().New().Interface()
	if err := decode(b, out); err != nil {
		return nil, e.end(err)
	}
	return out, nil
}

// --- send side ---

// sendInto returns the function that sends a message into the send path
// at position j: the MessageSender of enc[j] or after, or below.
func (e *eventRPC) sendInto(j int) func([]byte) error {
	if e.sendFns == nil {
		e.sendFns = make([]func([]byte) error, len(e.enc)+1)
	}
	for ; j < len(e.enc); j++ {
		if e.calls[e.enc[j]].events&httpfilter.ServerMessages != 0 {
			break
		}
	}
	if f := e.sendFns[j]; f != nil {
		return f
	}
	var f func([]byte) error
	if j == len(e.enc) {
		f = e.toBelow
	} else {
		c := &e.calls[e.enc[j]]
		s, next := c.c.(httpfilter.MessageSender), e.sendInto(j+1)
		f = func(b []byte) error {
			if err := e.endedWith(); err != nil {
				return err
			}
			if err := hook(e.ctx, c, func() error { return s.SendMessage(e.ctx, b, next) }); err != nil {
				return e.end(err)
			}
			return nil
		}
	}
	e.sendFns[j] = f
	return f
}

// toBelow sends a message the calls left to the client.
func (e *eventRPC) toBelow(b []byte) error {
	if err := e.endedWith(); err != nil {
		return err
	}
	if e.unary {
		e.unaryOut = append(e.unaryOut, b)
		return nil
	}
	if e.oneResponse && e.sent > 0 {
		return e.end(status.Error(codes.Internal, "xds: the HTTP filters of this route left a client-streaming RPC more than one response message"))
	}
	m := e.sendType.ProtoReflect().New().Interface()
	if err := decode(b, m); err != nil {
		return e.end(err)
	}
	e.sent++
	return e.ss.SendMsg(m)
}

// sendHeaders runs the HeaderSenders on the headers the handler set, once,
// and hands the result below: sent now when explicit, else set to leave
// with the first message or the status. Called with sendMu held.
func (e *eventRPC) sendHeaders(explicit, endOfStream bool) error {
	if e.headerDone {
		return nil
	}
	e.headerDone = true
	md := e.header
	if md == nil {
		md = metadata.MD{}
	}
	for _, i := range e.enc {
		c := &e.calls[i]
		if c.events&httpfilter.ServerHeaders == 0 {
			continue
		}
		h := c.c.(httpfilter.HeaderSender)
		if err := hook(e.ctx, c, func() error { return h.SendHeader(e.ctx, md, endOfStream) }); err != nil {
			return e.end(err)
		}
	}
	e.header = nil
	if len(md) > 0 {
		if err := e.setHeaderBelow(md); err != nil {
			return err
		}
	}
	if explicit {
		if e.ss != nil {
			return e.ss.SendHeader(nil)
		}
		return e.ts.SendHeader(nil)
	}
	return nil
}

func (e *eventRPC) setHeaderBelow(md metadata.MD) error {
	if e.ss != nil {
		return e.ss.SetHeader(md)
	}
	return e.ts.SetHeader(md)
}

// setHeader holds the handler's headers for the HeaderSenders.
func (e *eventRPC) setHeader(md metadata.MD, send bool) error {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	if err := e.endedWith(); err != nil {
		return err
	}
	if e.headerDone {
		// As gRPC: too late for headers.
		if send {
			return status.Error(codes.Internal, "transport: the stream is done or WriteHeader was already called")
		}
		return e.setHeaderBelow(md)
	}
	e.header = metadata.Join(e.header, md)
	if send {
		return e.sendHeaders(true, false)
	}
	return nil
}

func (e *eventRPC) setTrailer(md metadata.MD) {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	e.trailer = metadata.Join(e.trailer, md)
}

// sendMsg sends one of the handler's messages through the send path.
func (e *eventRPC) sendMsg(m any) error {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	if err := e.endedWith(); err != nil {
		return err
	}
	pm, err := messageOf(m)
	if err != nil {
		return e.end(err)
	}
	if e.sendType == nil {
		e.sendType = pm
	}
	if err := e.sendHeaders(false, false); err != nil {
		return err
	}
	b, err := encode(pm)
	if err != nil {
		return e.end(err)
	}
	return e.sendInto(0)(b)
}

// finish runs the rest of the send path once the handler returned with
// herr: the headers if they have not left, then the TrailerSenders, and
// returns the status the client gets. A call that ended the RPC decides
// it, and the TrailerSenders are not asked.
func (e *eventRPC) finish(herr error) error {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	if err := e.endedWith(); err != nil {
		return err
	}
	st := herr
	if st != nil {
		st = status.Convert(st).Err() // what gRPC sends for it
	}
	conv := st
	if err := e.sendHeaders(false, e.sent == 0 && len(e.unaryOut) == 0); err != nil {
		return err
	}
	trailer := e.trailer
	if trailer == nil {
		trailer = metadata.MD{}
	}
	for j, i := range e.enc {
		c := &e.calls[i]
		if c.events&httpfilter.ServerTrailers == 0 {
			continue
		}
		t, send := c.c.(httpfilter.TrailerSender), e.sendInto(j+1)
		if err := hook(e.ctx, c, func() error {
			out := t.SendTrailer(e.ctx, st, trailer, send)
			if errors.Is(out, httpfilter.ErrSkipHandler) {
				out = nil // a call's OK: the status the calls after it see
			}
			st = out
			return nil
		}); err != nil {
			return e.end(err)
		}
		if err := e.endedWith(); err != nil {
			return err
		}
	}
	e.trailer = nil
	if len(trailer) > 0 {
		if e.ss != nil {
			e.ss.SetTrailer(trailer)
		} else if err := e.ts.SetTrailer(trailer); err != nil && st == nil {
			st = err
		}
	}
	if st == conv {
		// Unchanged: the error as given, with what it carries besides
		// its status (an access log's response flags).
		return herr
	}
	return st
}

// finishUnary is finish for a unary RPC: the handler's response goes
// through the send path, which must leave exactly one message.
func (e *eventRPC) finishUnary(resp any, herr error) (any, error) {
	if herr == nil {
		if err := e.sendMsg(resp); err != nil {
			return nil, err
		}
	}
	st := e.finish(herr)
	if st != nil {
		return nil, st
	}
	if herr != nil && len(e.unaryOut) == 0 {
		// The handler failed and a call made it OK (an immediate
		// response): as ErrSkipHandler, an empty response.
		return nil, httpfilter.ErrSkipHandler
	}
	if n := len(e.unaryOut); n != 1 {
		return nil, e.end(status.Errorf(codes.Internal, "xds: the HTTP filters of this route left the unary RPC %d response messages, want 1", n))
	}
	pm, err := messageOf(resp)
	if err != nil {
		return nil, e.end(err)
	}
	out := pm.ProtoReflect().New().Interface()
	if err := decode(e.unaryOut[0], out); err != nil {
		return nil, e.end(err)
	}
	return out, nil
}

// --- the handler's views ---

// transportStream is the grpc.ServerTransportStream the handler's context
// carries: its headers and trailers go through the response path.
type transportStream struct {
	e *eventRPC
}

func (t transportStream) Method() string                  { return t.e.ts.Method() }
func (t transportStream) SetHeader(md metadata.MD) error  { return t.e.setHeader(md, false) }
func (t transportStream) SendHeader(md metadata.MD) error { return t.e.setHeader(md, true) }
func (t transportStream) SetTrailer(md metadata.MD) error { t.e.setTrailer(md); return nil }

// eventStream is the stream a streaming handler gets.
type eventStream struct {
	grpc.ServerStream
	e *eventRPC
}

func (s *eventStream) Context() context.Context        { return s.e.hctx }
func (s *eventStream) SetHeader(md metadata.MD) error  { return s.e.setHeader(md, false) }
func (s *eventStream) SendHeader(md metadata.MD) error { return s.e.setHeader(md, true) }
func (s *eventStream) SetTrailer(md metadata.MD)       { s.e.setTrailer(md) }
func (s *eventStream) SendMsg(m any) error             { return s.e.sendMsg(m) }
func (s *eventStream) RecvMsg(m any) error {
	if len(s.e.recv) == 0 {
		if err := s.e.endedWith(); err != nil {
			return err
		}
		return s.ServerStream.RecvMsg(m)
	}
	return s.e.recvMsg(m)
}

// refuse ends an RPC a filter refused after calls of filters before it
// started, as Envoy sends a local reply through the encoder filters before
// the one that replied: their HeaderSenders (endOfStream) and
// TrailerSenders see the refusal, and may change its headers, trailers
// and status; then every call ends. ss is nil for a unary RPC;
// oneResponse: a streaming RPC whose client expects one response (an OK
// end sends it an empty one). It returns the status the client gets.
func refuse(ctx context.Context, ss grpc.ServerStream, oneResponse bool, q *sequence, err error) error {
	calls := q.calls
	if q.callRefused {
		// The call that refused does not see its own refusal.
		calls = calls[:len(calls)-1]
	}
	handled := false
	if len(calls) > 0 {
		e, eerr := newEventRPC(ctx, slices.Clone(calls), ss == nil)
		switch {
		case eerr != nil:
			err = eerr
		case e != nil:
			handled = true
			e.ss = ss
			e.adopt(ctx, q.held)
			if e.ss != nil || e.ts != nil {
				if skip := errors.Is(err, httpfilter.ErrSkipHandler); skip {
					// Ended OK without the handler: the response is
					// an empty message (for a unary RPC), so not
					// Trailers-Only; the hooks may still fail it.
					if ss == nil || oneResponse {
						e.sent++
					}
					if st := e.finish(nil); st != nil {
						err = st
					}
				} else {
					err = e.finish(err)
				}
				if statusOf(err) == nil {
					// The calls made it an OK end (an immediate
					// response of OK): as a filter's ErrSkipHandler, so
					// that a client expecting one response gets it.
					err = httpfilter.ErrSkipHandler
				}
			}
			e.cancel()
		}
	}
	if !handled {
		q.held.flush()
	}
	endCalls(ctx, q.calls, statusOf(err))
	return err
}

// serveUnary runs a unary RPC whose filters left calls: the handler with
// the response path, then the calls' ends.
func serveUnary(ctx context.Context, q *sequence, req any, handler grpc.UnaryHandler) (resp any, err error) {
	calls := q.calls
	defer func() { endCalls(ctx, calls, err) }()
	e, err := newEventRPC(ctx, calls, true)
	if err != nil || e == nil {
		q.held.flush()
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	defer e.cancel()
	e.adopt(ctx, q.held)
	if e.ts == nil {
		return nil, status.Error(codes.Internal, "xds: the RPC has no transport stream")
	}
	e.hctx = grpc.NewContextWithServerTransportStream(e.ctx, transportStream{e})
	if req, err = e.recvUnary(req); err != nil {
		return nil, statusOf(err)
	}
	resp, herr := handler(e.hctx, req)
	resp, err = e.finishUnary(resp, herr)
	if err != nil && statusOf(err) == nil {
		// A call ended the RPC with OK: as a filter's ErrSkipHandler.
		return nil, nil
	}
	return resp, err
}

// serveStream is serveUnary for a streaming RPC; oneResponse: the client
// expects one response message (client streaming).
func serveStream(srv any, ss grpc.ServerStream, q *sequence, oneResponse bool, handler grpc.StreamHandler) (err error) {
	ctx := ss.Context()
	calls := q.calls
	defer func() { endCalls(ctx, calls, err) }()
	e, err := newEventRPC(ctx, calls, false)
	if err != nil || e == nil {
		q.held.flush()
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
	defer e.cancel()
	e.ss, e.oneResponse = ss, oneResponse
	e.below = func(m proto.Message) error { return ss.RecvMsg(m) }
	e.hctx = e.ctx
	if e.adopt(ctx, q.held); e.ts != nil {
		e.hctx = grpc.NewContextWithServerTransportStream(e.ctx, transportStream{e})
	}
	herr := handler(srv, &eventStream{ServerStream: ss, e: e})
	fin := e.finish(herr)
	if fin == nil && herr != nil {
		// The handler failed and a call made it OK (an immediate
		// response): as ErrSkipHandler.
		fin = httpfilter.ErrSkipHandler
	}
	if errors.Is(fin, httpfilter.ErrSkipHandler) {
		// A call ended the RPC with OK: as a filter's ErrSkipHandler, a
		// client that expects one response gets an empty one.
		if oneResponse && e.sent == 0 {
			return ss.SendMsg(nil)
		}
		return nil
	}
	if fin == nil && oneResponse && e.sent == 0 && herr == nil {
		// As for a unary RPC: the client expects one response.
		return status.Error(codes.Internal, "xds: the HTTP filters of this route left a client-streaming RPC no response message")
	}
	return fin
}

// The transport streams the response path puts in an RPC's context pass on
// what the access log is told (responseinfo.Recorder) to the one below.

// AddResponseFlags implements responseinfo.Recorder.
func (h *heldStream) AddResponseFlags(f accesslog.Flags) { addFlags(h.below, f) }

// RequestChanged implements responseinfo.Recorder.
func (h *heldStream) RequestChanged(ctx context.Context) { requestChanged(h.below, ctx) }

// AddResponseFlags implements responseinfo.Recorder.
func (t transportStream) AddResponseFlags(f accesslog.Flags) { addFlags(t.e.ts, f) }

// RequestChanged implements responseinfo.Recorder.
func (t transportStream) RequestChanged(ctx context.Context) { requestChanged(t.e.ts, ctx) }

func addFlags(below grpc.ServerTransportStream, f accesslog.Flags) {
	if r, ok := below.(responseinfo.Recorder); ok {
		r.AddResponseFlags(f)
	}
}

func requestChanged(below grpc.ServerTransportStream, ctx context.Context) {
	if r, ok := below.(responseinfo.Recorder); ok {
		r.RequestChanged(ctx)
	}
}
