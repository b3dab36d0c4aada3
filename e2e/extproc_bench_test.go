package e2e_test

import (
	"errors"
	"io"
	"net"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	insecurecredspb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/insecure/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// echoProcessor is the least a processor can do: it answers every event
// at once, headers with CONTINUE and each message with itself, so that a
// benchmark measures the filter, not the processor.
type echoProcessor struct {
	pb.UnimplementedExternalProcessorServer
}

func (echoProcessor) Process(s pb.ExternalProcessor_ProcessServer) error {
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var resp *pb.ProcessingResponse
		switch r := req.GetRequest().(type) {
		case *pb.ProcessingRequest_RequestHeaders:
			resp = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_RequestHeaders{RequestHeaders: &pb.HeadersResponse{}}}
		case *pb.ProcessingRequest_ResponseHeaders:
			resp = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_ResponseHeaders{ResponseHeaders: &pb.HeadersResponse{}}}
		case *pb.ProcessingRequest_ResponseTrailers:
			resp = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_ResponseTrailers{ResponseTrailers: &pb.TrailersResponse{}}}
		case *pb.ProcessingRequest_RequestBody:
			b := r.RequestBody
			resp = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_RequestBody{RequestBody: &pb.BodyResponse{Response: &pb.CommonResponse{BodyMutation: &pb.BodyMutation{Mutation: &pb.BodyMutation_StreamedResponse{StreamedResponse: &pb.StreamedBodyResponse{
				Body: b.GetBody(), EndOfStream: b.GetEndOfStream(), EndOfStreamWithoutMessage: b.GetEndOfStreamWithoutMessage(),
			}}}}}}}
		case *pb.ProcessingRequest_ResponseBody:
			resp = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_ResponseBody{ResponseBody: &pb.BodyResponse{Response: &pb.CommonResponse{BodyMutation: &pb.BodyMutation{Mutation: &pb.BodyMutation_StreamedResponse{StreamedResponse: &pb.StreamedBodyResponse{
				Body: r.ResponseBody.GetBody(),
			}}}}}}}
		default:
			continue
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

// BenchmarkServerUnaryExtProc: server CPU per unary RPC (one connection,
// 8 concurrent callers, the load in a child process; as
// BenchmarkServerUnaryExtAuthz) with an ext_proc filter whose in-process
// processor answers at once: the request and response headers only
// (extproc-headers), and every event with GRPC body mode both ways and
// the trailers (extproc-grpc), against plain gRPC, the xDS server without
// filters and ext_authz over the same loopback (its in-process server
// allows every RPC). The server's CPU includes the side services', which
// run in the same process; <variant>-allocs/op counts this process's
// allocations, the side stream's included.
//
//	go test -run '^$' -bench 'BenchmarkServerUnaryExtProc' -benchtime 20000x ./e2e
func BenchmarkServerUnaryExtProc(b *testing.B) {
	side := func(register func(*grpc.Server)) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := grpc.NewServer()
		register(srv)
		go srv.Serve(lis)
		b.Cleanup(srv.Stop)
		return lis.Addr().String()
	}
	insecure := []*anypb.Any{anyOf(b, &insecurecredspb.InsecureCredentials{})}
	authzAddr := side(func(s *grpc.Server) { authpb.RegisterAuthorizationServer(s, allowAll{}) })
	authz := extAuthz(authzAddr)
	authz.GetGrpcService().GetGoogleGrpc().ChannelCredentialsPlugin = insecure
	procAddr := side(func(s *grpc.Server) { pb.RegisterExternalProcessorServer(s, echoProcessor{}) })
	proc := func(mode *extprocpb.ProcessingMode) []*hcmpb.HttpFilter {
		cfg := extProc(procAddr, mode)
		cfg.GetGrpcService().GetGoogleGrpc().ChannelCredentialsPlugin = insecure
		cfg.GetGrpcService().InitialMetadata = []*corepb.HeaderValue(nil)
		return []*hcmpb.HttpFilter{httpFilter(b, "proc", cfg)}
	}
	sideBySide(b, "unary", []benchVariant{
		{name: "plain", start: startPlainServer},
		{name: "xds", start: func(b *testing.B) benchServer { return startXDSServerFilters(b, []*hcmpb.HttpFilter{}) }},
		{name: "extauthz", start: func(b *testing.B) benchServer {
			return startXDSServerFilters(b, []*hcmpb.HttpFilter{httpFilter(b, "authz", authz)})
		}},
		{name: "extproc-headers", start: func(b *testing.B) benchServer { return startXDSServerFilters(b, proc(headersOnly())) }},
		{name: "extproc-grpc", start: func(b *testing.B) benchServer { return startXDSServerFilters(b, proc(allEvents())) }},
	})
}
