package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/matcher"
)

// step is the filter's work on one route. Immutable.
type step struct {
	name   string
	cfg    *Config          // the instance's config merged with the route's override
	perRPC bool             // cfg.Service is the route's own: each RPC acquires it
	timer  httpfilter.Timer // records gRFC A93's durations; nil: none
	// counter counts the mutation entries the filter ignored; nil: none.
	counter httpfilter.Counter
	// lastLog is when the step last logged an ignored mutation (Unix
	// nanoseconds); shared by the RPCs of the step.
	lastLog *atomic.Int64
}

// Run starts the RPC's call; everything it does happens after the tap.
func (s *step) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	req := rpc.Request
	req.Header = nil // gRPC's, not kept past the tap: RunAfter reads the context's
	return ctx, &call{step: s, cfg: s.cfg, req: req, mode: s.cfg.Mode}, nil
}

// direction is one of the RPC's two independent directions.
type direction int

const (
	clientToServer direction = iota
	serverToClient
)

// kind is the event an answer is for, named by the ProcessingResponse
// oneof that answers it.
type kind int

const (
	kindRequestHeaders kind = iota
	kindRequestBody
	kindResponseHeaders
	kindResponseBody
	kindResponseTrailers
)

var kindNames = [...]string{"request_headers", "request_body", "response_headers", "response_body", "response_trailers"}

func (k kind) String() string { return kindNames[k] }

func (k kind) direction() direction {
	if k <= kindRequestBody {
		return clientToServer
	}
	return serverToClient
}

// state is where a call's stream stands.
type state int

const (
	stateOpen   state = iota // events go to the processor
	stateDone                // the stream ended OK, or its failure was allowed: events pass as they are
	stateFailed              // the stream failed: the RPC fails at its next event
)

// call is the filter's state for one RPC: its ext_proc stream, the
// processing mode (which the processor may override), and the events
// waiting for an answer, at most one per direction (gRFC A93: one answer
// per event, in order; the two directions are independent).
type call struct {
	step *step
	cfg  *Config
	req  httpfilter.Request // Header nil
	ctx  context.Context    // the RPC's; set by RunAfter

	mu      sync.Mutex
	mode    Mode
	st      state
	failure error // stateFailed: what the RPC fails with
	stream  pb.ExternalProcessor_ProcessClient
	cancel  context.CancelFunc // ends the stream
	release func()             // the route's own channel, acquired for this RPC
	sentAny bool               // the first request (with protocol_config) was sent
	waiting [2]*waiter         // by direction: the event waiting for an answer, or nil
	waiters [2]waiter          // by direction: what waiting points to, reused
	// trailersOnly: the response ends without a message (gRPC's
	// Trailers-Only): its headers, held here, go to the processor with the
	// trailers and the status, as one response_headers event with
	// end_of_stream (SendTrailer).
	trailersOnly bool
	onlyHeader   metadata.MD
	// clientClosed: the processor ended the client's messages
	// (end_of_stream on a request_body answer).
	clientClosed bool
	// draining: the processor asked for request_drain; nothing more is
	// sent.
	draining bool
	// abandoned: the RPC ended while an event waited for its answer: the
	// processor is not answering, and its stream is cancelled at once.
	abandoned bool

	sendMu     sync.Mutex    // orders Send on the stream (both directions send)
	readerDone chan struct{} // closed when the reader has returned
}

// waiter is an event sent and waiting for its answer.
type waiter struct {
	kind kind
	ch   chan answer // buffered: the reader never blocks on it
}

// answer is what a waiting event gets: the processor's answer, or, with
// resp nil, the end of processing (pass the event on as it is) or the
// error the RPC fails with.
type answer struct {
	resp *pb.ProcessingResponse
	err  error
}

// --- the events ---

