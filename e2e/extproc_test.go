package e2e_test

// End-to-end tests of the ext_proc filter (gRFC A93 draft): a real
// management server, a real xDS server, real grpc-go clients, and a
// scriptable ext_proc server (internal/testutils/extprocserver) on
// loopback.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/admin"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/extprocserver"
)

// extProc is an ExternalProcessor config calling target with mode.
func extProc(target string, mode *extprocpb.ProcessingMode) *extprocpb.ExternalProcessor {
	return &extprocpb.ExternalProcessor{
		GrpcService: &corepb.GrpcService{
			TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: target, StatPrefix: "ignored"}},
			InitialMetadata: []*corepb.HeaderValue{{Key: "x-from-config", Value: "v1"}},
		},
		ProcessingMode: mode,
	}
}

// allEvents sends every event, bodies in GRPC mode.
func allEvents() *extprocpb.ProcessingMode {
	return &extprocpb.ProcessingMode{
		RequestHeaderMode: extprocpb.ProcessingMode_SEND, ResponseHeaderMode: extprocpb.ProcessingMode_SEND, ResponseTrailerMode: extprocpb.ProcessingMode_SEND,
		RequestBodyMode: extprocpb.ProcessingMode_GRPC, ResponseBodyMode: extprocpb.ProcessingMode_GRPC,
	}
}

// headersOnly sends the request and response headers (the modes' defaults).
func headersOnly() *extprocpb.ProcessingMode { return &extprocpb.ProcessingMode{} }

// startExtProc serves a Listener whose chain runs filters (ext_proc
// "proc" with cfg first) over rc, with the user's interceptors recorded.
func startExtProc(ctx context.Context, t *testing.T, env *testEnv, rc *routepb.RouteConfiguration, filters ...*hcmpb.HttpFilter) (*testClient, *handlerRecorder) {
	t.Helper()
	return startExtProcWith(ctx, t, env, rc, nil, filters...)
}

// startExtProcWith is startExtProc with the server's options opts.
func startExtProcWith(ctx context.Context, t *testing.T, env *testEnv, rc *routepb.RouteConfiguration, opts []grpc.ServerOption, filters ...*hcmpb.HttpFilter) (*testClient, *handlerRecorder) {
	t.Helper()
	rec := &handlerRecorder{}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener { return filtersListener(a, filters, rc, "") }, nil, append(rec.options(), opts...)...)
	return connected(ctx, t, addr), rec
}

// payloadOf reads a request or response body's payload (both
// grpc.testing messages keep it in a field the streaming types share).
func payloadOf(b []byte) string {
	m := &testpb.StreamingOutputCallRequest{}
	if proto.Unmarshal(b, m) != nil {
		return "?"
	}
	return string(m.GetPayload().GetBody())
}

// withPayload returns b, a request with a payload, with the payload set
// to p.
func withPayload(b []byte, p string) []byte {
	m := &testpb.StreamingOutputCallRequest{}
	if proto.Unmarshal(b, m) != nil {
		return b
	}
	m.Payload = &testpb.Payload{Body: []byte(p)}
	out, _ := proto.Marshal(m)
	return out
}

// responsePayload is a response (SimpleResponse or
// StreamingOutputCallResponse: both keep the payload in field 1) whose
// payload is p.
func responsePayload(p string) []byte {
	out, _ := proto.Marshal(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(p)}})
	return out
}

func streamed(body []byte, eos bool) *pb.BodyMutation {
	return &pb.BodyMutation{Mutation: &pb.BodyMutation_StreamedResponse{StreamedResponse: &pb.StreamedBodyResponse{Body: body, EndOfStream: eos}}}
}

// redactor answers every event: it adds x-proc-req to the request
// headers, x-proc-resp to the response headers and x-proc-trailer to the
// trailers, and rewrites each message's payload (request: upper case;
// response: "redacted"), mirroring end_of_stream.
func redactor(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
	set := func(k, v string) *pb.CommonResponse {
		return &pb.CommonResponse{HeaderMutation: &pb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{{Header: &corepb.HeaderValue{Key: k, RawValue: []byte(v)}}}}}
	}
	var r *pb.ProcessingResponse
	switch x := req.GetRequest().(type) {
	case *pb.ProcessingRequest_RequestHeaders:
		r = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_RequestHeaders{RequestHeaders: &pb.HeadersResponse{Response: set("x-proc-req", "yes")}}}
	case *pb.ProcessingRequest_ResponseHeaders:
		r = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_ResponseHeaders{ResponseHeaders: &pb.HeadersResponse{Response: set("x-proc-resp", "yes")}}}
	case *pb.ProcessingRequest_ResponseTrailers:
		r = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_ResponseTrailers{ResponseTrailers: &pb.TrailersResponse{HeaderMutation: set("x-proc-trailer", "yes").HeaderMutation}}}
	case *pb.ProcessingRequest_RequestBody:
		b := x.RequestBody
		cr := &pb.CommonResponse{BodyMutation: streamed(withPayload(b.GetBody(), strings.ToUpper(payloadOf(b.GetBody()))), b.GetEndOfStream())}
		if b.GetEndOfStreamWithoutMessage() {
			cr.BodyMutation.GetStreamedResponse().Body = nil
			cr.BodyMutation.GetStreamedResponse().EndOfStreamWithoutMessage = true
		}
		r = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_RequestBody{RequestBody: &pb.BodyResponse{Response: cr}}}
	case *pb.ProcessingRequest_ResponseBody:
		r = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_ResponseBody{ResponseBody: &pb.BodyResponse{Response: &pb.CommonResponse{BodyMutation: streamed(responsePayload("redacted"), false)}}}}
	}
	if r == nil {
		return nil
	}
	return []*pb.ProcessingResponse{r}
}

