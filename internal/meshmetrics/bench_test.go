package meshmetrics

import (
	"context"
	"net"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// unaryRPC returns a function that takes one unary RPC through the unary
// interceptor of a recorder on mp, with the context gRPC gives a handler on
// a plaintext connection: its cost is the interceptor's and the metrics
// SDK's.
func unaryRPC(t testing.TB, mp metric.MeterProvider) func() {
	r, err := New(mp, "node", mustStruct(t, istioNode("server-ns", "greeter")))
	if err != nil {
		t.Fatal(err)
	}
	opts, _ := r.ServerOptions(nil)
	if len(opts) != 2 {
		t.Fatalf("%d server options, want the two interceptors", len(opts))
	}
	h := &handler{r: r, entries: make(map[entryKey]*entry)}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}})
	ctx = metadata.NewIncomingContext(ctx, metadata.MD{":authority": {"greeter.server-ns.svc.cluster.local:50051"}})
	req, resp := wrapperspb.String("world"), wrapperspb.String("Hello, world")
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	handle := func(context.Context, any) (any, error) { return resp, nil }
	return func() {
		if _, err := h.unary(ctx, req, info, handle); err != nil {
			t.Fatal(err)
		}
	}
}

// The interceptor allocates one slice of one string per unary RPC: gRPC's
// metadata API returns a copy of the :authority value it reads (reading
// the whole metadata would copy every header). Everything else is the
// SDK's.
func TestAllocsPerRPC(t *testing.T) {
	rpc := unaryRPC(t, noop.NewMeterProvider())
	rpc()
	if n := testing.AllocsPerRun(1000, rpc); n > 1 {
		t.Errorf("%v allocations per RPC with a no-op provider, want 1", n)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	sdk := unaryRPC(t, mp)
	sdk()
	t.Logf("%v allocations per RPC with the OpenTelemetry SDK", testing.AllocsPerRun(1000, sdk))
}

// BenchmarkRPC: the interceptor's cost per unary RPC, with a no-op
// provider and with the OpenTelemetry SDK.
func BenchmarkRPC(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	for _, c := range []struct {
		name string
		mp   metric.MeterProvider
	}{{"noop", noop.NewMeterProvider()}, {"sdk", mp}} {
		b.Run(c.name, func(b *testing.B) {
			rpc := unaryRPC(b, c.mp)
			b.ReportAllocs()
			for b.Loop() {
				rpc()
			}
		})
	}
}
