package grpccompat_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"
)

// recordingConn is a server-side connection that records what grpc-go
// calls on it, and offers ReadOnReady as internal/server/connserver's
// connections do.
type recordingConn struct {
	net.Conn

	mu            sync.Mutex
	calls         []string  // "SetDeadline", "Read", "Write", "ReadOnReady", in order
	firstDeadline time.Time // the first SetDeadline's argument
}

func (c *recordingConn) record(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, call)
}

func (c *recordingConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	if c.firstDeadline.IsZero() {
		c.firstDeadline = t
	}
	c.mu.Unlock()
	c.record("SetDeadline")
	return c.Conn.SetDeadline(t)
}

func (c *recordingConn) Read(b []byte) (int, error) {
	c.record("Read")
	return c.Conn.Read(b)
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.record("Write")
	return c.Conn.Write(b)
}

// ReadOnReady has the signature of grpc-go's readyreader.Reader (an
// internal interface grpc-go looks for on a net.Conn).
func (c *recordingConn) ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	c.record("ReadOnReady")
	b := pool.Get(bufSize)
	n, err := c.Conn.Read(*b)
	if n == 0 {
		pool.Put(b)
		return nil, 0, err
	}
	return b, n, err
}

func (c *recordingConn) snapshot() ([]string, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...), c.firstDeadline
}

// recordingListener hands out accepted connections as recordingConns.
type recordingListener struct {
	net.Listener
	conns chan *recordingConn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recordingConn{Conn: c}
	l.conns <- rc
	return rc, nil
}

// serveOne serves a grpc.Server on loopback, makes one RPC to it, and
// returns the server side of the connection it used.
func serveOne(t *testing.T) *recordingConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: lis, conns: make(chan *recordingConn, 10)}
	srv := grpc.NewServer(grpc.Creds(insecure.NewCredentials()))
	testgrpc.RegisterTestServiceServer(srv, emptyService{})
	served := make(chan struct{})
	go func() {
		srv.Serve(rl)
		close(served)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	return <-rl.conns
}

type emptyService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (emptyService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// TestCanaryReadOnReady: the grpc-go in this build reads a server
// connection that offers ReadOnReady through it. If this fails, grpc-go
// changed how it finds its pooled reader: internal/server/connserver's
// ReadOnReady is then never called, and every idle connection of the xDS
// server pins a read buffer again (more heap per connection than plain
// gRPC). Find grpc-go's new interface (internal/transport/readyreader in
// v1.85) and adapt connserver's conn.
func TestCanaryReadOnReady(t *testing.T) {
	c := serveOne(t)
	calls, _ := c.snapshot()
	n := 0
	for _, call := range calls {
		if call == "ReadOnReady" {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("grpc-go never called ReadOnReady on the server's connection (calls: %v): see this test's comment", calls)
	}
}

// TestCanaryHandshakeDeadlineFirst: the first thing the grpc-go in this
// build does with an accepted connection is SetDeadline with its handshake
// deadline, before any read or write. A drain of the xDS server takes that
// call as the sign that gRPC serves the connection (it then GOAWAYs it
// rather than waiting, with a 1 s fallback). If this fails, drains of
// connections gRPC has just accepted wait for the fallback instead: adapt
// the start signal in internal/server/connserver (Conn.SetDeadline).
func TestCanaryHandshakeDeadlineFirst(t *testing.T) {
	c := serveOne(t)
	calls, first := c.snapshot()
	if len(calls) == 0 || calls[0] != "SetDeadline" {
		t.Fatalf("grpc-go's first call on an accepted connection is not SetDeadline (calls: %v): see this test's comment", calls)
	}
	if first.IsZero() || !first.After(time.Now().Add(-time.Minute)) {
		t.Fatalf("grpc-go's first SetDeadline is %v, want the handshake deadline (in the future when set): see this test's comment", first)
	}
}
