package istio

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"istio.io/istio/pkg/config/protocol"
	"istio.io/istio/pkg/test/echo/common"
	"istio.io/istio/pkg/test/echo/server/endpoint"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// The ext_proc interop: this library's ext_proc HTTP filter (gRFC A93)
// with a third-party processor, the "endpoint picker" of Istio's test
// echo server (istio.io/istio/pkg/test/echo/server/endpoint,
// endpointpicker.go), run in process on loopback. It was written for
// Envoy, for the Gateway API Inference Extension: it answers the request
// headers with CONTINUE and remove_headers [x-endpoint] (and dynamic
// metadata, which gRPC ignores), each body with a streamed_response that
// echoes the body and its end_of_stream (but never
// end_of_stream_without_message), the response headers with an empty
// CommonResponse and the trailers with an empty HeaderMutation, and ends
// the stream OK when the client half-closes it.
//
// The server under test gets its Listener from a go-control-plane
// management server (the library's own test control plane,
// internal/testutils/e2e), not from istiod: istiod generates no ext_proc
// filter for proxyless servers (grpcgen's Listeners have RBAC and the
// router only).
//
// Logs: the filter ends each RPC's ext_proc stream by half-closing it, as
// Envoy does, and the picker ends it OK; the picker logs "Endpoint Picker
// gRPC server stopped" when it is closed, which is expected.

// endpointHeader is the header the endpoint picker reads and removes.
const endpointHeader = "x-endpoint"

// startEndpointPicker starts Istio's endpoint picker on 127.0.0.1 and
// returns its address; it is closed (GracefulStop) when the test ends,
// after the servers started later, which call it.
func startEndpointPicker(t *testing.T) string {
	t.Helper()
	ep, err := endpoint.New(endpoint.Config{
		Port:           &common.Port{Name: "epp", Protocol: protocol.GRPC, Port: 0, EndpointPicker: true},
		ListenerIP:     "127.0.0.1",
		EndpointPicker: true,
	})
	if err != nil {
		t.Fatalf("istio's endpoint picker: %v", err)
	}
	ready := make(chan struct{})
	if err := ep.Start(func() { close(ready) }); err != nil {
		t.Fatalf("starting istio's endpoint picker: %v", err)
	}
	t.Cleanup(func() {
		if err := ep.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("closing istio's endpoint picker: %v", err)
		}
	})
	select {
	case <-ready:
	case <-testContext(t).Done():
		t.Fatal("istio's endpoint picker did not report ready")
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ep.GetConfig().Port.Port))
}

// extProcFilter is the ext_proc HTTP filter calling target with mode.
func extProcFilter(t *testing.T, target string, mode *extprocpb.ProcessingMode) *hcmpb.HttpFilter {
	t.Helper()
	cfg, err := anypb.New(&extprocpb.ExternalProcessor{
		GrpcService: &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{
			TargetUri: target, StatPrefix: "epp",
		}}},
		ProcessingMode: mode,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &hcmpb.HttpFilter{Name: "envoy.filters.http.ext_proc", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: cfg}}
}

// startExtProcServer starts an xds.GRPCServer on 127.0.0.1 serving svc,
// whose bootstrap allows the side channel to target with insecure
// credentials (gRFC A102's allowed_grpc_services; the management server is
// not trusted), and whose Listener, from a management server of its own,
// runs filter, then the router, over routes that match every RPC. It
// waits until the server serves and returns its address.
func startExtProcServer(t *testing.T, target string, filter *hcmpb.HttpFilter, svc testgrpc.TestServiceServer) string {
	t.Helper()
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	bootstrap := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{ms.Address},
		NodeID:                             "extproc-interop",
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		AllowedGRPCServices:                map[string]json.RawMessage{target: json.RawMessage(`{"channel_creds": [{"type": "insecure"}]}`)},
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := lis.Addr().(*net.TCPAddr)
	if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{
		e2e.ServerListenerWithFilters(a.IP.String(), uint32(a.Port), nil, filter),
	}}); err != nil {
		t.Fatalf("management server update: %v", err)
	}

	creds, err := xds.NewServerCredentials(xds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatalf("xds.NewServerCredentials: %v", err)
	}
	modes := &modeRecorder{changed: make(chan struct{}, 1)}
	s, err := xds.NewGRPCServer(grpc.Creds(creds), xds.BootstrapContents(bootstrap), xds.ServingModeCallback(modes.record))
	if err != nil {
		lis.Close()
		t.Fatalf("xds.NewGRPCServer: %v", err)
	}
	testgrpc.RegisterTestServiceServer(s, svc)
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v after Stop, want nil", err)
		}
	})
	es := &echoServer{srv: s, addr: lis.Addr().String(), modes: modes}
	es.awaitMode(t, connectivity.ServingModeServing)
	return es.addr
}

