package e2e_test

// Helpers of the access log end-to-end tests (accesslog_*_test.go): access
// log entries of each logger type, a user interceptor that makes the RPCs
// of a test set headers and trailers, fail or wait, as a request header
// says, and a client-side count of the bytes on the wire.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	streampb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fileLogWith is an access_log entry named name writing to path with the
// format f, filtered by flt (nil: every RPC).
func fileLogWith(t *testing.T, name, path string, f *corepb.SubstitutionFormatString, flt *accesslogpb.AccessLogFilter) *accesslogpb.AccessLog {
	t.Helper()
	return &accesslogpb.AccessLog{Name: name, Filter: flt, ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, &filepb.FileAccessLog{
		Path: path, AccessLogFormat: &filepb.FileAccessLog_LogFormat{LogFormat: f}})}}
}

// stdoutLog and stderrLog are the stream loggers with the text format s.
func stdoutLog(t *testing.T, s string) *accesslogpb.AccessLog {
	return &accesslogpb.AccessLog{Name: "stdout", ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, &streampb.StdoutAccessLog{
		AccessLogFormat: &streampb.StdoutAccessLog_LogFormat{LogFormat: accesslogcfg.TextFormat(s)}})}}
}

func stderrLog(t *testing.T, s string) *accesslogpb.AccessLog {
	return &accesslogpb.AccessLog{Name: "stderr", ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, &streampb.StderrAccessLog{
		AccessLogFormat: &streampb.StderrAccessLog_LogFormat{LogFormat: accesslogcfg.TextFormat(s)}})}}
}

// Request headers the behaviour interceptors act on.
const (
	hdrSetHeader  = "x-set-header"  // the RPC sends the response header x-resp with this value
	hdrSetTrailer = "x-set-trailer" // the RPC sends the trailer x-trail with this value
	hdrFail       = "x-fail"        // the RPC fails with this code (a number), message failMessage
	hdrSleep      = "x-sleep"       // the RPC waits this long (a Go duration) first, or until it is cancelled
)

// failMessage is the status message of an RPC failed by x-fail: gRPC sends
// its '%' percent-encoded.
const failMessage = "no such 100%"

// behaviour returns the user interceptors of the access log tests, which
// act on the request headers above before the handler; started, if not
// nil, is sent the x-case of every RPC that starts to wait.
func behaviour(started chan<- string) []grpc.ServerOption {
	behave := func(ctx context.Context, setHeader func(metadata.MD) error, setTrailer func(metadata.MD)) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(hdrSetHeader); len(v) > 0 {
			if err := setHeader(metadata.Pairs("x-resp", v[0])); err != nil {
				return err
			}
		}
		if v := md.Get(hdrSetTrailer); len(v) > 0 {
			setTrailer(metadata.Pairs("x-trail", v[0]))
		}
		if v := md.Get(hdrSleep); len(v) > 0 {
			d, err := time.ParseDuration(v[0])
			if err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			if started != nil {
				started <- first(md.Get(caseHeader))
			}
			timer := time.NewTimer(d)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if v := md.Get(hdrFail); len(v) > 0 {
			n, err := strconv.Atoi(v[0])
			if err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			return status.Error(codes.Code(n), failMessage)
		}
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			err := behave(ctx, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) }, func(md metadata.MD) {
				if err := grpc.SetTrailer(ctx, md); err != nil {
					panic(err)
				}
			})
			if err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := behave(ss.Context(), ss.SetHeader, ss.SetTrailer); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// linesOf returns the lines of s, without the last newline.
func linesOf(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