func events(r extprocserver.StreamRecord) string {
	var out []string
	for _, e := range r.Events() {
		out = append(out, string(e))
	}
	return strings.Join(out, ",")
}

// TestExtProc_EveryEventUnary: a unary RPC's every event goes to the
// processor, in order, on one stream, and its answers change what the
// handler and the client see: request headers and message, response
// headers, message and trailers. The first request carries the protocol
// config; the stream carries the GrpcService's initial_metadata.
func TestExtProc_EveryEventUnary(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.Raw(redactor))
	env := authzEnv(t, false, p.Addr())
	c, rec := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", extProc(p.Addr(), allEvents())))

	var hdr, trl metadata.MD
	resp, err := c.UnaryCall(withCase(ctx, "unary"), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("secret")}}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil {
		t.Fatalf("UnaryCall: %v, want OK", err)
	}
	if got := string(resp.GetPayload().GetBody()); got != "redacted" {
		t.Errorf("client got payload %q, want the processor's %q", got, "redacted")
	}
	calls := rec.ofCase("unary")
	if len(calls) != 1 || len(calls[0].md.Get("x-proc-req")) != 1 {
		t.Fatalf("handler calls %+v, want one with x-proc-req", calls)
	}
	if hdr.Get("x-proc-resp")[0] != "yes" || len(trl.Get("x-proc-trailer")) != 1 {
		t.Errorf("client headers %v trailers %v, want x-proc-resp and x-proc-trailer", hdr, trl)
	}
	recs, err := p.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := recs[0]
	if got, want := events(r), "request_headers,request_body,response_headers,response_body,response_trailers"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	pc := r.Requests[0].GetProtocolConfig()
	if pc.GetRequestBodyMode() != extprocpb.ProcessingMode_GRPC || pc.GetResponseBodyMode() != extprocpb.ProcessingMode_GRPC {
		t.Errorf("first request's protocol_config %v, want GRPC both ways", pc)
	}
	for _, q := range r.Requests[1:] {
		if q.GetProtocolConfig() != nil {
			t.Errorf("protocol_config on a later request: %v", q)
		}
	}
	if b := r.Requests[1].GetRequestBody(); payloadOf(b.GetBody()) != "secret" || !b.GetEndOfStream() {
		t.Errorf("request_body %v, want the client's message with end_of_stream (a unary request comes with its half-close)", b)
	}
	if got := r.Metadata.Get("x-from-config"); len(got) != 1 || got[0] != "v1" {
		t.Errorf("stream metadata x-from-config = %q, want [v1]", got)
	}
	th := map[string]string{}
	for _, h := range r.Requests[4].GetResponseTrailers().GetTrailers().GetHeaders() {
		th[h.GetKey()] = string(h.GetRawValue())
	}
	if th["grpc-status"] != "0" {
		t.Errorf("response_trailers %v, want grpc-status 0", th)
	}
	rh := map[string]string{}
	for _, h := range r.Requests[0].GetRequestHeaders().GetHeaders().GetHeaders() {
		rh[h.GetKey()] = string(h.GetRawValue())
	}
	if rh[":path"] != "/grpc.testing.TestService/UnaryCall" || rh[":method"] != "POST" || rh[caseHeader] != "unary" {
		t.Errorf("request_headers %v, want :path, :method POST and the client's headers", rh)
	}
}

// TestExtProc_Streaming: on a bidirectional stream each client message
// and the half-close (end_of_stream_without_message) go to the processor,
// which can drop messages and replace them; each server message too; the
// two directions are independent.
func TestExtProc_Streaming(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
		if b := req.GetRequestBody(); b != nil && payloadOf(b.GetBody()) == "drop" {
			// Dropped: no message, no half-close.
			cr := &pb.CommonResponse{BodyMutation: &pb.BodyMutation{Mutation: &pb.BodyMutation_StreamedResponse{StreamedResponse: &pb.StreamedBodyResponse{EndOfStreamWithoutMessage: true}}}}
			return []*pb.ProcessingResponse{{Response: &pb.ProcessingResponse_RequestBody{RequestBody: &pb.BodyResponse{Response: cr}}}}
		}
		return redactor(req)
	}))
	env := authzEnv(t, false, p.Addr())
	c, _ := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", extProc(p.Addr(), allEvents())))

	st, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range []string{"a", "drop", "b"} {
		if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(m)}}); err != nil {
			t.Fatal(err)
		}
		if m == "drop" {
			continue
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(r.GetPayload().GetBody()))
	}
	st.CloseSend()
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v, want OK", err)
	}
	if strings.Join(got, ",") != "redacted,redacted" {
		t.Errorf("client received %q, want two redacted messages (one dropped)", got)
	}
	recs, err := p.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, q := range recs[0].Requests {
		if b := q.GetRequestBody(); b != nil {
			s := payloadOf(b.GetBody())
			if b.GetEndOfStreamWithoutMessage() {
				s = "<half-close>"
			}
			bodies = append(bodies, s)
		}
	}
	if want := []string{"a", "drop", "b", "<half-close>"}; !slices.Equal(bodies, want) {
		t.Errorf("request bodies sent %q, want %q", bodies, want)
	}
}

