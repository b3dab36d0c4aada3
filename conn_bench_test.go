package xds

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/proxyless-grpc/xds/filterchain"
)

// The idle-connection benchmark runs its clients in a child process (this
// test binary running TestIdleClientsHelper) so that the heap it measures is
// the server's alone. These variables tell the child what to do.
const (
	idleClientsTargetEnv = "XDS_TEST_IDLE_CLIENTS_TARGET"
	idleClientsCountEnv  = "XDS_TEST_IDLE_CLIENTS_COUNT"
	idleClientsReady     = "idle clients ready"
)

// idleConns is how many idle connections BenchmarkIdleConnHeap opens per
// measurement.
const idleConns = 1000

// BenchmarkIdleConnHeap reports the server heap (HeapInuse after GC) per idle
// client connection that has completed one RPC, for a plain grpc.Server on a
// TCP listener, for one behind memListener with conn, and for one behind
// memListener with a wrapper that hides ReadOnReady, which makes grpc-go pin
// a read buffer per connection, and for a whole xDS server. Target: wrapped
// and xds no more than plain.
//
// One measurement takes about a second; run with -benchtime=1x for one each.
func BenchmarkIdleConnHeap(b *testing.B) {
	if testing.Short() {
		b.Skip("opens thousands of connections; skipped in -short mode")
	}
	variants := []struct {
		name  string
		start func(b *testing.B, srv *grpc.Server) (addr string, stop func())
	}{
		{"plain", startPlainServer},
		{"wrapped", func(b *testing.B, srv *grpc.Server) (string, func()) {
			chain := &filterchain.FilterChain{}
			return startWrapped(b, srv, func(c *net.TCPConn) net.Conn {
				src, _ := addrPortOf(c.RemoteAddr())
				dst, _ := addrPortOf(c.LocalAddr())
				return newConn(c, chain, src, dst, func() {})
			})
		}},
		{"xds", startXDSForHeap},
		{"wrappedWithoutReadOnReady", func(b *testing.B, srv *grpc.Server) (string, func()) {
			return startWrapped(b, srv, func(c *net.TCPConn) net.Conn { return opaqueConn{c} })
		}},
	}
	// Warm up once so that process-wide first-use allocations (gRPC's buffer
	// pools, codec state) do not land in the first variant's figure.
	measureIdleConnHeap(b, startPlainServer, 50)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var total float64
			var runs int
			for b.Loop() {
				total += measureIdleConnHeap(b, v.start, idleConns)
				runs++
			}
			b.ReportMetric(total/float64(runs), "heap-B/idle-conn")
		})
	}
}

// opaqueConn is a connection wrapper that, like most, shows gRPC neither a
// *net.TCPConn nor a ReadOnReady method.
type opaqueConn struct{ net.Conn }

func startPlainServer(b *testing.B, srv *grpc.Server) (string, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		srv.Serve(lis)
		close(done)
	}()
	return lis.Addr().String(), func() { srv.Stop(); <-done }
}

func startWrapped(b *testing.B, srv *grpc.Server, wrap func(*net.TCPConn) net.Conn) (string, func()) {
	s := startWrappedServer(b, srv, wrap)
	return s.addr, func() { s.stop() }
}

// measureIdleConnHeap starts a server with start, has a child process open
// n connections to it that each complete one RPC and then stay idle,
// and returns the growth of the server process's HeapInuse per connection.
func measureIdleConnHeap(b *testing.B, start func(*testing.B, *grpc.Server) (string, func()), n int) float64 {
	b.StopTimer()
	defer b.StartTimer()
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, testService{})
	addr, stop := start(b, srv)
	defer stop()
	before := heapInuseAfterGC()
	b.StartTimer()

	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleClientsHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), idleClientsTargetEnv+"="+addr, idleClientsCountEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stdin.Close() // tells the child to close its connections and exit
		io.Copy(io.Discard, stdout)
		if err := cmd.Wait(); err != nil {
			b.Errorf("idle clients process: %v", err)
		}
	}()
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != idleClientsReady {
	}
	if lines.Err() != nil || lines.Text() != idleClientsReady {
		b.Fatalf("idle clients process ended before its clients were ready (%v)", lines.Err())
	}
	b.StopTimer()

	// The child has its responses; give the server's handlers a moment to
	// finish so that every connection is idle.
	time.Sleep(200 * time.Millisecond)
	after := heapInuseAfterGC()
	return (float64(after) - float64(before)) / float64(n)
}

func heapInuseAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestIdleClientsHelper is the client side of BenchmarkIdleConnHeap, run in
// a child process; in a normal test run it skips. It opens the requested
// number of connections, completes one RPC on each, prints idleClientsReady
// and keeps them open until its standard input is closed.
func TestIdleClientsHelper(t *testing.T) {
	target := os.Getenv(idleClientsTargetEnv)
	if target == "" {
		t.Skip("runs only as the child process of BenchmarkIdleConnHeap")
	}
	n, err := strconv.Atoi(os.Getenv(idleClientsCountEnv))
	if err != nil {
		t.Fatalf("bad %s: %v", idleClientsCountEnv, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*defaultTestTimeout)
	defer cancel()

	ccs := make([]*grpc.ClientConn, n)
	defer func() {
		for _, cc := range ccs {
			if cc != nil {
				cc.Close()
			}
		}
	}()
	var wg sync.WaitGroup
	const workers = 16
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					errs <- err
					return
				}
				ccs[i] = cc
				if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 10}); err != nil {
					errs <- fmt.Errorf("connection %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fmt.Println(idleClientsReady)
	io.Copy(io.Discard, os.Stdin)
}
