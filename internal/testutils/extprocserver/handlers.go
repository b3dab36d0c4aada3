package extprocserver

import (
	"context"
	"errors"
	"fmt"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Event names a kind of ProcessingRequest: the field of its request oneof
// that is set, as spelled in the proto.
type Event string

// The events of a ProcessingRequest. gRPC never sends RequestTrailers.
const (
	RequestHeaders   Event = "request_headers"
	RequestBody      Event = "request_body"
	RequestTrailers  Event = "request_trailers"
	ResponseHeaders  Event = "response_headers"
	ResponseBody     Event = "response_body"
	ResponseTrailers Event = "response_trailers"
)

// EventOf returns the event of req, or "" when its request oneof is not set
// (a message carrying only flow control, for one).
func EventOf(req *extprocpb.ProcessingRequest) Event {
	switch req.GetRequest().(type) {
	case *extprocpb.ProcessingRequest_RequestHeaders:
		return RequestHeaders
	case *extprocpb.ProcessingRequest_RequestBody:
		return RequestBody
	case *extprocpb.ProcessingRequest_RequestTrailers:
		return RequestTrailers
	case *extprocpb.ProcessingRequest_ResponseHeaders:
		return ResponseHeaders
	case *extprocpb.ProcessingRequest_ResponseBody:
		return ResponseBody
	case *extprocpb.ProcessingRequest_ResponseTrailers:
		return ResponseTrailers
	}
	return ""
}

// Stream is a Handler's view of the stream it answers. A stream's Handler
// calls are sequential, on one goroutine, so a Handler may keep its state for
// the stream in Data without locking.
type Stream struct {
	// Index is the stream's number: 0 for the first stream the server
	// started.
	Index int
	// N is the number of requests handled on the stream before this one.
	N int
	// Metadata is the stream's incoming metadata.
	Metadata metadata.MD
	// Data is the Handler's own state for the stream, nil at first.
	Data any

	ctx context.Context
}

// Context returns the stream's context, which ends with the stream.
func (s *Stream) Context() context.Context { return s.ctx }

// ErrCloseOK, returned by a Handler, ends the stream with status OK.
var ErrCloseOK = errors.New("extprocserver: close the stream with OK")

// Handler answers one ProcessingRequest: it returns the responses to send for
// it, in order (none is valid: the request is not answered, or not yet), and
// a non-nil error to end the stream after sending them: ErrCloseOK ends it
// with OK, any other error with its status (status.Convert). A Handler that
// blocks must return when s.Context() ends.
type Handler func(s *Stream, req *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error)

// PassThrough answers every request as the ext_proc protocol expects, with
// no mutation: CONTINUE for headers and trailers, and in GRPC body send mode
// a streamed_response carrying the same body, end_of_stream and
// end_of_stream_without_message for a body. It does not answer a request in
// observability mode, nor one whose request oneof is not set.
func PassThrough() Handler {
	return func(_ *Stream, req *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		return passThrough(req), nil
	}
}

func passThrough(req *extprocpb.ProcessingRequest) []*extprocpb.ProcessingResponse {
	if req.GetObservabilityMode() {
		return nil
	}
	if r := ContinueResponse(req); r != nil {
		return []*extprocpb.ProcessingResponse{r}
	}
	return nil
}

// Raw answers each request with what f returns, and never ends the stream.
func Raw(f func(req *extprocpb.ProcessingRequest) []*extprocpb.ProcessingResponse) Handler {
	return func(_ *Stream, req *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		return f(req), nil
	}
}

// PerEvent answers a request with the Handler hs holds for its event, and
// any other request as PassThrough does.
func PerEvent(hs map[Event]Handler) Handler {
	return func(s *Stream, req *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		if h := hs[EventOf(req)]; h != nil {
			return h(s, req)
		}
		return passThrough(req), nil
	}
}

// MutateBodies answers the body requests of event (RequestBody or
// ResponseBody) with one streamed_response for each body f returns from the
// request's body, in order (none drops the message), and any other request
// as PassThrough does. When the request has end_of_stream set, the last
// response carries it; when f returns no body, or the request has
// end_of_stream_without_message set (f is then not called), a response with
// no message and end_of_stream_without_message carries it. It answers even
// in observability mode.
func MutateBodies(event Event, f func([]byte) [][]byte) Handler {
	if event != RequestBody && event != ResponseBody {
		panic(fmt.Sprintf("extprocserver: MutateBodies of %q, not a body event", event))
	}
	return func(_ *Stream, req *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		if EventOf(req) != event {
			return passThrough(req), nil
		}
		b := BodyOf(req)
		var bodies [][]byte
		if !b.GetEndOfStreamWithoutMessage() {
			bodies = f(b.GetBody())
		}
		out := make([]*extprocpb.ProcessingResponse, 0, len(bodies)+1)
		for i, body := range bodies {
			eos := b.GetEndOfStream() && i == len(bodies)-1
			out = append(out, BodyResponse(event, body, eos, false))
		}
		if b.GetEndOfStream() && len(bodies) == 0 {
			out = append(out, BodyResponse(event, nil, true, true))
		}
		return out, nil
	}
}

// MutateResponseBodies is MutateBodies(ResponseBody, f): it rewrites the
// server's messages.
func MutateResponseBodies(f func([]byte) [][]byte) Handler {
	return MutateBodies(ResponseBody, f)
}

// MutateHeaders answers the requests of event (RequestHeaders,
// ResponseHeaders or ResponseTrailers) with m, and any other request as
// PassThrough does. It answers even in observability mode.
func MutateHeaders(event Event, m *extprocpb.HeaderMutation) Handler {
	switch event {
	case RequestHeaders, ResponseHeaders, RequestTrailers, ResponseTrailers:
	default:
		panic(fmt.Sprintf("extprocserver: MutateHeaders of %q, not a headers or trailers event", event))
	}
	return func(_ *Stream, req *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		if EventOf(req) != event {
			return passThrough(req), nil
		}
		return []*extprocpb.ProcessingResponse{HeaderMutationResponse(event, m)}, nil
	}
}

// SetHeaders is MutateHeaders of a mutation that sets each header of kv (key,
// value, key, value...) to its value, overwriting it if present
// (OVERWRITE_IF_EXISTS_OR_ADD), in raw_value.
func SetHeaders(event Event, kv ...string) Handler {
	if len(kv)%2 != 0 {
		panic("extprocserver: SetHeaders with an odd number of key and value strings")
	}
	m := &extprocpb.HeaderMutation{}
	for i := 0; i < len(kv); i += 2 {
		m.SetHeaders = append(m.SetHeaders, SetHeader(kv[i], kv[i+1], corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD))
	}
	return MutateHeaders(event, m)
}

// RemoveHeaders is MutateHeaders of a mutation that removes keys.
func RemoveHeaders(event Event, keys ...string) Handler {
	return MutateHeaders(event, &extprocpb.HeaderMutation{RemoveHeaders: keys})
}

// Immediate answers the requests of event with an immediate_response of
// grpc_status code and details, and any other request as PassThrough does.
// It does not end the stream. It answers even in observability mode.
func Immediate(event Event, code codes.Code, details string) Handler {
	switch event {
	case RequestHeaders, RequestBody, RequestTrailers, ResponseHeaders, ResponseBody, ResponseTrailers:
	default:
		panic(fmt.Sprintf("extprocserver: Immediate of %q, not an event", event))
	}
	return func(_ *Stream, req *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		if EventOf(req) != event {
			return passThrough(req), nil
		}
		return []*extprocpb.ProcessingResponse{ImmediateResponse(code, details)}, nil
	}
}

// Hang never answers: its first call returns when the stream's context ends
// (the client cancelled the stream, or the server was stopped). The server
// still records the requests that follow.
func Hang() Handler {
	return func(s *Stream, _ *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		<-s.Context().Done()
		return nil, s.Context().Err()
	}
}

// Fail ends the stream with status code, without answering, at its first
// request.
func Fail(code codes.Code) Handler {
	return func(*Stream, *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		return nil, status.Errorf(code, "extprocserver: Fail(%v)", code)
	}
}

// CloseOK ends the stream with status OK, without answering, at its first
// request.
func CloseOK() Handler {
	return func(*Stream, *extprocpb.ProcessingRequest) ([]*extprocpb.ProcessingResponse, error) {
		return nil, ErrCloseOK
	}
}

// ContinueResponse returns the answer to req that changes nothing: a
// HeadersResponse, TrailersResponse or, for a body, a streamed_response with
// req's body, end_of_stream and end_of_stream_without_message. It returns nil
// when req's request oneof is not set.
func ContinueResponse(req *extprocpb.ProcessingRequest) *extprocpb.ProcessingResponse {
	switch e := EventOf(req); e {
	case RequestHeaders, ResponseHeaders, RequestTrailers, ResponseTrailers:
		return HeaderMutationResponse(e, nil)
	case RequestBody, ResponseBody:
		b := BodyOf(req)
		return BodyResponse(e, b.GetBody(), b.GetEndOfStream(), b.GetEndOfStreamWithoutMessage())
	}
	return nil
}

// BodyResponse returns the answer to a body request of event (RequestBody or
// ResponseBody) that carries body in a streamed_response, the GRPC body
// send mode's answer.
func BodyResponse(event Event, body []byte, endOfStream, endOfStreamWithoutMessage bool) *extprocpb.ProcessingResponse {
	br := &extprocpb.BodyResponse{Response: &extprocpb.CommonResponse{
		BodyMutation: &extprocpb.BodyMutation{Mutation: &extprocpb.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocpb.StreamedBodyResponse{
				Body:                      body,
				EndOfStream:               endOfStream,
				EndOfStreamWithoutMessage: endOfStreamWithoutMessage,
			},
		}},
	}}
	switch event {
	case RequestBody:
		return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_RequestBody{RequestBody: br}}
	case ResponseBody:
		return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_ResponseBody{ResponseBody: br}}
	}
	panic(fmt.Sprintf("extprocserver: BodyResponse of %q, not a body event", event))
}

