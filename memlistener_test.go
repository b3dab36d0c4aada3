package xds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"

	"github.com/proxyless-grpc/xds/filterchain"
)

// newTestMemListener returns a memListener that is closed at cleanup.
func newTestMemListener(t *testing.T) *memListener {
	t.Helper()
	l := newMemListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1234})
	t.Cleanup(func() { l.Close() })
	return l
}

// newRecordedPipe returns one end of a net.Pipe that counts its Close calls;
// both ends are closed at cleanup.
func newRecordedPipe(t *testing.T) *closeRecorder {
	t.Helper()
	a, _ := pipeConn(t)
	return &closeRecorder{Conn: a}
}

func TestMemListenerAcceptOrder(t *testing.T) {
	l := newTestMemListener(t)
	var pushed []net.Conn
	for range 5 {
		c := newRecordedPipe(t)
		if err := l.push(c); err != nil {
			t.Fatalf("push() = %v", err)
		}
		pushed = append(pushed, c)
	}
	for i, want := range pushed {
		got, err := l.Accept()
		if err != nil || got != want {
			t.Fatalf("Accept() #%d = %p, %v, want connection pushed #%d (%p)", i, got, err, i, want)
		}
	}
	// Interleaved pushes and accepts reuse the queue and stay in order.
	for i := range 200 {
		a, b := newRecordedPipe(t), newRecordedPipe(t)
		l.push(a)
		l.push(b)
		if got, _ := l.Accept(); got != a {
			t.Fatalf("round %d: first Accept() = %p, want %p", i, got, a)
		}
		c := newRecordedPipe(t)
		l.push(c)
		if got, _ := l.Accept(); got != b {
			t.Fatalf("round %d: second Accept() = %p, want %p", i, got, b)
		}
		if got, _ := l.Accept(); got != c {
			t.Fatalf("round %d: third Accept() = %p, want %p", i, got, c)
		}
	}
	if got, want := l.Addr().String(), "127.0.0.1:1234"; got != want {
		t.Errorf("Addr() = %v, want %v", got, want)
	}
}

func TestMemListenerAcceptWaitsForPush(t *testing.T) {
	l := newTestMemListener(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	select {
	case c := <-accepted:
		t.Fatalf("Accept() on an empty listener returned %v", c)
	case <-time.After(20 * time.Millisecond):
	}
	c := newRecordedPipe(t)
	l.push(c)
	select {
	case got := <-accepted:
		if got != c {
			t.Fatalf("Accept() = %p, want the pushed connection %p", got, c)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("Accept() did not return the pushed connection")
	}
}

func TestMemListenerClose(t *testing.T) {
	l := newTestMemListener(t)
	accepted := newRecordedPipe(t)
	l.push(accepted)
	if _, err := l.Accept(); err != nil {
		t.Fatal(err)
	}
	queued := []*closeRecorder{newRecordedPipe(t), newRecordedPipe(t)}
	for _, c := range queued {
		l.push(c)
	}

	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close() = %v, want nil", err)
	}
	for i, c := range queued {
		if n := c.closes.Load(); n != 1 {
			t.Errorf("Close calls on queued connection #%d = %d, want 1", i, n)
		}
	}
	if n := accepted.closes.Load(); n != 0 {
		t.Errorf("Close calls on the accepted connection = %d, want 0 (Accept's caller owns it)", n)
	}

	if c, err := l.Accept(); c != nil || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept() after Close = %v, %v, want nil, net.ErrClosed", c, err)
	}
	late := newRecordedPipe(t)
	if err := l.push(late); !errors.Is(err, errListenerClosed) {
		t.Errorf("push() after Close = %v, want errListenerClosed", err)
	}
	if n := late.closes.Load(); n != 0 {
		t.Errorf("Close calls on a connection refused by push = %d, want 0 (the caller keeps it)", n)
	}
}

func TestMemListenerCloseUnblocksAccept(t *testing.T) {
	l := newTestMemListener(t)
	const waiters = 3
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := l.Accept()
			errs <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	l.Close()
	for range waiters {
		select {
		case err := <-errs:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept() unblocked by Close = %v, want net.ErrClosed", err)
			}
		case <-time.After(defaultTestTimeout):
			t.Fatal("Close did not unblock Accept")
		}
	}
}

func TestMemListenerConcurrent(t *testing.T) {
	l := newTestMemListener(t)
	const pushers, perPusher, acceptors = 4, 250, 3
	conns := make([]net.Conn, pushers*perPusher)
	for i := range conns {
		conns[i] = newRecordedPipe(t)
	}

	var mu sync.Mutex
	seen := make(map[net.Conn]int)
	var accepting sync.WaitGroup
	for range acceptors {
		accepting.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				seen[c]++
				mu.Unlock()
			}
		})
	}
	var pushing sync.WaitGroup
	for p := range pushers {
		pushing.Go(func() {
			for _, c := range conns[p*perPusher : (p+1)*perPusher] {
				if err := l.push(c); err != nil {
					t.Errorf("push() = %v", err)
				}
			}
		})
	}
	pushing.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == len(conns) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("accepted %d of %d pushed connections", n, len(conns))
		}
		time.Sleep(time.Millisecond)
	}
	l.Close()
	accepting.Wait()
	for c, n := range seen {
		if n != 1 {
			t.Errorf("connection %p accepted %d times, want 1", c, n)
		}
	}
}