// TestExtProc_Failures: each failure of the processor has its stated
// outcome. A stream that fails, or breaks the protocol, fails the RPC
// with UNAVAILABLE, unless failure_mode_allow, which lets it through
// unprocessed; an immediate_response ends the RPC with its status before
// the handler; a processor that never answers holds the RPC no longer
// than its deadline; a mutation of :path, grpc-status or te is ignored;
// one disallow_is_error refuses fails the RPC with INTERNAL; a message
// the service cannot decode fails it with INTERNAL.
func TestExtProc_Failures(t *testing.T) {
	ctx := testContext(t)
	// headersAnswer answers the request headers with cr, other events
	// with CONTINUE.
	headersAnswer := func(req *pb.ProcessingRequest, cr *pb.CommonResponse) []*pb.ProcessingResponse {
		if req.GetRequestHeaders() == nil {
			return []*pb.ProcessingResponse{extprocserver.ContinueResponse(req)}
		}
		return []*pb.ProcessingResponse{{Response: &pb.ProcessingResponse_RequestHeaders{RequestHeaders: &pb.HeadersResponse{Response: cr}}}}
	}
	setH := func(kv ...string) *pb.CommonResponse {
		m := &pb.HeaderMutation{}
		for i := 0; i < len(kv); i += 2 {
			m.SetHeaders = append(m.SetHeaders, &corepb.HeaderValueOption{Header: &corepb.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])}, AppendAction: corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})
		}
		return &pb.CommonResponse{HeaderMutation: m}
	}
	for _, tc := range []struct {
		name     string
		handler  extprocserver.Handler
		cfg      func(*extprocpb.ExternalProcessor)
		deadline time.Duration
		want     codes.Code
		handled  bool   // the RPC reaches the handler
		msg      string // in the status message
		check    func(t *testing.T, md metadata.MD)
	}{
		{name: "stream fails", handler: extprocserver.Fail(codes.Internal), want: codes.Unavailable, msg: "ext_proc"},
		{name: "stream fails, failure_mode_allow", handler: extprocserver.Fail(codes.Internal), cfg: func(c *extprocpb.ExternalProcessor) { c.FailureModeAllow = true }, want: codes.OK, handled: true},
		{name: "closes OK", handler: extprocserver.CloseOK(), want: codes.OK, handled: true},
		{name: "immediate response", handler: extprocserver.Immediate(extprocserver.RequestHeaders, codes.PermissionDenied, "processor says no"), want: codes.PermissionDenied, msg: "processor says no"},
		{name: "immediate response disabled", handler: extprocserver.Immediate(extprocserver.RequestHeaders, codes.PermissionDenied, "processor says no"), cfg: func(c *extprocpb.ExternalProcessor) { c.DisableImmediateResponse = true }, want: codes.Unavailable},
		{name: "never answers", handler: extprocserver.Hang(), deadline: 500 * time.Millisecond, want: codes.DeadlineExceeded},
		{name: "answer for an event not sent", handler: extprocserver.Raw(func(*pb.ProcessingRequest) []*pb.ProcessingResponse {
			return []*pb.ProcessingResponse{{Response: &pb.ProcessingResponse_ResponseHeaders{ResponseHeaders: &pb.HeadersResponse{}}}}
		}), want: codes.Unavailable, msg: "not the event waiting"},
		{name: "CONTINUE_AND_REPLACE", handler: extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
			return headersAnswer(req, &pb.CommonResponse{Status: pb.CommonResponse_CONTINUE_AND_REPLACE})
		}), want: codes.Unavailable, msg: "CONTINUE_AND_REPLACE"},
		{name: "reserved headers ignored", handler: extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
			cr := setH(":path", "/grpc.testing.TestService/Other", "grpc-status", "7", "te", "gzip", "x-ok", "yes")
			cr.HeaderMutation.RemoveHeaders = []string{":authority", "host"}
			return headersAnswer(req, cr)
		}), want: codes.OK, handled: true, check: func(t *testing.T, md metadata.MD) {
			if len(md.Get("x-ok")) != 1 || len(md.Get("grpc-status")) != 0 || len(md.Get("te")) != 0 {
				t.Errorf("handler saw %v, want x-ok and no grpc-status or te", md)
			}
		}},
		{name: "disallow_is_error", handler: extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
			return headersAnswer(req, setH("x-user", "root"))
		}), cfg: func(c *extprocpb.ExternalProcessor) {
			c.MutationRules = &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true), DisallowIsError: wrapperspb.Bool(true)}
		}, want: codes.Internal, msg: "header mutation"},
		{name: "disallowed, ignored", handler: extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
			return headersAnswer(req, setH("x-user", "root"))
		}), cfg: func(c *extprocpb.ExternalProcessor) {
			c.MutationRules = &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true)}
		}, want: codes.OK, handled: true, check: func(t *testing.T, md metadata.MD) {
			if got := md.Get("x-user"); len(got) != 1 || got[0] != "client" {
				t.Errorf("handler saw x-user %q, want the client's [client]: the disallowed mutation ignored", got)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := extprocserver.Start(t, tc.handler)
			env := authzEnv(t, false, p.Addr())
			cfg := extProc(p.Addr(), headersOnly())
			if tc.cfg != nil {
				tc.cfg(cfg)
			}
			c, rec := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", cfg))
			rctx := withCase(ctx, "f", "x-user", "client")
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				rctx, cancel = context.WithTimeout(rctx, tc.deadline)
				defer cancel()
			}
			start := time.Now()
			err := rpcResult(rctx, c, "EmptyCall")
			if status.Code(err) != tc.want || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("EmptyCall = %v, want %v containing %q", err, tc.want, tc.msg)
			}
			if tc.deadline > 0 && time.Since(start) > tc.deadline+2*time.Second {
				t.Errorf("the RPC took %v, past its deadline %v", time.Since(start), tc.deadline)
			}
			calls := rec.ofCase("f")
			if tc.handled != (len(calls) == 1) {
				t.Fatalf("%d handler calls, want handled=%v", len(calls), tc.handled)
			}
			if tc.check != nil {
				tc.check(t, calls[0].md)
			}
		})
	}
}

