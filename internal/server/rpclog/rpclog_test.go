package rpclog_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/accesslog/sink"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
	"github.com/proxyless-grpc/xds/internal/server/rpclog"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestDeps: the access log of a chain's RPCs reads what the per-RPC path
// records; it knows no listener, connection group or xDS client.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/server/rpclog", append([]string{
		mod + "$",
		mod + "/internal/xdsclient",
		mod + "/internal/server/listener",
		mod + "/internal/server/connserver",
		mod + "/internal/httpfilter/builtin",
	}, testutils.TestOnly...)...)
}

// service answers UnaryCall with the status the request asks for, after
// setting a response header, a trailer and a response flag; FullDuplexCall
// echoes each message.
type service struct {
	testgrpc.UnimplementedTestServiceServer
}

func (service) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-resp", "h")); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-trail", "t")); err != nil {
		return nil, err
	}
	responseinfo.AddFlag(ctx, accesslog.FlagDelayInjected)
	if c := req.GetResponseStatus().GetCode(); c != 0 {
		return nil, status.Error(codes.Code(c), "asked")
	}
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (service) FullDuplexCall(s testgrpc.TestService_FullDuplexCallServer) error {
	if err := s.SendHeader(metadata.Pairs("x-resp", "s")); err != nil {
		return err
	}
	s.SetTrailer(metadata.Pairs("x-trail", "st"))
	for {
		req, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// TestRecords: what a client observes of an RPC, its status, the headers
// and trailers the handler sent, the bytes each way, is what its line says,
// for unary and streaming RPCs, with the request headers the log reads.
func TestRecords(t *testing.T) {
	ctx := testutils.Context(t)
	path := filepath.Join(t.TempDir(), "access.log")
	format := "%REQ(:PATH)% read=%REQ(x-read)% resp=%RESP(x-resp)% trail=%TRAILER(x-trail)% status=%GRPC_STATUS% flags=%RESPONSE_FLAGS% details=%RESPONSE_CODE_DETAILS% in=%BYTES_RECEIVED% out=%BYTES_SENT%\n"
	fl, err := anypb.New(&filepb.FileAccessLog{Path: path, AccessLogFormat: &filepb.FileAccessLog_LogFormat{LogFormat: &corepb.SubstitutionFormatString{
		Format: &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{Specifier: &corepb.DataSource_InlineString{InlineString: format}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{{Name: "file", ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: fl}}})
	if err != nil {
		t.Fatal(err)
	}
	outputs := sink.New(sink.Options{})
	defer outputs.Close(context.Background())
	logger := outputs.Logger(cfg)
	defer logger.Close()
	al := rpclog.New(logger, cfg, "chain", nil)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(al.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(srv, service{})
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	rctx := metadata.AppendToOutgoingContext(ctx, "x-read", "r")

	payload := &testpb.Payload{Body: []byte("0123456789")} // 12 bytes; in a request or response, 14: 19 on the wire
	if _, err := client.UnaryCall(rctx, &testpb.SimpleRequest{Payload: payload}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.UnaryCall(rctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.ResourceExhausted)}}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("UnaryCall asking RESOURCE_EXHAUSTED: %v", err)
	}
	stream, err := client.FullDuplexCall(rctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: payload}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("stream ended with %v; want EOF", err)
	}

	if err := outputs.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	sort.Strings(got)
	want := []string{
		// The stream's requests: 3 × (14 + 5); the server's replies, the same.
		"/grpc.testing.TestService/FullDuplexCall read=r resp=s trail=st status=OK flags=- details=via_upstream in=57 out=57",
		// A status error: the trailer and header set before it are sent
		// with it, and no response message. The request: an EchoStatus of
		// 2 bytes in 4, 9 on the wire.
		"/grpc.testing.TestService/UnaryCall read=r resp=h trail=t status=ResourceExhausted flags=DI details=via_upstream in=9 out=0",
		"/grpc.testing.TestService/UnaryCall read=r resp=h trail=t status=OK flags=DI details=via_upstream in=19 out=19",
	}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("access log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
