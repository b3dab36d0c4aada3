package rpcpath_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// evFilter is a throw-away filter whose calls handle the events its
// config (*evConfig) names, and log each, for the tests of the response
// path. It declares every event unless undeclared.
type evFilter struct{ undeclared bool }

func (evFilter) ConfigTypeURLs() []string   { return nil }
func (evFilter) OverrideTypeURLs() []string { return nil }
func (evFilter) IsTerminal() bool           { return false }
func (f evFilter) Needs() httpfilter.Needs {
	n := httpfilter.Needs{After: true}
	if !f.undeclared {
		n.Events = httpfilter.ClientMessages | httpfilter.ServerHeaders | httpfilter.ServerMessages | httpfilter.ServerTrailers
	}
	return n
}
func (evFilter) ParseConfig(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("not parsed")
}
func (evFilter) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("not parsed")
}
func (evFilter) BuildStep(_ string, config, _ httpfilter.Config) (httpfilter.Step, error) {
	return config.(*evConfig), nil
}

// evLog is what the calls of one test did, in order.
type evLog struct {
	mu  sync.Mutex
	ran []string
}

func (l *evLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ran = append(l.ran, s)
}

func (l *evLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ran...)
}

// evConfig is one filter instance: its calls tag what passes through them
// with its name (a request's and a response's username, the x-order
// header and trailer); the hooks below change that.
type evConfig struct {
	name   string
	log    *evLog
	events httpfilter.Events
	// recv, when set, gives the messages the call leaves for one it reads
	// (nil: the message, tagged).
	recv func(m *testpb.StreamingOutputCallRequest) []*testpb.StreamingOutputCallRequest
	// recvErr fails the n-th client message (1-based) with it.
	recvErr  error
	recvErrN int
	// tag appends the name to each client message's payload.
	tag bool
	// dropRaw drops the client messages whose bytes contain it.
	dropRaw string
	// trailerStatus replaces the RPC's status.
	trailerStatus error
	// panicHeader makes SendHeader panic.
	panicHeader bool
	// refuse makes RunAfter refuse the RPC.
	refuse error
}

func (c *evConfig) Run(ctx context.Context, _ httpfilter.RPC) (context.Context, httpfilter.After, error) {
	return ctx, &evCall{cfg: c}, nil
}

type evCall struct {
	cfg  *evConfig
	nmsg int
}

func (c *evCall) RunAfter(ctx context.Context) (context.Context, error) {
	c.cfg.log.add(c.cfg.name + " headers")
	return ctx, c.cfg.refuse
}

func (c *evCall) Events() httpfilter.Events { return c.cfg.events }

func (c *evCall) End(err error) {
	c.cfg.log.add(c.cfg.name + " end " + status.Code(err).String())
}

func (c *evCall) RecvMessage(ctx context.Context, next func() ([]byte, error)) ([]byte, error) {
	for {
		b, err := next()
		if b == nil {
			c.cfg.log.add(c.cfg.name + " half-close")
			return nil, err
		}
		c.nmsg++
		if c.cfg.recvErr != nil && c.nmsg == c.cfg.recvErrN {
			return nil, c.cfg.recvErr
		}
		if c.cfg.dropRaw != "" && strings.Contains(string(b), c.cfg.dropRaw) {
			c.cfg.log.add(c.cfg.name + " dropped")
			if err != nil {
				return nil, err
			}
			continue
		}
		// A unary request (SimpleRequest) has its payload where a
		// streaming one has it: both read as the streaming type.
		m := &testpb.StreamingOutputCallRequest{}
		if err := proto.Unmarshal(b, m); err != nil {
			return nil, err
		}
		c.cfg.log.add(c.cfg.name + " recv " + string(m.GetPayload().GetBody()))
		if c.cfg.tag {
			m.Payload.Body = append(m.Payload.Body, "|"+c.cfg.name...)
		}
		outs := []*testpb.StreamingOutputCallRequest{m}
		if c.cfg.recv != nil {
			outs = c.cfg.recv(m)
		}
		if len(outs) == 0 {
			if err != nil {
				return nil, err
			}
			continue // dropped: read the next
		}
		if len(outs) > 1 {
			// Several: this test filter keeps the rest for later.
			panic("evCall: several messages for one are written with recvMany")
		}
		out, _ := proto.Marshal(outs[0])
		return out, err
	}
}

func (c *evCall) SendHeader(_ context.Context, header map[string][]string, endOfStream bool) error {
	c.cfg.log.add(c.cfg.name + " send-header eos=" + map[bool]string{true: "true", false: "false"}[endOfStream])
	if c.cfg.panicHeader {
		panic("header of " + c.cfg.name)
	}
	header["x-order"] = append(header["x-order"], c.cfg.name)
	return nil
}