// RunAfter sends the request headers, when the mode says so, and applies
// the answer to them.
func (c *call) RunAfter(ctx context.Context) (context.Context, error) {
	c.ctx = ctx
	if !c.mode.RequestHeaders && len(c.cfg.RequestAttributes) == 0 {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx) // a copy
	if md == nil {
		md = metadata.MD{}
	}
	if len(c.cfg.RequestAttributes) > 0 {
		// The attributes read the request's headers as they arrived here
		// (request.headers, request.useragent, ...), not as the answer
		// changes md.
		c.req.Header = md.Copy()
	}
	if !c.mode.RequestHeaders {
		return ctx, nil
	}
	defer c.step.record(ctx, durClientHeaders, time.Now())
	req := &pb.ProcessingRequest{Request: &pb.ProcessingRequest_RequestHeaders{RequestHeaders: &pb.HttpHeaders{
		Headers: c.headerMap(md, c.requestPseudo()),
	}}}
	resp, err := c.exchange(ctx, kindRequestHeaders, req)
	if err != nil || resp == nil {
		return ctx, err
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return ctx, c.immediate(ctx, ir, nil)
	}
	changed, err := c.mutate(md, resp.GetRequestHeaders().GetResponse())
	if err != nil {
		return ctx, err
	}
	if changed {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	return ctx, nil
}

// Events implements httpfilter.Call: the events the RPC's mode sends, all
// of them when the processor may override the mode; none once processing
// is over.
func (c *call) Events() httpfilter.Events {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st == stateDone {
		return 0
	}
	if c.cfg.AllowModeOverride {
		return httpfilter.ClientMessages | httpfilter.ServerHeaders | httpfilter.ServerMessages | httpfilter.ServerTrailers
	}
	var ev httpfilter.Events
	if c.mode.RequestBody {
		ev |= httpfilter.ClientMessages
	}
	if c.mode.ResponseHeaders {
		// The trailers too: a Trailers-Only response's headers go with
		// them (SendTrailer).
		ev |= httpfilter.ServerHeaders | httpfilter.ServerTrailers
	}
	if c.mode.ResponseBody {
		ev |= httpfilter.ServerMessages
	}
	if c.mode.ResponseTrailers {
		ev |= httpfilter.ServerTrailers
	}
	return ev
}

// RecvMessage sends each client message, and the half-close, to the
// processor (GRPC body mode) and returns the message its answer carries.
func (c *call) RecvMessage(ctx context.Context, next func() ([]byte, error)) ([]byte, error) {
	for {
		if c.clientDone() {
			return nil, io.EOF
		}
		b, err := next()
		if err != nil && !errors.Is(err, io.EOF) {
			return b, err
		}
		eos := err != nil
		if !c.sends(func(m Mode) bool { return m.RequestBody }) {
			return b, err
		}
		body := &pb.HttpBody{Body: b, EndOfStream: eos}
		if b == nil {
			body.EndOfStreamWithoutMessage = true
			defer c.step.record(ctx, durClientHalfClose, time.Now())
		}
		resp, xerr := c.exchange(ctx, kindRequestBody, &pb.ProcessingRequest{Request: &pb.ProcessingRequest_RequestBody{RequestBody: body}})
		if xerr != nil {
			return nil, xerr
		}
		if resp == nil {
			return b, err
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			return nil, c.immediate(ctx, ir, nil)
		}
		msg, closed, xerr := c.body(resp.GetRequestBody().GetResponse(), b)
		if xerr != nil {
			return nil, xerr
		}
		if b == nil && len(msg) == 0 {
			// The answer to a half-close without a message: an empty
			// body is no message, whatever end_of_stream_without_message
			// says. Processors written before that field (Envoy's
			// FULL_DUPLEX_STREAMED ones, Istio's endpoint picker) echo
			// the empty body; an empty message added at the half-close
			// is not what they mean.
			msg = nil
		}
		if closed && !eos {
			// The processor ended the client's messages early: the
			// handler gets no more (as C-core).
			c.mu.Lock()
			c.clientClosed = true
			c.mu.Unlock()
			eos = true
		}
		switch {
		case msg != nil && eos:
			return msg, io.EOF
		case msg != nil:
			return msg, nil
		case eos:
			return nil, io.EOF
		}
		// Dropped: read the next one.
	}
}

func (c *call) clientDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientClosed
}