// headerRecorder is the service under test: it records the request
// headers and messages its handlers see, by the RPC's x-case header, and
// answers with response headers and trailers of its own. UnaryCall
// answers with the request's payload; FullDuplexCall echoes each
// message's payload until the client half-closes.
type headerRecorder struct {
	testgrpc.UnimplementedTestServiceServer

	mu       sync.Mutex
	headers  map[string]metadata.MD // by x-case; guarded by mu
	payloads map[string][]string    // by x-case; guarded by mu
}

// caseHeader names the RPC to the handler.
const caseHeader = "x-case"

// Response metadata the handlers set, which the client must get.
var (
	handlerHeader  = metadata.Pairs("x-handler-header", "h")
	handlerTrailer = metadata.Pairs("x-handler-trailer", "t")
)

func (r *headerRecorder) record(ctx context.Context, payload *string) {
	md, _ := metadata.FromIncomingContext(ctx)
	c := ""
	if v := md.Get(caseHeader); len(v) == 1 {
		c = v[0]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.headers == nil {
		r.headers, r.payloads = map[string]metadata.MD{}, map[string][]string{}
	}
	if _, ok := r.headers[c]; !ok {
		r.headers[c] = md.Copy()
	}
	if payload != nil {
		r.payloads[c] = append(r.payloads[c], *payload)
	}
}

// seen returns the request headers and the messages' payloads the
// handler saw in case c.
func (r *headerRecorder) seen(c string) (metadata.MD, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.headers[c], slices.Clone(r.payloads[c])
}

func (r *headerRecorder) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	p := string(req.GetPayload().GetBody())
	r.record(ctx, &p)
	if err := grpc.SetHeader(ctx, handlerHeader); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, handlerTrailer); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (r *headerRecorder) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	r.record(stream.Context(), nil)
	if err := stream.SetHeader(handlerHeader); err != nil {
		return err
	}
	stream.SetTrailer(handlerTrailer)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := string(req.GetPayload().GetBody())
		r.record(stream.Context(), &p)
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// userHeaders are the request headers each RPC sends besides x-case and
// x-endpoint: the handler must see them as they were sent.
func userHeaders() metadata.MD {
	return metadata.MD{
		"x-keep":     {"kept"},
		"x-multi":    {"one", "two"},
		"x-data-bin": {"\x00\x01\xfe"},
	}
}

// checkHandlerHeaders checks the request headers the handler saw: the
// user's headers unchanged, x-case, and no x-endpoint.
func checkHandlerHeaders(t *testing.T, c string, md metadata.MD) {
	t.Helper()
	if md == nil {
		t.Fatalf("%s: the handler did not run", c)
	}
	if v := md.Get(endpointHeader); len(v) != 0 {
		t.Errorf("%s: handler saw %s %q, want it removed by the endpoint picker", c, endpointHeader, v)
	}
	for k, want := range userHeaders() {
		if got := md.Get(k); !slices.Equal(got, want) {
			t.Errorf("%s: handler saw %s = %q, want %q as the client sent it", c, k, got, want)
		}
	}
	if got := md.Get(caseHeader); !slices.Equal(got, []string{c}) {
		t.Errorf("%s: handler saw %s = %q, want [%q]", c, caseHeader, got, c)
	}
	if len(md.Get("user-agent")) == 0 {
		t.Errorf("%s: handler saw no user-agent (headers %v)", c, md)
	}
}