func (c *evCall) SendMessage(_ context.Context, b []byte, send func([]byte) error) error {
	m := &testpb.SimpleResponse{}
	if proto.Unmarshal(b, m) == nil && m.GetUsername() != "" {
		m.Username += "|" + c.cfg.name
		c.cfg.log.add(c.cfg.name + " send")
		out, _ := proto.Marshal(m)
		return send(out)
	}
	sm := &testpb.StreamingOutputCallResponse{}
	if err := proto.Unmarshal(b, sm); err != nil {
		return err
	}
	c.cfg.log.add(c.cfg.name + " send " + string(sm.GetPayload().GetBody()))
	// Each message twice: several for one.
	for range 2 {
		if err := send(b); err != nil {
			return err
		}
	}
	return nil
}

func (c *evCall) SendTrailer(_ context.Context, rpcErr error, trailer map[string][]string, _ func([]byte) error) error {
	c.cfg.log.add(c.cfg.name + " trailer " + status.Code(rpcErr).String())
	trailer["x-order"] = append(trailer["x-order"], c.cfg.name)
	if c.cfg.trailerStatus != nil {
		return c.cfg.trailerStatus
	}
	return rpcErr
}

const allEvents = httpfilter.ClientMessages | httpfilter.ServerHeaders | httpfilter.ServerMessages | httpfilter.ServerTrailers

// evServer serves svc behind a chain whose filters are cfgs, in order, on
// loopback, and returns a client of it.
func evServer(t *testing.T, svc testgrpc.TestServiceServer, undeclared bool, cfgs ...*evConfig) testgrpc.TestServiceClient {
	t.Helper()
	hcm := &filterchain.HTTPConnectionManager{}
	for _, c := range cfgs {
		hcm.Filters = append(hcm.Filters, httpfilter.Instance{Name: c.name, Filter: evFilter{undeclared: undeclared}, Config: c})
	}
	hcm.Filters = append(hcm.Filters, routerOnly.Filters...)
	r, err := routing.Compile(e2e.DefaultRouteConfig("rc"), nil)
	if err != nil {
		t.Fatal(err)
	}
	chain := rpcpath.NewChain("fc", hcm, rpcpath.NewSource(rpcpath.NewRoutes(r, hcm, nil)))
	s := grpc.NewServer(chain.ServerOptions(nil, rpcpath.UserOptions{})...)
	testgrpc.RegisterTestServiceServer(s, svc)
	addr := testutils.ServeGRPC(t, s)
	cc, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

func evCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// unaryEcho answers with the request's username, a header and a trailer.
type unaryEcho struct {
	testgrpc.UnimplementedTestServiceServer
	log *evLog
	err error
}

func (s unaryEcho) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.log.add("handler " + string(req.GetPayload().GetBody()))
	grpc.SetHeader(ctx, metadata.Pairs("x-order", "handler"))
	grpc.SetTrailer(ctx, metadata.Pairs("x-order", "handler"))
	if s.err != nil {
		return nil, s.err
	}
	return &testpb.SimpleResponse{Username: string(req.GetPayload().GetBody()) + "|handler"}, nil
}

