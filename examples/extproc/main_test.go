package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	protov2 "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// secret is what the greeter puts in the username, and the processor
// removes.
const secret = "alice@example.com"

// TestRun runs the example: the greeter replies with the secret, the
// processor redacts it, and the client gets the reply with the username
// "[redacted]". The secret is in none of the bytes of the messages the
// client receives, nor in its headers or trailers.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	seen := &clientRecorder{}
	var out strings.Builder
	if err := run(ctx, &out, seen.dialOptions()...); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	story := out.String()
	t.Logf("output:\n%s", story)

	// The story, in order.
	rest := story
	for _, want := range []string{
		"processor:     serving envoy.service.ext_proc.v3.ExternalProcessor at dns:///127.0.0.1:",
		`"allowed_grpc_services": {` + "\n" + `        "dns:///127.0.0.1:`,
		`"request_header_mode": "SKIP"`,
		`"response_body_mode": "GRPC"`,
		"greeter:       SERVING\n",
		`greeter:       replies payload "Hello, alice", username "alice@example.com"` + "\n",
		`processor:     replaced the username of a /grpc.testing.TestService/UnaryCall response with "[redacted]"` + "\n",
		`client:        got payload "Hello, alice", username "[redacted]"` + "\n",
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("the output lacks %q after what came before it; output:\n%s", want, story)
		}
		rest = rest[i+len(want):]
	}
	for _, line := range strings.Split(story, "\n") {
		if strings.HasPrefix(line, "client:") && strings.Contains(line, secret) {
			t.Errorf("the client printed the secret: %q", line)
		}
	}

	// What reached the client, as received.
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.messages) != 1 {
		t.Fatalf("the client received %d messages, want 1", len(seen.messages))
	}
	for _, m := range seen.messages {
		if bytes.Contains(m, []byte(secret)) {
			t.Errorf("a message the client received contains %q: %q", secret, m)
		}
	}
	var reply testgrpc.SimpleResponse
	if err := protov2.Unmarshal(seen.messages[0], &reply); err != nil {
		t.Fatal(err)
	}
	if reply.GetUsername() != redacted || string(reply.GetPayload().GetBody()) != "Hello, alice" {
		t.Errorf("the client received %v, want the greeting with username %q", &reply, redacted)
	}
	for _, md := range append(seen.headers, seen.trailers...) {
		for k, vs := range md {
			for _, v := range vs {
				if strings.Contains(k, secret) || strings.Contains(v, secret) {
					t.Errorf("the client received the metadata %s: %q", k, v)
				}
			}
		}
	}
}

// clientRecorder records what reaches the client: each message's bytes as
// they came off the wire, and the headers and trailers of each call.
type clientRecorder struct {
	mu       sync.Mutex
	messages [][]byte
	headers  []metadata.MD
	trailers []metadata.MD
}

func (r *clientRecorder) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(recordingCodec{r, encoding.GetCodecV2(proto.Name)})),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			var header, trailer metadata.MD
			err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header), grpc.Trailer(&trailer))...)
			r.mu.Lock()
			r.headers = append(r.headers, header)
			r.trailers = append(r.trailers, trailer)
			r.mu.Unlock()
			return err
		}),
	}
}

// recordingCodec is the proto codec, recording each message it decodes.
type recordingCodec struct {
	r *clientRecorder
	encoding.CodecV2
}

func (c recordingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.r.mu.Lock()
	c.r.messages = append(c.r.messages, data.Materialize())
	c.r.mu.Unlock()
	return c.CodecV2.Unmarshal(data, v)
}

// TestProcessorAnswers: the processor's answer to each event, without a
// network.
func TestProcessorAnswers(t *testing.T) {
	p := &processor{}
	unary := withPath(redactedMethod)
	body := func(path *structpb.Struct, b []byte) *extprocpb.ProcessingRequest {
		return &extprocpb.ProcessingRequest{
			Request:    &extprocpb.ProcessingRequest_ResponseBody{ResponseBody: &extprocpb.HttpBody{Body: b}},
			Attributes: map[string]*structpb.Struct{"envoy.filters.http.ext_proc": path},
		}
	}
	answerBody := func(t *testing.T, req *extprocpb.ProcessingRequest) []byte {
		t.Helper()
		resp, err := p.answer(req)
		if err != nil {
			t.Fatalf("answer: %v", err)
		}
		sr := resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			t.Fatalf("answer %v, want a response_body with a streamed_response", resp)
		}
		return sr.GetBody()
	}

	t.Run("redacts the username, keeps the rest", func(t *testing.T) {
		in := &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte("Hello, alice")}, Username: secret, ServerId: "greeter-1"}
		in.ProtoReflect().SetUnknown([]byte{0xfa, 0x01, 0x01, 'x'}) // field 31, "x": kept
		b, _ := protov2.Marshal(in)
		got := &testgrpc.SimpleResponse{}
		if err := protov2.Unmarshal(answerBody(t, body(unary, b)), got); err != nil {
			t.Fatal(err)
		}
		want := protov2.Clone(in).(*testgrpc.SimpleResponse)
		want.Username = redacted
		if !protov2.Equal(got, want) {
			t.Errorf("the processor sends %v, want %v", got, want)
		}
	})
	t.Run("no username", func(t *testing.T) {
		b, _ := protov2.Marshal(&testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte("hi")}})
		if got := answerBody(t, body(unary, b)); !bytes.Equal(got, b) {
			t.Errorf("the processor sends %q, want the message unchanged %q", got, b)
		}
	})
	t.Run("another method's message is unchanged", func(t *testing.T) {
		b := []byte("\x12\x11" + secret) // would decode as a SimpleResponse with that username
		if got := answerBody(t, body(withPath("/grpc.testing.TestService/StreamingOutputCall"), b)); !bytes.Equal(got, b) {
			t.Errorf("the processor sends %q, want %q", got, b)
		}
	})
	t.Run("fails closed", func(t *testing.T) {
		for name, req := range map[string]*extprocpb.ProcessingRequest{
			"not a SimpleResponse": body(unary, []byte{0xff}),
			"no request.path":      body(nil, []byte("\x12\x11"+secret)),
			"an unexpected event": {Request: &extprocpb.ProcessingRequest_ResponseTrailers{
				ResponseTrailers: &extprocpb.HttpTrailers{Trailers: &corepb.HeaderMap{}},
			}},
		} {
			if resp, err := p.answer(req); err == nil {
				t.Errorf("%s: answer %v, want an error (the filter then fails the RPC)", name, resp)
			} else {
				t.Logf("%s: %v", name, status.Convert(err).Message())
			}
		}
	})
	t.Run("headers continue", func(t *testing.T) {
		for _, req := range []*extprocpb.ProcessingRequest{
			{Request: &extprocpb.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocpb.HttpHeaders{}}},
			{Request: &extprocpb.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocpb.HttpHeaders{}}},
		} {
			resp, err := p.answer(req)
			if err != nil {
				t.Fatalf("answer(%v): %v", req, err)
			}
			var hr *extprocpb.HeadersResponse
			if req.GetRequestHeaders() != nil {
				hr = resp.GetRequestHeaders()
			} else {
				hr = resp.GetResponseHeaders()
			}
			if hr == nil || hr.GetResponse().GetStatus() != extprocpb.CommonResponse_CONTINUE || hr.GetResponse().GetHeaderMutation() != nil {
				t.Errorf("answer(%v) = %v, want the same kind of headers answer, CONTINUE", req, resp)
			}
		}
	})
}

// withPath is the attributes Struct of an event of the RPC of method path.
func withPath(path string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{"request.path": structpb.NewStringValue(path)}}
}