// outgoing is ctx with the user's headers, x-case c and, when ep is not
// empty, x-endpoint: ep.
func outgoing(ctx context.Context, c, ep string) context.Context {
	md := userHeaders()
	md.Set(caseHeader, c)
	if ep != "" {
		md.Set(endpointHeader, ep)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// checkResponseMetadata checks that the client got the handler's response
// headers and trailers.
func checkResponseMetadata(t *testing.T, c string, hdr, trl metadata.MD) {
	t.Helper()
	if got := hdr.Get("x-handler-header"); !slices.Equal(got, []string{"h"}) {
		t.Errorf("%s: client got response headers %v, want x-handler-header [h]", c, hdr)
	}
	if got := trl.Get("x-handler-trailer"); !slices.Equal(got, []string{"t"}) {
		t.Errorf("%s: client got trailers %v, want x-handler-trailer [t]", c, trl)
	}
}

// unaryThrough makes a UnaryCall with payload p in case c, and checks that
// it succeeds with p, the handler's response headers and trailers, and
// that the handler saw the request headers without x-endpoint and the
// payload p.
func unaryThrough(ctx context.Context, t *testing.T, tc testgrpc.TestServiceClient, rec *headerRecorder, c, ep, p string) {
	t.Helper()
	var hdr, trl metadata.MD
	resp, err := tc.UnaryCall(outgoing(ctx, c, ep), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(p)}}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil {
		t.Fatalf("%s: UnaryCall: %v, want OK", c, err)
	}
	if got := string(resp.GetPayload().GetBody()); got != p {
		t.Errorf("%s: client got payload %q, want %q", c, got, p)
	}
	checkResponseMetadata(t, c, hdr, trl)
	md, payloads := rec.seen(c)
	checkHandlerHeaders(t, c, md)
	if !slices.Equal(payloads, []string{p}) {
		t.Errorf("%s: handler got messages %q, want [%q]", c, payloads, p)
	}
}

// duplex opens a FullDuplexCall in case c with x-endpoint set, sends each
// of msgs and receives its echo, half-closes, and returns the payloads of
// the messages the client receives after the half-close, the response
// headers and the trailers. It fails the test unless the stream ends OK.
func duplex(ctx context.Context, t *testing.T, tc testgrpc.TestServiceClient, c string, msgs ...string) (afterHalfClose []string, hdr, trl metadata.MD) {
	t.Helper()
	st, err := tc.FullDuplexCall(outgoing(ctx, c, "10.0.0.1:80"))
	if err != nil {
		t.Fatalf("%s: FullDuplexCall: %v", c, err)
	}
	for _, m := range msgs {
		if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(m)}}); err != nil {
			t.Fatalf("%s: Send(%q): %v", c, m, err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("%s: Recv after Send(%q): %v, want its echo", c, m, err)
		}
		if got := string(r.GetPayload().GetBody()); got != m {
			t.Errorf("%s: client got %q after Send(%q), want it unchanged", c, got, m)
		}
	}
	if hdr, err = st.Header(); err != nil {
		t.Fatalf("%s: response headers: %v", c, err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatalf("%s: CloseSend: %v", c, err)
	}
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: end of stream: %v, want OK", c, err)
		}
		afterHalfClose = append(afterHalfClose, string(r.GetPayload().GetBody()))
		if len(afterHalfClose) > 10 {
			t.Fatalf("%s: more than 10 messages after the half-close: %q", c, afterHalfClose)
		}
	}
	return afterHalfClose, hdr, st.Trailer()
}