// TestEventsUnary: a unary RPC's request goes through the calls in
// http_filters order, its headers, response and trailers in reverse
// order, each call seeing what the ones before it on that path left; the
// client gets what the last one left; every call ends once, with the
// RPC's status.
func TestEventsUnary(t *testing.T) {
	log := &evLog{}
	c := evServer(t, unaryEcho{log: log}, false, &evConfig{name: "a", log: log, events: allEvents, tag: true}, &evConfig{name: "b", log: log, events: allEvents, tag: true})
	var hdr, trl metadata.MD
	resp, err := c.UnaryCall(evCtx(t), &testpb.SimpleRequest{Payload: body("client")}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.GetUsername(), "client|a|b|handler|b|a"; got != want {
		t.Errorf("response username %q, want %q", got, want)
	}
	if got, want := strings.Join(hdr.Get("x-order"), ","), "handler,b,a"; got != want {
		t.Errorf("header x-order %q, want %q", got, want)
	}
	if got, want := strings.Join(trl.Get("x-order"), ","), "handler,b,a"; got != want {
		t.Errorf("trailer x-order %q, want %q", got, want)
	}
	sameLog(t, log.get(), []string{"a headers", "b headers", "a recv client", "b recv client|a", "handler client|a|b",
		"b send-header eos=false", "a send-header eos=false", "b send", "a send", "b trailer OK", "a trailer OK", "a end OK", "b end OK"})
}

// TestEventsTrailersOnly: an RPC that fails in its handler is a
// Trailers-Only response to the calls (endOfStream), and a call may
// change the status the client gets.
func TestEventsTrailersOnly(t *testing.T) {
	log := &evLog{}
	c := evServer(t, unaryEcho{log: log, err: status.Error(codes.NotFound, "no")}, false,
		&evConfig{name: "a", log: log, events: allEvents, tag: true, trailerStatus: status.Error(codes.Aborted, "a says so")},
		&evConfig{name: "b", log: log, events: httpfilter.ServerHeaders | httpfilter.ServerTrailers})
	var trl metadata.MD
	_, err := c.UnaryCall(evCtx(t), &testpb.SimpleRequest{Payload: body("client")}, grpc.Trailer(&trl))
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "a says so") {
		t.Fatalf("UnaryCall = %v, want ABORTED from call a", err)
	}
	sameLog(t, log.get(), []string{"a headers", "b headers", "a recv client", "handler client|a",
		"b send-header eos=true", "a send-header eos=true", "b trailer NotFound", "a trailer NotFound", "a end Aborted", "b end Aborted"})
}

// streamEcho echoes each message; it ignores a receive error, so that the
// status a call ends the RPC with is the calls', not the handler's.
type streamEcho struct {
	testgrpc.UnimplementedTestServiceServer
	log *evLog
}

func (s streamEcho) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			s.log.add("handler recv EOF")
			return nil
		}
		if err != nil {
			s.log.add("handler recv " + status.Code(err).String())
			return nil
		}
		s.log.add("handler " + string(req.GetPayload().GetBody()))
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return nil
		}
	}
}

func body(s string) *testpb.Payload { return &testpb.Payload{Body: []byte(s)} }

// duplex sends msgs, half-closes, and returns the bodies received and the
// RPC's status.
func duplex(t *testing.T, c testgrpc.TestServiceClient, msgs ...string) ([]string, error) {
	t.Helper()
	st, err := c.FullDuplexCall(evCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: body(m)}); err != nil {
			break
		}
	}
	st.CloseSend()
	var got []string
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, string(r.GetPayload().GetBody()))
	}
}

// TestEventsStreaming: on a bidirectional stream, a call may drop client
// messages, and send several messages for one; the calls of each
// direction run in their order; the half-close reaches every call.
func TestEventsStreaming(t *testing.T) {
	log := &evLog{}
	dropX := func(m *testpb.StreamingOutputCallRequest) []*testpb.StreamingOutputCallRequest {
		if string(m.GetPayload().GetBody()) == "x" {
			return nil
		}
		return []*testpb.StreamingOutputCallRequest{m}
	}
	c := evServer(t, streamEcho{log: log}, false,
		&evConfig{name: "a", log: log, events: httpfilter.ClientMessages, recv: dropX},
		&evConfig{name: "b", log: log, events: allEvents})
	got, err := duplex(t, c, "1", "x", "2")
	if err != nil {
		t.Fatal(err)
	}
	// b sends each of the handler's messages twice.
	if want := "1,1,2,2"; strings.Join(got, ",") != want {
		t.Errorf("client received %q, want %q", got, want)
	}
	sameLog(t, log.get(), []string{"a headers", "b headers",
		"a recv 1", "b recv 1", "handler 1", "b send-header eos=false", "b send 1",
		"a recv x", "a recv 2", "b recv 2", "handler 2", "b send 2",
		"a half-close", "b half-close", "handler recv EOF",
		"b trailer OK", "a end OK", "b end OK"})
}

// TestEventsCallEndsRPC: a call's error ends the RPC with its status,
// whatever the handler returns; the calls after it see nothing more.
func TestEventsCallEndsRPC(t *testing.T) {
	log := &evLog{}
	c := evServer(t, streamEcho{log: log}, false,
		&evConfig{name: "a", log: log, events: httpfilter.ClientMessages, recvErr: status.Error(codes.PermissionDenied, "a refuses message 2"), recvErrN: 2},
		&evConfig{name: "b", log: log, events: allEvents})
	got, err := duplex(t, c, "1", "2", "3")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "a refuses message 2") {
		t.Fatalf("RPC ended with %v, want a's PERMISSION_DENIED", err)
	}
	if strings.Join(got, ",") != "1,1" {
		t.Errorf("client received %q before the end, want 1,1", got)
	}
	for _, l := range log.get() {
		if strings.Contains(l, "trailer") || strings.HasSuffix(l, " 3") {
			t.Errorf("after the call ended the RPC: %q (log %q)", l, log.get())
		}
	}
}

