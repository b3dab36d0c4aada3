package grpccompat_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats/opentelemetry"

	"github.com/proxyless-grpc/xds/internal/grpccompat"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

// trace records which interceptors ran, in order.
type trace struct {
	mu  sync.Mutex
	ran []string
}

func (tr *trace) unary(name string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		tr.mu.Lock()
		tr.ran = append(tr.ran, name)
		tr.mu.Unlock()
		return h(ctx, req)
	}
}

func (tr *trace) stream(name string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		tr.mu.Lock()
		tr.ran = append(tr.ran, name)
		tr.mu.Unlock()
		return h(srv, ss)
	}
}

func (tr *trace) take() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := tr.ran
	tr.ran = nil
	return out
}

// TestSplitInterceptors: the program's single interceptors come out of its
// options, however the options wrap them, and the options left, with
// "front" chained ahead and the single ones chained after it, make a real
// grpc.Server run the program's interceptors in gRPC's order (the single
// one, then the chained ones) behind front. Everything else the options set
// still applies: here, the credentials.
func TestSplitInterceptors(t *testing.T) {
	tr := &trace{}
	single := grpc.UnaryInterceptor(tr.unary("single"))
	singleStream := grpc.StreamInterceptor(tr.stream("single"))
	chained := grpc.ChainUnaryInterceptor(tr.unary("chained"))
	creds := grpc.Creds(insecure.NewCredentials())
	for _, c := range []struct {
		name       string
		opts       []grpc.ServerOption
		unary      []string // the interceptors a unary RPC runs, after front
		stream     []string // those of a streaming RPC
		unchanged  bool     // Options is the list given
		wantUnary  bool
		wantStream bool
	}{
		{name: "none", opts: []grpc.ServerOption{creds, chained}, unary: []string{"chained"}, stream: nil, unchanged: true},
		{name: "single unary", opts: []grpc.ServerOption{chained, single, creds}, unary: []string{"single", "chained"}, wantUnary: true},
		{name: "both singles", opts: []grpc.ServerOption{singleStream, creds, single}, unary: []string{"single"}, stream: []string{"single"}, wantUnary: true, wantStream: true},
		// grpc-go's OpenTelemetry plugin gives a joined list of options
		// (its interceptors and stats handler): they stay.
		{name: "beside a joined list", opts: []grpc.ServerOption{otelOption(t), single, creds, chained}, unary: []string{"single", "chained"}, wantUnary: true},
		{name: "in a program's wrapper", opts: []grpc.ServerOption{&outerPtr{&embedded{single}}, embedded{creds}}, unary: []string{"single"}, wantUnary: true},
		{name: "in a wrapper of a wrapper", opts: []grpc.ServerOption{named{outer{embedded{single}}}, creds, named{otelOption(t)}}, unary: []string{"single"}, wantUnary: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := grpccompat.SplitInterceptors(c.opts)
			if err != nil {
				t.Fatalf("SplitInterceptors: %v", err)
			}
			if (got.Unary != nil) != c.wantUnary || (got.Stream != nil) != c.wantStream {
				t.Fatalf("Unary set %v, Stream set %v; want %v, %v", got.Unary != nil, got.Stream != nil, c.wantUnary, c.wantStream)
			}
			if c.unchanged && (len(got.Options) != len(c.opts) || &got.Options[0] != &c.opts[0]) {
				t.Errorf("Options rebuilt for options without a single interceptor")
			}
			if cr, err := grpccompat.ServerCreds(got.Options); err != nil || cr == nil {
				t.Errorf("credentials of the options left: %v, %v; want the insecure ones", cr, err)
			}
			opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(tr.unary("front")), grpc.ChainStreamInterceptor(tr.stream("front"))}
			if got.Unary != nil {
				opts = append(opts, grpc.ChainUnaryInterceptor(got.Unary))
			}
			if got.Stream != nil {
				opts = append(opts, grpc.ChainStreamInterceptor(got.Stream))
			}
			// grpc.NewServer panics if a single interceptor is set twice:
			// the options left must not set one.
			opts = append(opts, got.Options...)
			opts = append(opts, grpc.UnaryInterceptor(tr.unary("last")), grpc.StreamInterceptor(tr.stream("last")))
			srv := grpc.NewServer(opts...)
			testgrpc.RegisterTestServiceServer(srv, testutils.TestService{})
			addr := testutils.ServeGRPC(t, srv)
			cc, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx := testutils.Context(t)
			client := testgrpc.NewTestServiceClient(cc)
			if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
				t.Fatalf("EmptyCall: %v", err)
			}
			// "last" is the single interceptor the test sets after the
			// options: gRPC runs it first, so the order checked is what
			// comes after it.
			if got, want := tr.take(), append([]string{"last", "front"}, c.unary...); !slices.Equal(got, want) {
				t.Errorf("unary RPC ran %v, want %v", got, want)
			}
			s, err := client.FullDuplexCall(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.CloseSend()
			if _, err := s.Recv(); err == nil {
				t.Fatalf("FullDuplexCall: a message, want its end")
			}
			if got, want := tr.take(), append([]string{"last", "front"}, c.stream...); !slices.Equal(got, want) {
				t.Errorf("streaming RPC ran %v, want %v", got, want)
			}
		})
	}
}

// otelOption is grpc-go's OpenTelemetry plugin's server option, a joined
// list of gRPC options, recording into an SDK provider.
func otelOption(t *testing.T) grpc.ServerOption {
	mp := sdkmetric.NewMeterProvider()
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return opentelemetry.ServerOption(opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp}})
}

// TestSplitInterceptorsErrors: options that set a single interceptor twice
// (which gRPC refuses) or cannot be read are errors, never a guess.
func TestSplitInterceptorsErrors(t *testing.T) {
	i := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	var deep grpc.ServerOption = grpc.UnaryInterceptor(i)
	for range 64 {
		deep = embedded{deep}
	}
	if _, err := grpccompat.SplitInterceptors([]grpc.ServerOption{deep}); !errors.Is(err, grpccompat.ErrUnreadable) {
		t.Errorf("64 wrappers deep: %v, want an ErrUnreadable", err)
	}
	if _, err := grpccompat.SplitInterceptors([]grpc.ServerOption{grpc.UnaryInterceptor(i), embedded{grpc.UnaryInterceptor(i)}}); err == nil {
		t.Errorf("a single interceptor set twice: no error")
	}
}