// TestExtProc_BodyFailures: a processor's message the service cannot
// decode fails the RPC with INTERNAL, as gRPC fails a message it cannot
// decode; a 100 MiB message from the processor is over the side channel's
// receive limit, which fails the RPC with RESOURCE_EXHAUSTED, never
// through a failure mode.
func TestExtProc_BodyFailures(t *testing.T) {
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		body []byte
		want codes.Code
	}{
		{"undecodable", []byte{0xff, 0xff, 0xff}, codes.Internal},
		{"100 MiB", bytes.Repeat([]byte{'x'}, 100<<20), codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := extprocserver.Start(t, extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
				if req.GetRequestBody() != nil {
					return []*pb.ProcessingResponse{{Response: &pb.ProcessingResponse_RequestBody{RequestBody: &pb.BodyResponse{Response: &pb.CommonResponse{BodyMutation: streamed(tc.body, true)}}}}}
				}
				return []*pb.ProcessingResponse{extprocserver.ContinueResponse(req)}
			}), grpc.MaxSendMsgSize(200<<20))
			env := authzEnv(t, false, p.Addr())
			mode := headersOnly()
			mode.RequestBodyMode = extprocpb.ProcessingMode_GRPC
			c, rec := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", extProc(p.Addr(), mode)))
			_, err := c.UnaryCall(withCase(ctx, "b"), &testpb.SimpleRequest{})
			if status.Code(err) != tc.want {
				t.Fatalf("UnaryCall = %v, want %v", err, tc.want)
			}
			if n := len(rec.ofCase("b")); n != 0 {
				t.Errorf("%d handler calls, want 0", n)
			}
		})
	}
}

// TestExtProc_Observability: in observability mode the RPC never waits
// for the processor (one that never answers changes nothing), every event
// still goes to it with observability_mode set, and the stream is closed
// after deferred_close_timeout.
func TestExtProc_Observability(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.Hang())
	env := authzEnv(t, false, p.Addr())
	cfg := extProc(p.Addr(), allEvents())
	cfg.ObservabilityMode = true
	cfg.DeferredCloseTimeout = durationpb.New(200 * time.Millisecond)
	c, _ := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", cfg))
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.UnaryCall(rctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("seen")}})
	if err != nil || string(resp.GetPayload().GetBody()) != "seen" {
		t.Fatalf("UnaryCall = %v, %v; want the handler's echo, unchanged", resp, err)
	}
	recs, err := p.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := events(recs[0]), "request_headers,request_body,response_headers,response_body,response_trailers"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	for _, q := range recs[0].Requests {
		if !q.GetObservabilityMode() {
			t.Errorf("request without observability_mode: %v", q)
		}
	}
}