// TestExtProcIstioEndpointPicker: with Istio's endpoint picker as the
// processor of the ext_proc filter, what grpc-go clients of the server
// observe.
//
// Headers only (request and response headers SEND, bodies NONE): a unary
// RPC and a bidirectional stream sent with x-endpoint reach the handler
// without it (the picker removed it), with every other header as sent
// (multi-valued and binary ones included); they succeed, and the client
// gets the handler's messages, response headers and trailers. An RPC
// without x-endpoint (the picker then picks its default) is served alike.
//
// Bodies (request_body_mode GRPC; then response_body_mode GRPC and
// response_trailer_mode SEND too): each message passes unchanged both
// ways, as the picker echoes it, and so does the half-close of a stream:
// the filter sends it as end_of_stream with end_of_stream_without_message,
// and the picker, written before that field, answers a streamed_response
// with an empty body and end_of_stream only; the filter takes an empty
// body in answer to a half-close as no message (docs/filters.md), so the
// handler sees the client's messages and then the half-close, nothing
// more.
func TestExtProcIstioEndpointPicker(t *testing.T) {
	target := startEndpointPicker(t)

	t.Run("headers", func(t *testing.T) {
		ctx := testContext(t)
		rec := &headerRecorder{}
		addr := startExtProcServer(t, target, extProcFilter(t, target, &extprocpb.ProcessingMode{
			RequestHeaderMode:  extprocpb.ProcessingMode_SEND,
			ResponseHeaderMode: extprocpb.ProcessingMode_SEND,
			RequestBodyMode:    extprocpb.ProcessingMode_NONE,
			ResponseBodyMode:   extprocpb.ProcessingMode_NONE,
		}), rec)
		tc := testgrpc.NewTestServiceClient(dial(t, "passthrough:///"+addr, insecure.NewCredentials()))

		unaryThrough(ctx, t, tc, rec, "unary", "10.0.0.1:80", "hello")
		unaryThrough(ctx, t, tc, rec, "unary-no-endpoint", "", "hello")

		after, hdr, trl := duplex(ctx, t, tc, "stream", "a", "b")
		if len(after) != 0 {
			t.Errorf("stream: client got %q after the half-close, want nothing (bodies are not sent to the picker)", after)
		}
		checkResponseMetadata(t, "stream", hdr, trl)
		md, payloads := rec.seen("stream")
		checkHandlerHeaders(t, "stream", md)
		if !slices.Equal(payloads, []string{"a", "b"}) {
			t.Errorf("stream: handler got messages %q, want [a b]", payloads)
		}
	})

	for _, bc := range []struct {
		name string
		mode *extprocpb.ProcessingMode
	}{
		{name: "request bodies", mode: &extprocpb.ProcessingMode{
			RequestHeaderMode:  extprocpb.ProcessingMode_SEND,
			ResponseHeaderMode: extprocpb.ProcessingMode_SEND,
			RequestBodyMode:    extprocpb.ProcessingMode_GRPC,
		}},
		{name: "bodies both ways and trailers", mode: &extprocpb.ProcessingMode{
			RequestHeaderMode:   extprocpb.ProcessingMode_SEND,
			ResponseHeaderMode:  extprocpb.ProcessingMode_SEND,
			ResponseTrailerMode: extprocpb.ProcessingMode_SEND,
			RequestBodyMode:     extprocpb.ProcessingMode_GRPC,
			ResponseBodyMode:    extprocpb.ProcessingMode_GRPC,
		}},
	} {
		t.Run(bc.name, func(t *testing.T) {
			ctx := testContext(t)
			rec := &headerRecorder{}
			addr := startExtProcServer(t, target, extProcFilter(t, target, bc.mode), rec)
			tc := testgrpc.NewTestServiceClient(dial(t, "passthrough:///"+addr, insecure.NewCredentials()))

			unaryThrough(ctx, t, tc, rec, "unary", "10.0.0.1:80", "hello")

			after, hdr, trl := duplex(ctx, t, tc, "stream", "a", "b")
			checkResponseMetadata(t, "stream", hdr, trl)
			md, payloads := rec.seen("stream")
			checkHandlerHeaders(t, "stream", md)
			// The picker's answer to the half-close (an empty body,
			// no end_of_stream_without_message) adds no message.
			if want := []string{"a", "b"}; !slices.Equal(payloads, want) {
				t.Errorf("stream: handler got messages %q, want %q: the client's two, and nothing for the half-close", payloads, want)
			}
			if len(after) != 0 {
				t.Errorf("stream: client got %q after its half-close, want nothing", after)
			}
		})
	}
}
