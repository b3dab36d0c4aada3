package e2e_test

import (
	"net"
	"path/filepath"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/connectivity"
	grpcotel "google.golang.org/grpc/stats/opentelemetry"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/proxyless-grpc/xds/internal/accesslog"
)

// BenchmarkServerUnaryLoaded: server CPU per unary RPC (as
// BenchmarkServerUnary) of a fully loaded server, each RPC through RBAC
// with 10 policies, a local rate limit that does not limit, a fault filter
// at 0 %, Istio's mesh metrics into an OpenTelemetry SDK provider and an
// access log (Istio's default format) to a file; against plain gRPC, each
// feature alone, and grpc-go's xDS server with the same RBAC and its own
// OpenTelemetry plugin (it NACKs the local rate limit and fault filters, so
// its figure covers RBAC and metrics only, as the shared bench's
// grpcxds+loaded). xds-loaded-noop is xds-loaded with the mesh metrics
// into OpenTelemetry's no-op provider: the library's own share, without
// the SDK's. Target (issue 41): xds-loaded within 10 % of plain.
//
//	go test -run '^$' -bench 'BenchmarkServerUnaryLoaded$' -benchtime 20000x ./e2e
func BenchmarkServerUnaryLoaded(b *testing.B) {
	logPath := filepath.Join(b.TempDir(), "access.log")
	rbac10 := &hcmpb.HttpFilter{Name: "rbac", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: benchRBAC(10)}}
	local := httpFilter(b, "local", rateLimit("bench", 1<<31))
	fault0 := httpFilter(b, "fault", &faultpb.HTTPFault{Abort: grpcAbort(14, 0), Delay: fixedDelay(1e6, 0)})
	with := func(impl xdsImpl, filters []*hcmpb.HttpFilter, logs bool) func(*testing.B) benchServer {
		return func(b *testing.B) benchServer {
			return startBenchServer(b, impl, func(a net.Addr) *listenerpb.Listener {
				l := filtersListener(a, filters, allRoutes("bench"), "")
				if logs {
					l = loggingListener(b, l, fileLog(b, logPath, accesslog.IstioFormat))
				}
				return l
			})
		}
	}
	loaded := []*hcmpb.HttpFilter{rbac10, local, fault0}
	sideBySide(b, "unary", []benchVariant{
		{name: "plain", start: startPlainServer},
		{name: "xds", start: with(thisLibrary, nil, false)},
		{name: "xds-rbac10", start: with(thisLibrary, []*hcmpb.HttpFilter{rbac10}, false)},
		{name: "xds-ratelimit", start: with(thisLibrary, []*hcmpb.HttpFilter{local}, false)},
		{name: "xds-fault0", start: with(thisLibrary, []*hcmpb.HttpFilter{fault0}, false)},
		{name: "xds-mesh", start: with(meshLibrary, nil, false)},
		{name: "xds-accesslog", start: with(thisLibrary, nil, true)},
		{name: "xds-loaded", start: with(meshLibrary, loaded, true)},
		{name: "xds-loaded-noop", start: with(meshNoopLibrary, loaded, true)},
		{name: "grpcxds-loaded", start: func(b *testing.B) benchServer {
			return startBenchServer(b, grpcGoXDSOTel, func(a net.Addr) *listenerpb.Listener {
				return filtersListener(a, []*hcmpb.HttpFilter{rbac10}, allRoutes("bench"), "")
			})
		}},
	})
}

// grpcGoXDSOTel is grpc-go's xDS server with grpc-go's OpenTelemetry plugin
// recording into an SDK provider.
var grpcGoXDSOTel = xdsImpl{name: "grpcxds-otel", newServer: func(bs []byte, serving func(bool)) (xdsServer, error) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	return grpcxds.NewGRPCServer(grpcxds.BootstrapContentsForTesting(bs),
		grpcotel.ServerOption(grpcotel.Options{MetricsOptions: grpcotel.MetricsOptions{MeterProvider: mp}}),
		grpcxds.ServingModeCallback(func(_ net.Addr, a grpcxds.ServingModeChangeArgs) {
			serving(a.Mode == connectivity.ServingModeServing)
		}))
}}