// TestExtProc_FilterOrder: request events go through the filters in
// http_filters order, so RBAC after ext_proc judges the headers the
// processor left, and an RPC RBAC before ext_proc refuses never reaches
// the processor.
func TestExtProc_FilterOrder(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.Raw(redactor))
	env := authzEnv(t, false, p.Addr())
	proc := httpFilter(t, "proc", extProc(p.Addr(), headersOnly()))
	denyProcessed := httpFilter(t, "rbac", denyHeader("x-proc-req"))
	denyAll := httpFilter(t, "rbac", denyHeader(caseHeader))

	t.Run("ext_proc then rbac", func(t *testing.T) {
		c, rec := startExtProc(ctx, t, env, allRoutes("routes"), proc, denyProcessed)
		if err := rpcResult(withCase(ctx, "o1"), c, "EmptyCall"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("EmptyCall = %v, want PERMISSION_DENIED: RBAC sees the processor's header", err)
		}
		if len(rec.ofCase("o1")) != 0 {
			t.Error("a refused RPC reached the handler")
		}
		// The refusal went through ext_proc's response events, as
		// Envoy's local reply through the encoder filters before RBAC:
		// one response_headers with end_of_stream, the status in it.
		recs, err := p.WaitEnded(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := events(recs[0]), "request_headers,response_headers"; got != want {
			t.Fatalf("events %s, want %s", got, want)
		}
		rh := recs[0].Requests[1].GetResponseHeaders()
		if !rh.GetEndOfStream() || len(extprocserver.HeaderValues(rh.GetHeaders(), "grpc-status")) != 1 || extprocserver.HeaderValues(rh.GetHeaders(), "grpc-status")[0] != "7" {
			t.Errorf("response_headers %v, want end_of_stream and grpc-status 7 (Trailers-Only)", rh)
		}
	})
	t.Run("rbac then ext_proc", func(t *testing.T) {
		before := len(p.Streams())
		c, _ := startExtProc(ctx, t, env, allRoutes("routes"), denyAll, proc)
		if err := rpcResult(withCase(ctx, "o2"), c, "EmptyCall"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("EmptyCall = %v, want PERMISSION_DENIED", err)
		}
		if n := len(p.Streams()); n != before {
			t.Errorf("%d new processor streams for an RPC RBAC refused first, want 0", n-before)
		}
	})
}

// denyHeader is an RBAC filter that denies RPCs carrying header key.
func denyHeader(key string) *rbacpb.RBAC {
	p := &rbacconfigpb.Principal{Identifier: &rbacconfigpb.Principal_Header{Header: &routepb.HeaderMatcher{Name: key, HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}}}
	return rbacRules(rbacconfigpb.RBAC_DENY, map[string]*rbacconfigpb.Policy{"deny": {Permissions: []*rbacconfigpb.Permission{anyPermission()}, Principals: []*rbacconfigpb.Principal{p}}})
}

// TestExtProc_PerRoute: a route's ExtProcPerRoute override changes the
// processing mode there, and FilterConfig.disabled turns the filter off on
// a route.
func TestExtProc_PerRoute(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.Raw(redactor))
	env := authzEnv(t, false, p.Addr())
	rc := allRoutes("routes")
	route := rc.GetVirtualHosts()[0].GetRoutes()[0]
	unaryOnly := proto.Clone(route).(*routepb.Route)
	unaryOnly.Match = &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: "/grpc.testing.TestService/UnaryCall"}}
	unaryOnly.TypedPerFilterConfig = map[string]*anypb.Any{"proc": anyOf(t, &extprocpb.ExtProcPerRoute{Override: &extprocpb.ExtProcPerRoute_Overrides{Overrides: &extprocpb.ExtProcOverrides{ProcessingMode: &extprocpb.ProcessingMode{ResponseBodyMode: extprocpb.ProcessingMode_GRPC}}}})}
	off := proto.Clone(route).(*routepb.Route)
	off.Match = &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: "/grpc.testing.TestService/EmptyCall"}}
	off.TypedPerFilterConfig = map[string]*anypb.Any{"proc": anyOf(t, &routepb.FilterConfig{Disabled: true})}
	rc.GetVirtualHosts()[0].Routes = []*routepb.Route{unaryOnly, off, route}
	c, _ := startExtProc(ctx, t, env, rc, httpFilter(t, "proc", extProc(p.Addr(), headersOnly())))

	resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("x")}})
	if err != nil || string(resp.GetPayload().GetBody()) != "redacted" {
		t.Fatalf("UnaryCall = %v, %v; want the response redacted (the route's mode sends response bodies)", resp, err)
	}
	if err := rpcResult(ctx, c, "EmptyCall"); err != nil {
		t.Fatal(err)
	}
	recs, err := p.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := events(recs[0]), "request_headers,response_headers,response_body"; got != want {
		t.Errorf("UnaryCall's events %s, want %s (the override's mode, its header modes DEFAULT)", got, want)
	}
	if n := len(p.Streams()); n != 1 {
		t.Errorf("%d processor streams, want 1 (the filter is disabled on EmptyCall's route)", n)
	}
}

