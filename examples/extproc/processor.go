package main

import (
	"io"

	extprocpb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// redactedMethod is the method whose responses the processor redacts.
const redactedMethod = "/grpc.testing.TestService/UnaryCall"

// redacted replaces the value of a redacted field.
const redacted = "[redacted]"

// processor is an ext_proc processor: an
// envoy.service.ext_proc.v3.ExternalProcessor server. The ext_proc filter
// of the xDS server opens one Process stream per RPC and sends on it the
// RPC's events its processing_mode names; the processor answers each one,
// in order.
//
// This one removes the username (an e-mail address) from the greeter's
// responses. It expects the filter's config of this example:
// processing_mode with response_body_mode GRPC (each response message
// comes as one response_body, serialized as protobuf) and
// response_attributes ["request.path"] (each response event says which
// method it belongs to, so that the processor knows the message's type).
type processor struct {
	extprocpb.UnimplementedExternalProcessorServer
	// logf, if set, is told about each message redacted.
	logf func(format string, args ...any)
}

// Process answers the events of one RPC until the filter ends the stream.
// A failure ends the stream with an error, and the filter then fails the
// RPC with UNAVAILABLE (failure_mode_allow is false): a response that
// could not be redacted never reaches the client.
func (p *processor) Process(stream extprocpb.ExternalProcessor_ProcessServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil // the filter half-closed the stream
		}
		if err != nil {
			return err // the RPC is over: the filter cancelled the stream
		}
		resp, err := p.answer(req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// answer is the response to one event of the RPC.
func (p *processor) answer(req *extprocpb.ProcessingRequest) (*extprocpb.ProcessingResponse, error) {
	switch r := req.GetRequest().(type) {
	case *extprocpb.ProcessingRequest_RequestHeaders:
		// Skipped by this example's processing_mode; answered anyway.
		return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_RequestHeaders{
			RequestHeaders: continueHeaders(),
		}}, nil
	case *extprocpb.ProcessingRequest_ResponseHeaders:
		return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: continueHeaders(),
		}}, nil
	case *extprocpb.ProcessingRequest_ResponseBody:
		body := r.ResponseBody.GetBody()
		switch m := method(req); m {
		case "":
			// Without it, a response that needs redacting would pass.
			return nil, status.Error(codes.FailedPrecondition, "no request.path attribute: the filter's response_attributes must name it")
		case redactedMethod:
			var err error
			if body, err = redactUsername(body); err != nil {
				return nil, status.Errorf(codes.Internal, "cannot redact a response of %s: %v", redactedMethod, err)
			}
			if p.logf != nil {
				p.logf("replaced the username of a %s response with %q", m, redacted)
			}
		}
		// The message the client gets instead of the server's (another
		// method's, unchanged).
		return &extprocpb.ProcessingResponse{Response: &extprocpb.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocpb.BodyResponse{Response: &extprocpb.CommonResponse{
				BodyMutation: &extprocpb.BodyMutation{Mutation: &extprocpb.BodyMutation_StreamedResponse{
					StreamedResponse: &extprocpb.StreamedBodyResponse{Body: body},
				}},
			}},
		}}, nil
	default:
		// The config sends no other event: fail rather than guess.
		return nil, status.Errorf(codes.Unimplemented, "unexpected event %T: check the filter's processing_mode", r)
	}
}

// continueHeaders lets headers through unchanged.
func continueHeaders() *extprocpb.HeadersResponse {
	return &extprocpb.HeadersResponse{Response: &extprocpb.CommonResponse{Status: extprocpb.CommonResponse_CONTINUE}}
}

// method is the RPC's method (its :path), from the response_attributes
// the filter sends with each response event.
func method(req *extprocpb.ProcessingRequest) string {
	attrs := req.GetAttributes()["envoy.filters.http.ext_proc"]
	return attrs.GetFields()["request.path"].GetStringValue()
}

// redactUsername returns body, a serialized grpc.testing.SimpleResponse,
// with its username (if any) replaced. The other fields, unknown ones
// included, are kept.
func redactUsername(body []byte) ([]byte, error) {
	var resp testgrpc.SimpleResponse
	if err := proto.Unmarshal(body, &resp); err != nil {
		return nil, err
	}
	if resp.GetUsername() != "" {
		resp.Username = redacted
	}
	return proto.Marshal(&resp)
}