// SendHeader sends the response headers to the processor and applies its
// answer to them.
func (c *call) SendHeader(ctx context.Context, header map[string][]string, endOfStream bool) error {
	if !c.sends(func(m Mode) bool { return m.ResponseHeaders }) {
		return nil
	}
	if endOfStream {
		// Sent with the status, which SendTrailer has.
		c.mu.Lock()
		c.trailersOnly, c.onlyHeader = true, metadata.MD(header).Copy()
		c.mu.Unlock()
		return nil
	}
	req := &pb.ProcessingRequest{Request: &pb.ProcessingRequest_ResponseHeaders{ResponseHeaders: &pb.HttpHeaders{
		Headers: c.headerMap(header, [][2]string{{":status", "200"}}),
	}}}
	defer c.step.record(ctx, durServerHeaders, time.Now())
	resp, err := c.exchange(ctx, kindResponseHeaders, req)
	if err != nil || resp == nil {
		return err
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return c.immediate(ctx, ir, nil)
	}
	_, err = c.mutate(header, resp.GetResponseHeaders().GetResponse())
	return err
}

// SendMessage sends a server message to the processor and sends on the
// message its answer carries.
func (c *call) SendMessage(ctx context.Context, b []byte, send func([]byte) error) error {
	if !c.sends(func(m Mode) bool { return m.ResponseBody }) {
		return send(b)
	}
	resp, err := c.exchange(ctx, kindResponseBody, &pb.ProcessingRequest{Request: &pb.ProcessingRequest_ResponseBody{ResponseBody: &pb.HttpBody{Body: b}}})
	if err != nil {
		return err
	}
	if resp == nil {
		return send(b)
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return c.immediate(ctx, ir, nil)
	}
	msg, _, err := c.body(resp.GetResponseBody().GetResponse(), b)
	if err != nil || msg == nil {
		return err
	}
	return send(msg)
}

// SendTrailer sends the trailers, with the RPC's status, to the processor
// and applies its answer: a header mutation of the trailers, or an
// immediate response that sets the status.
func (c *call) SendTrailer(ctx context.Context, rpcErr error, trailer map[string][]string, _ func([]byte) error) error {
	c.mu.Lock()
	only, onlyHeader := c.trailersOnly, c.onlyHeader
	c.mu.Unlock()
	if !only && !c.sends(func(m Mode) bool { return m.ResponseTrailers }) {
		return rpcErr
	}
	st := status.Convert(rpcErr)
	pseudo := [][2]string{{"grpc-status", strconv.Itoa(int(st.Code()))}}
	if st.Message() != "" {
		pseudo = append(pseudo, [2]string{"grpc-message", st.Message()})
	}
	var (
		k   kind
		req *pb.ProcessingRequest
	)
	if only {
		// A Trailers-Only response: one response_headers event with
		// end_of_stream carries its headers, trailers and status; the
		// answer's mutation applies to the trailers, which leave in
		// the same frame.
		k = kindResponseHeaders
		md := metadata.Join(onlyHeader, trailer)
		req = &pb.ProcessingRequest{Request: &pb.ProcessingRequest_ResponseHeaders{ResponseHeaders: &pb.HttpHeaders{
			Headers:     c.headerMap(md, append([][2]string{{":status", "200"}}, pseudo...)),
			EndOfStream: true,
		}}}
		defer c.step.record(ctx, durServerHeaders, time.Now())
	} else {
		k = kindResponseTrailers
		req = &pb.ProcessingRequest{Request: &pb.ProcessingRequest_ResponseTrailers{ResponseTrailers: &pb.HttpTrailers{
			Trailers: c.headerMap(trailer, pseudo),
		}}}
		defer c.step.record(ctx, durServerTrailers, time.Now())
	}
	resp, err := c.exchange(ctx, k, req)
	if err != nil {
		return err
	}
	if resp == nil {
		return rpcErr
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return c.immediate(ctx, ir, trailer)
	}
	m := resp.GetResponseTrailers().GetHeaderMutation()
	if only {
		m = resp.GetResponseHeaders().GetResponse().GetHeaderMutation()
	}
	if m != nil {
		var ign ignoredEntries
		_, err := applyMutation(trailer, m, &c.cfg.Rules, &ign)
		c.step.ignored(ctx, &ign)
		if err != nil {
			return c.invalidMutation(err)
		}
	}
	return rpcErr
}