// HeaderMutationResponse returns the answer to a headers or trailers request
// of event that applies m (nil: no mutation). Headers are answered with
// status CONTINUE.
func HeaderMutationResponse(event Event, m *extprocpb.HeaderMutation) *extprocpb.ProcessingResponse {
	hr := &extprocpb.HeadersResponse{}
	if m != nil {
		hr.Response = &extprocpb.CommonResponse{HeaderMutation: m}
	}
	switch event {
	case RequestHeaders:
		return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_RequestHeaders{RequestHeaders: hr}}
	case ResponseHeaders:
		return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_ResponseHeaders{ResponseHeaders: hr}}
	case RequestTrailers:
		return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocpb.TrailersResponse{HeaderMutation: m},
		}}
	case ResponseTrailers:
		return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocpb.TrailersResponse{HeaderMutation: m},
		}}
	}
	panic(fmt.Sprintf("extprocserver: HeaderMutationResponse of %q, not a headers or trailers event", event))
}

// ImmediateResponse returns an immediate_response of grpc_status code and
// details. Its HTTP status, which the proto requires and gRPC ignores, is
// 200.
func ImmediateResponse(code codes.Code, details string) *extprocpb.ProcessingResponse {
	return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocpb.ImmediateResponse{
			Status:     &typepb.HttpStatus{Code: typepb.StatusCode_OK},
			GrpcStatus: &extprocpb.GrpcStatus{Status: uint32(code)},
			Details:    details,
		},
	}}
}

