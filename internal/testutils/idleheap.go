package testutils

import (
	"bufio"
	"context"
	"fmt"
	"io"
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
)

// The idle-connection heap benchmarks run their clients in a child process
// (the test binary re-run as TestIdleClientsHelper, which calls IdleClients)
// so that the heap they measure is the server's alone. These variables tell
// the child what to do.
const (
	idleClientsTargetEnv = "XDS_TEST_IDLE_CLIENTS_TARGET"
	idleClientsCountEnv  = "XDS_TEST_IDLE_CLIENTS_COUNT"
	idleClientsReady     = "idle clients ready"
)

// MeasureIdleConnHeap starts a server with start (which returns its address
// and how to stop it), has a child process open n connections to it that
// each complete one grpc.testing.TestService/UnaryCall and then stay idle,
// and returns the growth of this process's HeapInuse (after GC) per
// connection. The test binary must have a test named TestIdleClientsHelper
// that calls IdleClients. The benchmark timer runs only while the clients
// connect.
func MeasureIdleConnHeap(b *testing.B, start func(b *testing.B) (addr string, stop func()), n int) float64 {
	b.StopTimer()
	defer b.StartTimer()
	addr, stop := start(b)
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

// IdleClients is the client side of MeasureIdleConnHeap, run in a child
// process; in a normal test run (without its environment) it skips t. It
// opens the requested number of connections, completes one RPC on each,
// prints a line saying so and keeps them open until its standard input is
// closed.
func IdleClients(t *testing.T) {
	target := os.Getenv(idleClientsTargetEnv)
	if target == "" {
		t.Skip("runs only as the child process of an idle-connection heap benchmark")
	}
	n, err := strconv.Atoi(os.Getenv(idleClientsCountEnv))
	if err != nil {
		t.Fatalf("bad %s: %v", idleClientsCountEnv, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
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