// TestEventsBrokenCall: a call whose filter did not declare the events it
// names, and a call that panics, fail the RPC with INTERNAL naming the
// filter; the server goes on serving.
func TestEventsBrokenCall(t *testing.T) {
	t.Run("undeclared", func(t *testing.T) {
		log := &evLog{}
		c := evServer(t, unaryEcho{log: log}, true, &evConfig{name: "u", log: log, events: httpfilter.ServerHeaders})
		_, err := c.UnaryCall(evCtx(t), &testpb.SimpleRequest{Payload: body("client")})
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), `"u"`) {
			t.Fatalf("UnaryCall = %v, want INTERNAL naming filter u", err)
		}
	})
	t.Run("panic", func(t *testing.T) {
		log := &evLog{}
		c := evServer(t, unaryEcho{log: log}, false, &evConfig{name: "p", log: log, events: allEvents, panicHeader: true})
		for range 2 {
			_, err := c.UnaryCall(evCtx(t), &testpb.SimpleRequest{Payload: body("client")})
			if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), `"p"`) {
				t.Fatalf("UnaryCall = %v, want INTERNAL naming filter p", err)
			}
		}
	})
}

// TestEventsRefusedRPC: when a filter refuses the RPC after an earlier
// one's call started, the refusal goes through that call's headers and
// trailers (as Envoy's local reply goes through the encoder filters before
// the one that replied), not through the refusing call's own, and no
// message reaches a call or the handler; every call ends with the
// refusal.
func TestEventsRefusedRPC(t *testing.T) {
	log := &evLog{}
	c := evServer(t, unaryEcho{log: log}, false,
		&evConfig{name: "a", log: log, events: allEvents},
		&evConfig{name: "b", log: log, events: allEvents, refuse: status.Error(codes.Unauthenticated, "b refuses")})
	_, err := c.UnaryCall(evCtx(t), &testpb.SimpleRequest{Payload: body("client")})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("UnaryCall = %v, want UNAUTHENTICATED", err)
	}
	sameLog(t, log.get(), []string{"a headers", "b headers", "a send-header eos=true", "a trailer Unauthenticated", "a end Unauthenticated", "b end Unauthenticated"})
}

// shapes serves the two one-sided streaming shapes: the client's messages
// summed into one answer, and one request answered with several.
type shapes struct {
	testgrpc.UnimplementedTestServiceServer
}

func (shapes) StreamingInputCall(st testgrpc.TestService_StreamingInputCallServer) error {
	var n int32
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return st.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: n})
		}
		if err != nil {
			return err
		}
		n += int32(len(m.GetPayload().GetBody()))
	}
}

func (shapes) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
	for range 2 {
		if err := st.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
	return nil
}

// TestEventsStreamShapes: client-streaming and server-streaming RPCs go
// through the same path: a call that drops a client message changes what
// the handler sums, one that doubles each server message doubles what the
// client gets.
func TestEventsStreamShapes(t *testing.T) {
	log := &evLog{}
	ctx := evCtx(t)
	sumOf := func(c testgrpc.TestServiceClient) (*testpb.StreamingInputCallResponse, error) {
		in, err := c.StreamingInputCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"ab", "x", "cde"} {
			if err := in.Send(&testpb.StreamingInputCallRequest{Payload: body(b)}); err != nil {
				t.Fatal(err)
			}
		}
		return in.CloseAndRecv()
	}
	recvOnly := evServer(t, shapes{}, false, &evConfig{name: "a", log: log, events: httpfilter.ClientMessages, dropRaw: "x"})
	if resp, err := sumOf(recvOnly); err != nil || resp.GetAggregatedPayloadSize() != 5 {
		t.Fatalf("client streaming: %v, %v; want 5 bytes (x dropped)", resp, err)
	}
	// A call that sends two responses for one: the RPC fails with INTERNAL
	// saying so, not with the client's cardinality error.
	c := evServer(t, shapes{}, false, &evConfig{name: "a", log: log, events: allEvents, dropRaw: "x"})
	if _, err := sumOf(c); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "more than one response") {
		t.Fatalf("client streaming, a call doubling the response: %v, want INTERNAL saying so", err)
	}

	out, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{Payload: body("p")})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for {
		_, err := out.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 4 {
		t.Errorf("server streaming: %d messages, want 4 (each of the handler's 2 sent twice)", n)
	}
}