// SetHeader returns a set_headers entry setting key to value (in raw_value)
// with action.
func SetHeader(key, value string, action corepb.HeaderValueOption_HeaderAppendAction) *corepb.HeaderValueOption {
	return &corepb.HeaderValueOption{
		Header:       &corepb.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: action,
	}
}

// HeaderValues returns the values of key in m, in order, from raw_value or,
// when that is empty, value.
func HeaderValues(m *corepb.HeaderMap, key string) []string {
	var out []string
	for _, h := range m.GetHeaders() {
		if h.GetKey() != key {
			continue
		}
		if raw := h.GetRawValue(); len(raw) > 0 {
			out = append(out, string(raw))
		} else {
			out = append(out, h.GetValue())
		}
	}
	return out
}

// HeadersOf returns the header map of a headers or trailers request (nil for
// another).
func HeadersOf(req *extprocpb.ProcessingRequest) *corepb.HeaderMap {
	switch EventOf(req) {
	case RequestHeaders:
		return req.GetRequestHeaders().GetHeaders()
	case ResponseHeaders:
		return req.GetResponseHeaders().GetHeaders()
	case RequestTrailers:
		return req.GetRequestTrailers().GetTrailers()
	case ResponseTrailers:
		return req.GetResponseTrailers().GetTrailers()
	}
	return nil
}

// BodyOf returns the body of a body request (nil for another).
func BodyOf(req *extprocpb.ProcessingRequest) *extprocpb.HttpBody {
	if b := req.GetRequestBody(); b != nil {
		return b
	}
	return req.GetResponseBody()
}