// TestExtProc_ResponseOrder: response events go through the filters in
// reverse http_filters order, as Envoy's encoder filters: with [ext_authz,
// ext_proc] the processor does not see the response header ext_authz adds
// (ext_authz adds it after), with [ext_proc, ext_authz] it does; the
// client gets it either way.
func TestExtProc_ResponseOrder(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	a.set(func(context.Context, *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		r := okResponse()
		r.GetOkResponse().ResponseHeadersToAdd = []*corepb.HeaderValueOption{hvo("x-authz", "checked")}
		return r, nil
	})
	p := extprocserver.Start(t, extprocserver.PassThrough())
	env := authzEnv(t, false, a.addr, p.Addr())
	authz := httpFilter(t, "authz", extAuthz(a.addr))
	proc := httpFilter(t, "proc", extProc(p.Addr(), headersOnly()))
	for i, tc := range []struct {
		name     string
		filters  []*hcmpb.HttpFilter
		procSees bool
	}{
		{"ext_authz then ext_proc", []*hcmpb.HttpFilter{authz, proc}, false},
		{"ext_proc then ext_authz", []*hcmpb.HttpFilter{proc, authz}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := startExtProc(ctx, t, env, allRoutes("routes"), tc.filters...)
			var hdr metadata.MD
			if err := rpcResult(ctx, c, "EmptyCall", grpc.Header(&hdr)); err != nil {
				t.Fatal(err)
			}
			if got := hdr.Get("x-authz"); len(got) != 1 {
				t.Errorf("client got x-authz %q, want [checked]", got)
			}
			recs, err := p.WaitEnded(ctx, i+1)
			if err != nil {
				t.Fatal(err)
			}
			var sees bool
			for _, q := range recs[i].Requests {
				if h := q.GetResponseHeaders(); h != nil {
					sees = len(extprocserver.HeaderValues(h.GetHeaders(), "x-authz")) > 0
				}
			}
			if sees != tc.procSees {
				t.Errorf("the processor saw ext_authz's response header: %v, want %v", sees, tc.procSees)
			}
		})
	}
}

// TestExtProc_Metrics: gRFC A93's four server-side histograms record the
// time the filter held each event it sent: the client's headers and
// half-close, the server's headers and trailers.
func TestExtProc_Metrics(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.PassThrough())
	env := authzEnv(t, false, p.Addr())
	mr := testutils.NewMetricReader(t)
	c, _ := startExtProcWith(ctx, t, env, allRoutes("routes"), []grpc.ServerOption{xds.MeterProvider(mr.Provider)}, httpFilter(t, "proc", extProc(p.Addr(), allEvents())))
	st, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One message, so that the response is not Trailers-Only (whose
	// headers carry the end, with no trailers event).
	if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("m")}}); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("stream ended with %v, want OK", err)
	}
	for _, name := range []string{"client_headers", "client_half_close", "server_headers", "server_trailers"} {
		if n := mr.HistogramCount(t, "grpc.server_ext_proc."+name+"_duration"); n != 1 {
			t.Errorf("grpc.server_ext_proc.%s_duration recorded %d values, want 1", name, n)
		}
	}
}

// TestExtProc_StatusPage: the status page shows the filter with its
// processor, where its credentials come from, its mode and failure mode.
func TestExtProc_StatusPage(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.PassThrough())
	env := authzEnv(t, false, p.Addr())
	s, _ := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, "proc", extProc(p.Addr(), headersOnly()))}, allRoutes("routes"), "")
	}, nil)
	hs := httptest.NewServer(admin.NewStatusHandler(s.GRPCServer))
	t.Cleanup(hs.Close)
	text := waitForText(ctx, t, hs.URL, fmt.Sprintf("processor %q", p.Addr()))
	for _, want := range []string{"allowed_grpc_services", "request headers", "failure fails the RPC with UNAVAILABLE"} {
		if !strings.Contains(text, want) {
			t.Errorf("status page lacks %q:\n%s", want, text)
		}
	}
}

// TestExtProc_ClientCannotPickFailure: a client message too large to send
// to the processor (the server takes up to 4 MiB; with the request's
// framing it is over the side call's 4 MiB) fails the RPC with
// RESOURCE_EXHAUSTED, failure_mode_allow or not: the client, not the
// processor, made the side call impossible, and must not choose its
// outcome. The handler never sees the message.
func TestExtProc_ClientCannotPickFailure(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.PassThrough())
	env := authzEnv(t, false, p.Addr())
	cfg := extProc(p.Addr(), &extprocpb.ProcessingMode{RequestBodyMode: extprocpb.ProcessingMode_GRPC})
	cfg.FailureModeAllow = true
	c, rec := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", cfg))
	// A SimpleRequest of exactly 4 MiB - 4 bytes (the payload's 10 bytes
	// of tags and lengths included): under the server's limit, over the
	// side call's once framed as a ProcessingRequest.
	big := bytes.Repeat([]byte{'x'}, 4<<20-14)
	_, err := c.UnaryCall(withCase(ctx, "big"), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: big}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("UnaryCall = %v, want RESOURCE_EXHAUSTED", err)
	}
	if n := len(rec.ofCase("big")); n != 0 {
		t.Errorf("%d handler calls, want 0", n)
	}
}

