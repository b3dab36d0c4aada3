package connserver

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

// idleConns is how many idle connections BenchmarkIdleConnHeap opens per
// measurement.
const idleConns = 1000

// BenchmarkIdleConnHeap reports the server heap (HeapInuse after GC) per idle
// client connection that has completed one RPC, for a plain grpc.Server on a
// TCP listener, for one whose connections are wrapped in conn, and for one
// whose connections are wrapped in a wrapper that hides ReadOnReady, which
// makes grpc-go pin a read buffer per connection. Target: wrapped no more
// than plain. (The whole xDS server's figure is in the e2e benchmarks.)
//
// One measurement takes about a second; run with -benchtime=1x for one each.
func BenchmarkIdleConnHeap(b *testing.B) {
	if testing.Short() {
		b.Skip("opens thousands of connections; skipped in -short mode")
	}
	chain := &filterchain.FilterChain{}
	variants := []struct {
		name string
		wrap func(*net.TCPConn) net.Conn // nil: none
	}{
		{"plain", nil},
		{"wrapped", func(c *net.TCPConn) net.Conn {
			src, _ := AddrPortOf(c.RemoteAddr())
			dst, _ := AddrPortOf(c.LocalAddr())
			return newConn(c, chain, src, dst, func() {})
		}},
		{"wrappedWithoutReadOnReady", func(c *net.TCPConn) net.Conn { return opaqueConn{c} }},
	}
	start := func(wrap func(*net.TCPConn) net.Conn) func(b *testing.B) (string, func()) {
		return func(b *testing.B) (string, func()) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer()
			testgrpc.RegisterTestServiceServer(srv, testutils.TestService{})
			done := make(chan struct{})
			go func() {
				if wrap != nil {
					srv.Serve(wrappingListener{lis, wrap})
				} else {
					srv.Serve(lis)
				}
				close(done)
			}()
			return lis.Addr().String(), func() { srv.Stop(); <-done }
		}
	}
	// Warm up once so that process-wide first-use allocations (gRPC's buffer
	// pools, codec state) do not land in the first variant's figure.
	testutils.MeasureIdleConnHeap(b, start(nil), 50)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var total float64
			var runs int
			for b.Loop() {
				total += testutils.MeasureIdleConnHeap(b, start(v.wrap), idleConns)
				runs++
			}
			b.ReportMetric(total/float64(runs), "heap-B/idle-conn")
		})
	}
}

// TestIdleClientsHelper is the client process of BenchmarkIdleConnHeap.
func TestIdleClientsHelper(t *testing.T) { testutils.IdleClients(t) }

// wrappingListener wraps every accepted connection.
type wrappingListener struct {
	net.Listener
	wrap func(*net.TCPConn) net.Conn
}

func (l wrappingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c.(*net.TCPConn)), nil
}

// opaqueConn is a connection wrapper that, like most, shows gRPC neither a
// *net.TCPConn nor a ReadOnReady method.
type opaqueConn struct{ net.Conn }