// End implements httpfilter.Call: the stream ends (in observability mode,
// after deferred_close_timeout, so that the processor reads what was
// sent), and the route's own channel is released.
func (c *call) End(error) {
	c.mu.Lock()
	stream, cancel, release, readerDone := c.stream, c.cancel, c.release, c.readerDone
	abandoned := c.abandoned || c.st == stateFailed
	c.release = nil
	c.st = stateDone
	c.mu.Unlock()
	if cancel == nil {
		if release != nil {
			release()
		}
		return
	}
	if abandoned && !c.cfg.Observability {
		// A processor that did not answer, or a stream that failed, is
		// not waited for.
		cancel()
		go func() {
			<-readerDone
			if release != nil {
				release()
			}
		}()
		return
	}
	// Half-close, so that the processor ends the stream OK (as Envoy
	// does), and cancel it when the processor has, or after the grace
	// period: deferred_close_timeout in observability mode, where the
	// processor may still be reading what was sent; closeGrace otherwise.
	c.sendMu.Lock()
	_ = stream.CloseSend()
	c.sendMu.Unlock()
	grace := closeGrace
	if c.cfg.Observability {
		grace = c.cfg.DeferredCloseTimeout
	}
	t := time.AfterFunc(grace, cancel)
	go func() {
		<-readerDone
		t.Stop()
		cancel()
		if release != nil {
			release()
		}
	}()
}

// closeGrace bounds how long an RPC's ended stream waits for the processor
// to end it after the half-close, before it is cancelled.
const closeGrace = time.Second

// --- the stream ---

// sends reports whether the call sends the event the mode's field says,
// as the mode stands now (the processor may have overridden it).
func (c *call) sends(f func(Mode) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f(c.mode)
}