// testService answers UnaryCall with a payload of the requested size, so
// RPCs move enough bytes to need several reads.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (testService) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	body := bytes.Repeat([]byte{'r'}, int(req.GetResponseSize()))
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: body}}, nil
}

// wrappedServer runs a grpc.Server the way the xDS server does: connections
// accepted from a real loopback TCP listener are wrapped and pushed to a
// memListener that the grpc.Server serves.
type wrappedServer struct {
	addr string // of the TCP listener

	srv       *grpc.Server
	tcp       net.Listener
	mem       *memListener
	serveErr  chan error
	accepting sync.WaitGroup
}

// startWrappedServer serves srv on 127.0.0.1, wrapping every accepted
// connection with wrap (which takes ownership of it). Stop it with stop.
func startWrappedServer(tb testing.TB, srv *grpc.Server, wrap func(*net.TCPConn) net.Conn) *wrappedServer {
	tb.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &wrappedServer{
		addr:     tcp.Addr().String(),
		srv:      srv,
		tcp:      tcp,
		mem:      newMemListener(tcp.Addr()),
		serveErr: make(chan error, 1),
	}
	s.accepting.Go(func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			wc := wrap(c.(*net.TCPConn))
			if err := s.mem.push(wc); err != nil {
				wc.Close()
			}
		}
	})
	go func() { s.serveErr <- srv.Serve(s.mem) }()
	return s
}

// stop stops the grpc.Server and the TCP listener and returns what Serve
// returned.
func (s *wrappedServer) stop() error {
	s.srv.Stop()
	s.tcp.Close()
	s.accepting.Wait()
	return <-s.serveErr
}

// chainCheckingCreds are insecure credentials that, like the xDS server's
// credentials, find the connection's filter chain through a FilterChain
// method on the net.Conn they get.
type chainCheckingCreds struct {
	credentials.TransportCredentials
	want  *filterchain.FilterChain
	conns atomic.Int32 // handshakes that found want
}

func (c *chainCheckingCreds) ServerHandshake(rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	fc, ok := rawConn.(interface {
		FilterChain() *filterchain.FilterChain
	})
	if !ok || fc.FilterChain() != c.want {
		return nil, nil, fmt.Errorf("server handshake on %T: filter chain not found", rawConn)
	}
	c.conns.Add(1)
	return c.TransportCredentials.ServerHandshake(rawConn)
}

func TestGRPCServerOnMemListener(t *testing.T) {
	chain := &filterchain.FilterChain{}
	creds := &chainCheckingCreds{TransportCredentials: insecure.NewCredentials(), want: chain}
	srv := grpc.NewServer(grpc.Creds(creds))
	testgrpc.RegisterTestServiceServer(srv, testService{})
	var closed atomic.Int32
	var reads atomic.Int64
	s := startWrappedServer(t, srv, func(c *net.TCPConn) net.Conn {
		src, _ := addrPortOf(c.RemoteAddr())
		dst, _ := addrPortOf(c.LocalAddr())
		return &readCountingConn{conn: newConn(c, chain, src, dst, func() { closed.Add(1) }), reads: &reads}
	})
	stopped := false
	defer func() {
		if !stopped {
			s.stop()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	const clients = 2
	for i := range clients {
		cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		client := testgrpc.NewTestServiceClient(cc)
		for _, size := range []int{0, 10, 100 << 10, 1 << 20} {
			req := &testgrpc.SimpleRequest{
				ResponseSize: int32(size),
				Payload:      &testgrpc.Payload{Body: make([]byte, size)},
			}
			resp, err := client.UnaryCall(ctx, req)
			if err != nil {
				t.Fatalf("client %d: UnaryCall(%d bytes) = %v", i, size, err)
			}
			if got := len(resp.GetPayload().GetBody()); got != size {
				t.Fatalf("client %d: UnaryCall returned %d bytes, want %d", i, got, size)
			}
		}
		cc.Close()
	}
	if reads.Load() == 0 {
		t.Error("grpc.Server never called ReadOnReady, want all reads through it")
	}
	if got := creds.conns.Load(); got != clients {
		t.Errorf("handshakes that found the filter chain = %d, want %d", got, clients)
	}

	// The server closes each connection once its client has gone.
	for closed.Load() != clients {
		if ctx.Err() != nil {
			t.Fatalf("onClose calls after the clients closed = %d, want %d", closed.Load(), clients)
		}
		time.Sleep(time.Millisecond)
	}
	stopped = true
	if err := s.stop(); err != nil {
		t.Errorf("Serve() after Stop = %v, want nil", err)
	}
	if got := closed.Load(); got != clients {
		t.Errorf("onClose calls after Stop = %d, want %d", got, clients)
	}
}

// readCountingConn counts the ReadOnReady calls grpc-go makes on a conn.
type readCountingConn struct {
	*conn
	reads *atomic.Int64
}

func (c *readCountingConn) ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	c.reads.Add(1)
	return c.conn.ReadOnReady(bufSize, pool)
}