// TestExtProc_HostileStreaming: on a bidirectional stream, a processor
// that answers a client message with a response-direction answer, or
// resets the stream mid-RPC, fails the RPC with UNAVAILABLE; the handler
// sees no message after the failure, and the server goes on serving.
func TestExtProc_HostileStreaming(t *testing.T) {
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		h    extprocserver.Handler
	}{
		{"wrong direction", extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
			if b := req.GetRequestBody(); b != nil && payloadOf(b.GetBody()) == "2" {
				return []*pb.ProcessingResponse{{Response: &pb.ProcessingResponse_ResponseBody{ResponseBody: &pb.BodyResponse{}}}}
			}
			return redactor(req)
		})},
		{"reset", func(s *extprocserver.Stream, req *pb.ProcessingRequest) ([]*pb.ProcessingResponse, error) {
			if b := req.GetRequestBody(); b != nil && payloadOf(b.GetBody()) == "2" {
				return nil, status.Error(codes.Aborted, "processor resets")
			}
			return redactor(req), nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := extprocserver.Start(t, tc.h)
			env := authzEnv(t, false, p.Addr())
			c, _ := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", extProc(p.Addr(), allEvents())))
			got, err := duplexAll(ctx, t, c, "1", "2", "3")
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("stream ended with %v, want UNAVAILABLE", err)
			}
			if len(got) > 1 {
				t.Errorf("client received %q, want at most the first message's answer", got)
			}
			// The server goes on: a stream the processor answers well
			// succeeds, on the same connection.
			if got, err := duplexAll(ctx, t, c, "1"); err != nil || len(got) != 1 || got[0] != "redacted" {
				t.Errorf("next stream: %q, %v; want [redacted], OK", got, err)
			}
		})
	}
}

// duplexAll sends msgs, half-closes, and returns the payloads received
// and how the stream ended.
func duplexAll(ctx context.Context, t *testing.T, c *testClient, msgs ...string) ([]string, error) {
	t.Helper()
	st, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(m)}}); err != nil {
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

// TestExtProc_ModeOverride: with allow_mode_override, the processor's
// mode_override changes which later events of the RPC it is sent; one
// allowed_override_modes does not list is ignored, and so is any without
// allow_mode_override.
func TestExtProc_ModeOverride(t *testing.T) {
	ctx := testContext(t)
	// The processor turns off everything after the request headers.
	off := &extprocpb.ProcessingMode{RequestHeaderMode: extprocpb.ProcessingMode_SEND, ResponseHeaderMode: extprocpb.ProcessingMode_SKIP}
	p := extprocserver.Start(t, extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
		out := redactor(req)
		if req.GetRequestHeaders() != nil {
			out[0].ModeOverride = off
		}
		return out
	}))
	env := authzEnv(t, false, p.Addr())
	for i, tc := range []struct {
		name   string
		cfg    func(*extprocpb.ExternalProcessor)
		events string
	}{
		{"honoured", func(c *extprocpb.ExternalProcessor) { c.AllowModeOverride = true }, "request_headers"},
		{"listed", func(c *extprocpb.ExternalProcessor) {
			c.AllowModeOverride = true
			c.AllowedOverrideModes = []*extprocpb.ProcessingMode{{ResponseHeaderMode: extprocpb.ProcessingMode_SKIP}}
		}, "request_headers"},
		{"not listed", func(c *extprocpb.ExternalProcessor) {
			c.AllowModeOverride = true
			c.AllowedOverrideModes = []*extprocpb.ProcessingMode{{ResponseHeaderMode: extprocpb.ProcessingMode_SEND, ResponseTrailerMode: extprocpb.ProcessingMode_SKIP}}
		}, "request_headers,response_headers"},
		{"not allowed", func(*extprocpb.ExternalProcessor) {}, "request_headers,response_headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := extProc(p.Addr(), headersOnly())
			tc.cfg(cfg)
			c, _ := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", cfg))
			if err := rpcResult(ctx, c, "EmptyCall"); err != nil {
				t.Fatal(err)
			}
			recs, err := p.WaitEnded(ctx, i+1)
			if err != nil {
				t.Fatal(err)
			}
			if got := events(recs[i]); got != tc.events {
				t.Errorf("events %s, want %s", got, tc.events)
			}
		})
	}
}

// TestExtProc_RequestDrain: an answer with request_drain makes the filter
// half-close the stream and send nothing more; the RPC goes on, its later
// events unprocessed, and the processor ends the stream OK.
func TestExtProc_RequestDrain(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
		out := redactor(req)
		if req.GetRequestHeaders() != nil {
			out[0].RequestDrain = true
		}
		return out
	}))
	env := authzEnv(t, false, p.Addr())
	c, rec := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", extProc(p.Addr(), allEvents())))
	resp, err := c.UnaryCall(withCase(ctx, "drain"), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("kept")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.GetPayload().GetBody()); got != "kept" {
		t.Errorf("payload %q, want the handler's echo, unprocessed", got)
	}
	if calls := rec.ofCase("drain"); len(calls) != 1 || len(calls[0].md.Get("x-proc-req")) != 1 {
		t.Errorf("handler calls %+v, want one with the drained answer's header applied", calls)
	}
	recs, err := p.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := events(recs[0]); got != "request_headers" {
		t.Errorf("events %s, want request_headers only", got)
	}
	if !recs[0].HalfClosed || recs[0].Status.Code() != codes.OK {
		t.Errorf("stream half-closed %v, ended %v; want half-closed and OK", recs[0].HalfClosed, recs[0].Status)
	}
}