// exchange sends req, the event k, and waits for its answer. It returns
// the answer; or nil and nil when the event passes on as it is (the stream
// ended OK, or failed under failure_mode_allow, or observability mode);
// or the error the RPC fails with.
func (c *call) exchange(ctx context.Context, k kind, req *pb.ProcessingRequest) (*pb.ProcessingResponse, error) {
	c.mu.Lock()
	switch {
	case c.st == stateDone || c.draining && c.st == stateOpen:
		c.mu.Unlock()
		return nil, nil
	case c.st == stateFailed:
		err := c.failure
		c.mu.Unlock()
		return nil, err
	}
	if c.stream == nil {
		if err := c.openLocked(); err != nil {
			c.mu.Unlock()
			return c.broken(fmt.Errorf("opening the stream to %q: %w", c.cfg.Service.Target, err))
		}
	}
	if !c.sentAny {
		c.sentAny = true
		req.ProtocolConfig = &pb.ProtocolConfiguration{RequestBodyMode: sendMode(c.mode.RequestBody), ResponseBodyMode: sendMode(c.mode.ResponseBody)}
	}
	req.ObservabilityMode = c.cfg.Observability
	if attrs := c.attributes(k, req); attrs != nil {
		req.Attributes = map[string]*structpb.Struct{AttributesKey: attrs}
	}
	var w *waiter
	if !c.cfg.Observability {
		w = &c.waiters[k.direction()]
		if w.ch == nil {
			w.ch = make(chan answer, 1)
		}
		w.kind = k
		c.waiting[k.direction()] = w
	}
	stream := c.stream
	c.mu.Unlock()

	if err := grpcservice.CheckSize(req); err != nil {
		c.unwait(w)
		return nil, c.refuse(k, err)
	}
	c.sendMu.Lock()
	err := stream.Send(req)
	c.sendMu.Unlock()
	if err != nil && !errors.Is(err, io.EOF) {
		c.unwait(w)
		c.mu.Lock()
		draining := c.draining
		c.mu.Unlock()
		if draining {
			// The stream was half-closed for request_drain meanwhile:
			// the event passes on as it is.
			return nil, nil
		}
		// A marshalling failure: what the RPC carries cannot be sent.
		return nil, c.refuse(k, err)
	}
	// On io.EOF the stream has ended: the reader tells the waiter how.
	if w == nil {
		return nil, nil
	}
	select {
	case a := <-w.ch:
		return a.resp, a.err
	case <-ctx.Done():
		c.unwait(w)
		c.mu.Lock()
		c.abandoned = true
		c.mu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// unwait ends the wait of w (nil: none) without an answer, and drops an
// answer that came meanwhile, so that the reused channel holds none for
// the direction's next event.
func (c *call) unwait(w *waiter) {
	if w == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting[w.kind.direction()] == w {
		c.waiting[w.kind.direction()] = nil
	}
	select {
	case <-w.ch:
	default:
	}
}

// openLocked opens the RPC's stream and starts its reader. Called with mu
// held.
func (c *call) openLocked() error {
	svc := c.cfg.Service
	if c.step.perRPC {
		rel, err := svc.Acquire()
		if err != nil {
			return err
		}
		c.release = rel
	}
	// The stream may outlive the RPC a little (End): it is not cancelled
	// with it. An event waiting for an answer returns when the RPC ends.
	sctx, cancel := context.WithCancel(context.WithoutCancel(c.ctx))
	cc, err := svc.Conn(sctx)
	if err != nil {
		cancel()
		return err
	}
	if svc.Metadata != nil {
		sctx = metadata.NewOutgoingContext(sctx, svc.Metadata)
	}
	stream, err := pb.NewExternalProcessorClient(cc).Process(sctx, grpc.WaitForReady(false))
	if err != nil {
		cancel()
		return err
	}
	c.stream, c.cancel = stream, cancel
	c.readerDone = make(chan struct{})
	go c.read(stream)
	return nil
}

// read reads the stream's answers and hands each to the event waiting for
// it, until the stream ends.
func (c *call) read(stream pb.ExternalProcessor_ProcessClient) {
	defer close(c.readerDone)
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				c.finish(nil)
			} else {
				c.finish(err)
			}
			return
		}
		if c.cfg.Observability {
			continue // answers change nothing
		}
		err = c.dispatch(resp)
		if err == nil && resp.GetRequestDrain() {
			// After the answer was handed over, and not under mu: a
			// Send of the other direction may hold sendMu.
			c.sendMu.Lock()
			_ = stream.CloseSend()
			c.sendMu.Unlock()
		}
		if err != nil {
			c.finish(err)
			c.mu.Lock()
			cancel := c.cancel
			c.mu.Unlock()
			cancel()
			return
		}
	}
}

