package xds

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// startXDSForHeap is BenchmarkIdleConnHeap's "xds" variant: a whole
// GRPCServer (one filter chain, inline routes, the router) configured by a
// real management server, serving the same test service as the plain
// variant. The grpc.Server the benchmark made is not used: the xDS server
// makes its own, one per connection.
func startXDSForHeap(b *testing.B, _ *grpc.Server) (string, func()) {
	ms := e2e.StartManagementServer(b, e2e.ManagementServerOptions{})
	bs := e2e.Bootstrap(b, e2e.BootstrapOptions{
		ServerURIs:                         []string{ms.Address},
		NodeID:                             "idle-heap",
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
	})
	serving := make(chan struct{})
	var once sync.Once
	s, err := NewGRPCServer(BootstrapContents(bs), ServingModeCallback(func(_ net.Addr, a ServingModeChangeArgs) {
		if a.Mode == connectivity.ServingModeServing {
			once.Do(func() { close(serving) })
		}
	}))
	if err != nil {
		b.Fatal(err)
	}
	testgrpc.RegisterTestServiceServer(s, testService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Serve(lis); close(done) }()
	port := uint32(lis.Addr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{e2e.DefaultServerListener("127.0.0.1", port, "")}}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-serving:
	case <-ctx.Done():
		b.Fatal("xDS server did not start serving")
	}
	return lis.Addr().String(), func() { s.Stop(); <-done; ms.Stop() }
}