// TestExtProc_Attributes: request_attributes go with the client's events,
// under envoy.filters.http.ext_proc, read from the request as it arrived;
// response_attributes with the server's, the status in the trailers'.
func TestExtProc_Attributes(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.PassThrough())
	env := authzEnv(t, false, p.Addr())
	mode := headersOnly()
	mode.ResponseTrailerMode = extprocpb.ProcessingMode_SEND
	cfg := extProc(p.Addr(), mode)
	cfg.RequestAttributes = []string{"request.path", "request.headers", "request.useragent", "not.an.attribute"}
	cfg.ResponseAttributes = []string{"response.grpc_status"}
	c, _ := startExtProc(ctx, t, env, allRoutes("routes"), httpFilter(t, "proc", cfg))
	if _, err := c.UnaryCall(withCase(ctx, "attrs"), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	recs, err := p.WaitEnded(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	req := recs[0].Requests[0].GetAttributes()["envoy.filters.http.ext_proc"].GetFields()
	if got := req["request.path"].GetStringValue(); got != "/grpc.testing.TestService/UnaryCall" {
		t.Errorf("request.path %q", got)
	}
	if got := req["request.headers"].GetStructValue().GetFields()[caseHeader].GetStringValue(); got != "attrs" {
		t.Errorf("request.headers[%s] = %q, want attrs (all attributes: %v)", caseHeader, got, req)
	}
	if got := req["request.useragent"].GetStringValue(); !strings.HasPrefix(got, "grpc-go/") {
		t.Errorf("request.useragent %q, want grpc-go's", got)
	}
	if _, ok := req["not.an.attribute"]; ok || len(req) != 3 {
		t.Errorf("request attributes %v, want the three known ones only", req)
	}
	last := recs[0].Requests[len(recs[0].Requests)-1]
	if last.GetResponseTrailers() == nil {
		t.Fatalf("last event %v, want response_trailers", last)
	}
	if v, ok := last.GetAttributes()["envoy.filters.http.ext_proc"].GetFields()["response.grpc_status"]; !ok || v.GetNumberValue() != 0 {
		t.Errorf("response attributes %v, want response.grpc_status 0", last.GetAttributes())
	}
}

// TestExtProc_IgnoredMutationsCounted: the entries of a processor's
// mutation the filter ignores are counted by reason: one of a header gRPC
// writes itself, one mutation_rules refuse; the RPC goes on with the rest.
func TestExtProc_IgnoredMutationsCounted(t *testing.T) {
	ctx := testContext(t)
	p := extprocserver.Start(t, extprocserver.Raw(func(req *pb.ProcessingRequest) []*pb.ProcessingResponse {
		if req.GetRequestHeaders() == nil {
			return []*pb.ProcessingResponse{extprocserver.ContinueResponse(req)}
		}
		m := &pb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{
			{Header: &corepb.HeaderValue{Key: "grpc-status", RawValue: []byte("0")}},
			{Header: &corepb.HeaderValue{Key: "x-denied", RawValue: []byte("1")}},
			{Header: &corepb.HeaderValue{Key: "x-ok", RawValue: []byte("1")}},
		}}
		return []*pb.ProcessingResponse{{Response: &pb.ProcessingResponse_RequestHeaders{RequestHeaders: &pb.HeadersResponse{Response: &pb.CommonResponse{HeaderMutation: m}}}}}
	}))
	env := authzEnv(t, false, p.Addr())
	mr := testutils.NewMetricReader(t)
	cfg := extProc(p.Addr(), headersOnly())
	cfg.MutationRules = &mutationpb.HeaderMutationRules{DisallowExpression: &matcherpb.RegexMatcher{Regex: "x-denied"}}
	c, rec := startExtProcWith(ctx, t, env, allRoutes("routes"), []grpc.ServerOption{xds.MeterProvider(mr.Provider)}, httpFilter(t, "proc", cfg))
	if err := rpcResult(withCase(ctx, "ign"), c, "EmptyCall"); err != nil {
		t.Fatal(err)
	}
	calls := rec.ofCase("ign")
	if len(calls) != 1 || len(calls[0].md.Get("x-ok")) != 1 || len(calls[0].md.Get("x-denied")) != 0 {
		t.Fatalf("handler calls %+v, want one with x-ok and without x-denied", calls)
	}
	for reason, want := range map[string]int64{"reserved": 1, "disallowed": 1} {
		got, _ := mr.Value(t, "grpc.xds_server.ext_proc.ignored_mutations", attribute.String("grpc.xds_server.ext_proc.filter", "proc"), attribute.String("grpc.xds_server.ext_proc.reason", reason))
		if got != want {
			t.Errorf("ignored_mutations{reason=%s} = %d, want %d", reason, got, want)
		}
	}
}