// dispatch hands resp to the event it answers. An answer for an event
// that is not waiting for one (never sent, answered already, or answered
// out of order) is a protocol error, as gRFC A93 says: the stream is
// treated as failed.
func (c *call) dispatch(resp *pb.ProcessingResponse) error {
	var k kind
	switch resp.GetResponse().(type) {
	case *pb.ProcessingResponse_RequestHeaders:
		k = kindRequestHeaders
	case *pb.ProcessingResponse_RequestBody:
		k = kindRequestBody
	case *pb.ProcessingResponse_ResponseHeaders:
		k = kindResponseHeaders
	case *pb.ProcessingResponse_ResponseBody:
		k = kindResponseBody
	case *pb.ProcessingResponse_ResponseTrailers:
		k = kindResponseTrailers
	case *pb.ProcessingResponse_ImmediateResponse:
		return c.dispatchImmediate(resp)
	case *pb.ProcessingResponse_RequestTrailers:
		return errors.New("the processor answered request_trailers, which gRPC never sends")
	default:
		return errors.New("the processor sent an answer with no response")
	}
	if st := commonOf(resp).GetStatus(); st == pb.CommonResponse_CONTINUE_AND_REPLACE {
		return fmt.Errorf("the processor answered %v with CONTINUE_AND_REPLACE, which gRPC does not support (gRFC A93)", k)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiting[k.direction()]
	if w == nil || w.kind != k {
		return fmt.Errorf("the processor answered %v, which is not the event waiting for an answer (%s): an answer for an event it was not sent, or out of order", k, waitingName(w))
	}
	c.overrideLocked(resp)
	c.waiting[k.direction()] = nil
	w.ch <- answer{resp: resp}
	if resp.GetRequestDrain() {
		c.drainLocked()
	}
	return nil
}

// drainLocked does what an answer's request_drain asks (gRFC A93): the
// stream is half-closed, no event is sent any more (they pass on as they
// are), and the answers to events already sent still apply until the
// processor ends the stream. Called with mu held.
func (c *call) drainLocked() {
	if c.draining {
		return
	}
	c.draining = true // the reader half-closes the stream (read)
}

// dispatchImmediate hands an immediate_response to the event waiting for
// an answer (gRFC A93: it may answer any event); with
// disable_immediate_response it is a failure of the stream.
func (c *call) dispatchImmediate(resp *pb.ProcessingResponse) error {
	if c.cfg.DisableImmediateResponse {
		return errors.New("the processor sent an immediate_response, and disable_immediate_response is set")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := range c.waiting {
		if w := c.waiting[d]; w != nil {
			c.waiting[d] = nil
			w.ch <- answer{resp: resp}
			return nil
		}
	}
	return errors.New("the processor sent an immediate_response while no event was waiting for an answer")
}

func waitingName(w *waiter) string {
	if w == nil {
		return "none"
	}
	return w.kind.String()
}

// overrideLocked applies the answer's mode_override, when the config lets
// the processor override the mode (gRFC A93); request_header_mode cannot
// change. Called with mu held.
func (c *call) overrideLocked(resp *pb.ProcessingResponse) {
	mo := resp.GetModeOverride()
	if mo == nil {
		return
	}
	mo = proto.Clone(mo).(*extprocpb.ProcessingMode)
	mo.RequestHeaderMode = extprocpb.ProcessingMode_DEFAULT // cannot change, and not judged
	m, err := ParseMode(mo)
	if err != nil {
		logger.Warningf("xds: ext_proc %q: the processor's mode_override is ignored: %v", c.step.name, err)
		return
	}
	if !c.cfg.OverrideAllowed(m) {
		return
	}
	m.RequestHeaders = c.mode.RequestHeaders
	c.mode = m
}

// finish records the end of the stream: OK ends processing; any other
// error (or a protocol error) is a failure, which failure_mode_allow turns
// into the end of processing. The events waiting are told.
func (c *call) finish(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st != stateOpen {
		return
	}
	var a answer
	switch {
	case err == nil:
		c.st = stateDone
	case grpcservice.RequestRefused(err) != nil:
		// The processor refused what the RPC sent as too large: the
		// client's doing, never an allow.
		c.st, c.failure = stateFailed, status.Errorf(codes.ResourceExhausted, "xds: ext_proc %q: %v", c.step.name, grpcservice.RequestRefused(err))
		a.err = c.failure
	case c.cfg.FailureModeAllow:
		logger.Infof("xds: ext_proc %q: the stream to %q failed (%v); the RPC goes on unprocessed (failure_mode_allow)", c.step.name, c.cfg.Service.Target, err)
		c.st = stateDone
	default:
		c.st, c.failure = stateFailed, status.Errorf(codes.Unavailable, "xds: ext_proc %q: the stream to %q failed: %v", c.step.name, c.cfg.Service.Target, err)
		a.err = c.failure
	}
	for d, w := range c.waiting {
		if w != nil {
			c.waiting[d] = nil
			w.ch <- a
		}
	}
}

// broken ends a stream that failed before an answer (it could not be
// opened): as finish, and returns what the event gets.
func (c *call) broken(err error) (*pb.ProcessingResponse, error) {
	c.finish(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st == stateFailed {
		return nil, c.failure
	}
	return nil, nil
}

// refuse fails the RPC whose event cannot be sent (too large, or not
// encodable): the RPC's own doing, so no failure mode lets it through.
func (c *call) refuse(k kind, err error) error {
	code := codes.ResourceExhausted
	if k.direction() == serverToClient {
		code = codes.Internal
	}
	return status.Errorf(code, "xds: ext_proc %q: the RPC's %v cannot be sent to the processor: %v", c.step.name, k, err)
}

// --- answers ---

// commonOf returns the CommonResponse of a headers or body answer.
func commonOf(resp *pb.ProcessingResponse) *pb.CommonResponse {
	switch r := resp.GetResponse().(type) {
	case *pb.ProcessingResponse_RequestHeaders:
		return r.RequestHeaders.GetResponse()
	case *pb.ProcessingResponse_ResponseHeaders:
		return r.ResponseHeaders.GetResponse()
	case *pb.ProcessingResponse_RequestBody:
		return r.RequestBody.GetResponse()
	case *pb.ProcessingResponse_ResponseBody:
		return r.ResponseBody.GetResponse()
	}
	return nil
}

// mutate applies a headers answer's header mutation to md.
func (c *call) mutate(md metadata.MD, cr *pb.CommonResponse) (bool, error) {
	m := cr.GetHeaderMutation()
	if m == nil {
		return false, nil
	}
	var ign ignoredEntries
	changed, err := applyMutation(md, m, &c.cfg.Rules, &ign)
	c.step.ignored(c.ctx, &ign)
	if err != nil {
		return false, c.invalidMutation(err)
	}
	return changed, nil
}

// invalidMutation is what an answer whose header mutation is invalid, or
// disallowed under disallow_is_error, fails the RPC with (gRFC A93:
// INTERNAL).
func (c *call) invalidMutation(err error) error {
	return status.Errorf(codes.Internal, "xds: ext_proc %q: the processor's header mutation cannot be applied: %v", c.step.name, err)
}

// body reads a body answer (GRPC mode): the message the RPC carries
// instead of orig (nil: none, when end_of_stream_without_message is set)
// and whether the processor ended the direction (end_of_stream; a server
// message never does). An answer without a body mutation passes
// orig on unchanged (CONTINUE, as Envoy reads it); body and clear_body
// are not supported (gRFC A93), and are a failure of the stream.
func (c *call) body(cr *pb.CommonResponse, orig []byte) (msg []byte, eos bool, err error) {
	bm := cr.GetBodyMutation()
	if bm == nil {
		return orig, false, nil
	}
	sr := bm.GetStreamedResponse()
	if sr == nil {
		_, err := c.broken(errors.New("the processor answered a message with a body or clear_body mutation, which GRPC body mode does not support (gRFC A93: streamed_response only)"))
		if err != nil {
			return nil, false, err
		}
		return orig, false, nil
	}
	if sr.GetEndOfStreamWithoutMessage() {
		// No message: with end_of_stream, the half-close alone (as
		// C-core's half-close answer); without, the message is dropped.
		return nil, sr.GetEndOfStream(), nil
	}
	body := sr.GetBody()
	if body == nil {
		body = []byte{}
	}
	return body, sr.GetEndOfStream(), nil
}

// immediate ends the RPC as an immediate_response says (gRFC A93): its
// grpc_status and details, and its headers as a mutation of the trailers
// (trailer, for an answer to the trailers; else set on the RPC's transport
// stream).
func (c *call) immediate(ctx context.Context, ir *pb.ImmediateResponse, trailer metadata.MD) error {
	code := codes.Unknown
	switch {
	case ir.GetGrpcStatus() != nil:
		code = codes.Code(ir.GetGrpcStatus().GetStatus())
	case ir.GetStatus() != nil && ir.GetStatus().GetCode() != 0:
		// An answer written for Envoy's HTTP: gRPC's mapping of its code.
		code = codes.Code(httpfilter.GRPCCodeOfHTTP(int(ir.GetStatus().GetCode())))
	}
	if m := ir.GetHeaders(); m != nil {
		md := trailer
		if md == nil {
			md = metadata.MD{}
		}
		var ign ignoredEntries
		_, err := applyMutation(md, m, &c.cfg.Rules, &ign)
		c.step.ignored(ctx, &ign)
		if err != nil {
			return c.invalidMutation(err)
		}
		if trailer == nil && len(md) > 0 {
			_ = grpc.SetTrailer(ctx, md)
		}
	}
	c.mu.Lock()
	c.st = stateDone // nothing more goes to the processor
	c.mu.Unlock()
	if code == codes.OK {
		return httpfilter.ErrSkipHandler
	}
	return status.Error(code, ir.GetDetails())
}

// --- what is sent ---

func sendMode(grpcMode bool) extprocpb.ProcessingMode_BodySendMode {
	if grpcMode {
		return extprocpb.ProcessingMode_GRPC
	}
	return extprocpb.ProcessingMode_NONE
}

// requestPseudo are the request's pseudo-headers as Envoy sends them.
func (c *call) requestPseudo() [][2]string {
	scheme := "http"
	if c.req.TLS {
		scheme = "https"
	}
	return [][2]string{{":authority", c.req.Authority}, {":method", "POST"}, {":path", c.req.FullMethod}, {":scheme", scheme}}
}

// headerMap lists pseudo, then the headers of md that forward_rules let
// through (in name order; pseudo-headers of md are left out, pseudo has
// them), each value raw, a binary ("-bin") one base64-encoded (gRFC
// A102).
func (c *call) headerMap(md map[string][]string, pseudo [][2]string) *corepb.HeaderMap {
	keys := make([]string, 0, len(md))
	for k := range md {
		if strings.HasPrefix(k, ":") || !c.forwards(k) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	n := len(pseudo)
	for _, k := range keys {
		n += len(md[k])
	}
	// One allocation for the values, not one each.
	vals := make([]corepb.HeaderValue, 0, n)
	for _, p := range pseudo {
		vals = append(vals, corepb.HeaderValue{Key: p[0], RawValue: []byte(p[1])})
	}
	for _, k := range keys {
		for _, v := range md[k] {
			vals = append(vals, corepb.HeaderValue{Key: k, RawValue: grpcservice.HeaderMapValue(k, v)})
		}
	}
	hm := &corepb.HeaderMap{Headers: make([]*corepb.HeaderValue, len(vals))}
	for i := range vals {
		hm.Headers[i] = &vals[i]
	}
	return hm
}

// forwards reports whether forward_rules let header k go to the processor.
func (c *call) forwards(k string) bool {
	return !matcher.MatchAny(c.cfg.Disallowed, k) && (c.cfg.Allowed == nil || matcher.MatchAny(c.cfg.Allowed, k))
}

// attributes are the attributes sent with req, an event of kind k; nil
// when none is configured. Response attributes know the response headers
// and trailers the events carry (the status from the trailers).
func (c *call) attributes(k kind, req *pb.ProcessingRequest) *structpb.Struct {
	if k.direction() == clientToServer {
		if len(c.cfg.RequestAttributes) == 0 {
			return nil
		}
		return RequestAttributes(c.cfg.RequestAttributes, c.req)
	}
	if len(c.cfg.ResponseAttributes) == 0 {
		return nil
	}
	var r Response
	if h := req.GetResponseHeaders(); h != nil {
		r.Header = headerMapMD(h.GetHeaders())
	}
	if t := req.GetResponseTrailers(); t != nil {
		r.Trailer = headerMapMD(t.GetTrailers())
		if v := r.Trailer["grpc-status"]; len(v) == 1 {
			if n, err := strconv.Atoi(v[0]); err == nil {
				r.Ended, r.Code = true, codes.Code(n)
			}
		}
	}
	return ResponseAttributes(c.cfg.ResponseAttributes, c.req, r)
}

// headerMapMD reads back a header map this file wrote (raw values).
func headerMapMD(hm *corepb.HeaderMap) map[string][]string {
	md := make(map[string][]string, len(hm.GetHeaders()))
	for _, h := range hm.GetHeaders() {
		md[h.GetKey()] = append(md[h.GetKey()], string(h.GetRawValue()))
	}
	return md
}

var (
	_ httpfilter.MessageReceiver = (*call)(nil)
	_ httpfilter.HeaderSender    = (*call)(nil)
	_ httpfilter.MessageSender   = (*call)(nil)
	_ httpfilter.TrailerSender   = (*call)(nil)
)
