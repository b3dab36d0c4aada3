package meshmetrics

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// rpcEvents returns a function that takes one unary RPC through the stats
// handler of a recorder on mp, on one connection, as gRPC does: its cost
// is the handler's and the metrics SDK's.
func rpcEvents(t testing.TB, mp metric.MeterProvider) func() {
	r, err := New(mp, "node", mustStruct(t, istioNode("server-ns", "greeter")))
	if err != nil {
		t.Fatal(err)
	}
	hd := &handler{r: r}
	conn := hd.TagConn(context.Background(), &stats.ConnTagInfo{})
	md := metadata.MD{":authority": {"greeter.server-ns.svc.cluster.local:50051"}}
	tag := &stats.RPCTagInfo{FullMethodName: "/grpc.testing.TestService/UnaryCall"}
	in := &stats.InHeader{Header: md}
	inP := &stats.InPayload{WireLength: 20}
	outP := &stats.OutPayload{WireLength: 30}
	now := time.Now()
	end := &stats.End{BeginTime: now, EndTime: now.Add(time.Millisecond)}
	return func() {
		ctx := hd.TagRPC(conn, tag)
		hd.HandleRPC(ctx, in)
		hd.HandleRPC(ctx, inP)
		hd.HandleRPC(ctx, outP)
		hd.HandleRPC(ctx, end)
	}
}

// The handler allocates one object per RPC (its state, which is the RPC's
// context); everything else is the SDK's.
func TestAllocsPerRPC(t *testing.T) {
	rpc := rpcEvents(t, noop.NewMeterProvider())
	rpc()
	if n := testing.AllocsPerRun(1000, rpc); n > 1 {
		t.Errorf("%v allocations per RPC with a no-op provider, want 1", n)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	sdk := rpcEvents(t, mp)
	sdk()
	t.Logf("%v allocations per RPC with the OpenTelemetry SDK", testing.AllocsPerRun(1000, sdk))
}

// BenchmarkRPC: the handler's cost per RPC, with a no-op provider and with
// the OpenTelemetry SDK.
func BenchmarkRPC(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	for _, c := range []struct {
		name string
		mp   metric.MeterProvider
	}{{"noop", noop.NewMeterProvider()}, {"sdk", mp}} {
		b.Run(c.name, func(b *testing.B) {
			rpc := rpcEvents(b, c.mp)
			b.ReportAllocs()
			for b.Loop() {
				rpc()
			}
		})
	}
}
