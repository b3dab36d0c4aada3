package connserver

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/mem"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

const defaultTestTimeout = 10 * time.Second

// countingPool is a mem.BufferPool that counts the buffers handed out and not
// yet returned, to check that ReadOnReady holds none while it waits and leaks
// none on errors. Safe for concurrent use.
type countingPool struct {
	out atomic.Int64
}

func (p *countingPool) Get(n int) *[]byte {
	p.out.Add(1)
	b := make([]byte, n)
	return &b
}

func (p *countingPool) Put(*[]byte) { p.out.Add(-1) }

// onePool is a mem.BufferPool holding one reusable buffer, so that an
// allocation test measures ReadOnReady and not the pool. Not safe for
// concurrent use.
type onePool struct{ buf []byte }

func (p *onePool) Get(n int) *[]byte {
	if cap(p.buf) < n {
		p.buf = make([]byte, n)
	}
	p.buf = p.buf[:n]
	return &p.buf
}

func (p *onePool) Put(*[]byte) {}

// tcpPair returns both ends of a fresh loopback TCP connection: the accepted
// end, to wrap, and the dialed end. Both are closed at cleanup.
func tcpPair(t testing.TB) (accepted, dialed *net.TCPConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	d, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	a, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a.(*net.TCPConn), d.(*net.TCPConn)
}

// wrapTCP wraps the accepted end of c the way the server does.
func wrapTCP(t testing.TB, c *net.TCPConn, onClose func()) *conn {
	t.Helper()
	src, ok := AddrPortOf(c.RemoteAddr())
	if !ok {
		t.Fatalf("AddrPortOf(%v) failed", c.RemoteAddr())
	}
	dst, ok := AddrPortOf(c.LocalAddr())
	if !ok {
		t.Fatalf("AddrPortOf(%v) failed", c.LocalAddr())
	}
	return newConn(c, &filterchain.FilterChain{}, src, dst, onClose)
}

// readOnReadyResult is one ReadOnReady return, copied out of the buffer.
type readOnReadyResult struct {
	data []byte
	err  error
}

// readOnReadyAsync runs one ReadOnReady in a goroutine, returns the buffer to
// pool and delivers the result on the returned channel.
func readOnReadyAsync(c *conn, bufSize int, pool mem.BufferPool) <-chan readOnReadyResult {
	ch := make(chan readOnReadyResult, 1)
	go func() {
		buf, n, err := c.ReadOnReady(bufSize, pool)
		var data []byte
		if buf != nil {
			data = bytes.Clone((*buf)[:n])
			pool.Put(buf)
		}
		ch <- readOnReadyResult{data, err}
	}()
	return ch
}

func TestConnReadOnReadyTCPRoundTrip(t *testing.T) {
	a, d := tcpPair(t)
	c := wrapTCP(t, a, nil)
	pool := &countingPool{}

	// An idle read waits for data without holding a pooled buffer.
	res := readOnReadyAsync(c, 64, pool)
	waitReadParked(t)
	if got := pool.out.Load(); got != 0 {
		t.Errorf("buffers held by a ReadOnReady waiting on an idle connection = %d, want 0", got)
	}
	if _, err := d.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil || string(r.data) != "hello" {
		t.Fatalf("ReadOnReady = %q, %v, want %q, nil", r.data, r.err, "hello")
	}
	if c.raw == nil {
		t.Fatal("ReadOnReady on a *net.TCPConn took the blocking fallback, want the RawConn path")
	}

	// Data longer than the buffer arrives over several reads, in order.
	want := bytes.Repeat([]byte("0123456789abcdef"), 1000)
	go func() { d.Write(want) }()
	var got []byte
	for len(got) < len(want) {
		buf, n, err := c.ReadOnReady(100, pool)
		if err != nil {
			t.Fatalf("ReadOnReady after %d bytes: %v", len(got), err)
		}
		if n == 0 || n > 100 || len(*buf) != 100 {
			t.Fatalf("ReadOnReady(100) = buffer of %d, n = %d", len(*buf), n)
		}
		got = append(got, (*buf)[:n]...)
		pool.Put(buf)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("ReadOnReady delivered %d bytes that differ from the %d written", len(got), len(want))
	}
	if n := pool.out.Load(); n != 0 {
		t.Errorf("buffers not returned to the pool = %d, want 0", n)
	}
}

func TestConnReadOnReadyTCPEOF(t *testing.T) {
	a, d := tcpPair(t)
	c := wrapTCP(t, a, nil)
	pool := &countingPool{}

	if _, err := d.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	d.Close()
	buf, n, err := c.ReadOnReady(64, pool)
	if err != nil || string((*buf)[:n]) != "last" {
		t.Fatalf("ReadOnReady = %d bytes, %v, want %q, nil", n, err, "last")
	}
	pool.Put(buf)
	buf, n, err = c.ReadOnReady(64, pool)
	if buf != nil || n != 0 || err != io.EOF {
		t.Fatalf("ReadOnReady after the peer closed = %v, %d, %v, want nil, 0, io.EOF", buf, n, err)
	}
	if n := pool.out.Load(); n != 0 {
		t.Errorf("buffers not returned to the pool = %d, want 0", n)
	}
}

func TestConnReadOnReadyTCPDeadline(t *testing.T) {
	a, d := tcpPair(t)
	c := wrapTCP(t, a, nil)
	pool := &countingPool{}

	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	res := readOnReadyAsync(c, 64, pool)
	select {
	case r := <-res:
		var ne net.Error
		if !errors.Is(r.err, os.ErrDeadlineExceeded) || !errors.As(r.err, &ne) || !ne.Timeout() {
			t.Fatalf("ReadOnReady past the read deadline = %q, %v, want a timeout error", r.data, r.err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("ReadOnReady ignored the read deadline")
	}
	if n := pool.out.Load(); n != 0 {
		t.Errorf("buffers not returned to the pool = %d, want 0", n)
	}

	// Clearing the deadline makes the connection usable again.
	c.SetReadDeadline(time.Time{})
	d.Write([]byte("x"))
	if r := <-readOnReadyAsync(c, 64, pool); r.err != nil || string(r.data) != "x" {
		t.Fatalf("ReadOnReady after clearing the deadline = %q, %v, want %q, nil", r.data, r.err, "x")
	}
}

func TestConnReadOnReadyTCPClose(t *testing.T) {
	a, _ := tcpPair(t)
	c := wrapTCP(t, a, nil)
	pool := &countingPool{}

	// Close unblocks a waiting read, and later reads fail too.
	res := readOnReadyAsync(c, 64, pool)
	waitReadParked(t)
	if err := c.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	select {
	case r := <-res:
		if !errors.Is(r.err, net.ErrClosed) {
			t.Fatalf("ReadOnReady during Close = %q, %v, want net.ErrClosed", r.data, r.err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("Close did not unblock ReadOnReady")
	}
	if buf, _, err := c.ReadOnReady(64, pool); buf != nil || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadOnReady after Close = %v, %v, want nil, net.ErrClosed", buf, err)
	}
	if n := pool.out.Load(); n != 0 {
		t.Errorf("buffers not returned to the pool = %d, want 0", n)
	}
}

func TestConnReadOnReadyTCPAllocs(t *testing.T) {
	a, d := tcpPair(t)
	c := wrapTCP(t, a, nil)
	pool := &onePool{}
	msg := []byte("ping")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := d.Write(msg); err != nil {
			t.Fatal(err)
		}
		buf, n, err := c.ReadOnReady(64, pool)
		if err != nil || n == 0 {
			t.Fatalf("ReadOnReady = %d, %v", n, err)
		}
		pool.Put(buf)
	})
	if allocs != 0 {
		t.Errorf("allocations per Write + ReadOnReady = %v, want 0", allocs)
	}
}

// pipeConn returns both ends of a net.Pipe, closed at cleanup. A pipe cannot
// be polled, so a conn around it takes the blocking fallback.
func pipeConn(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestConnReadOnReadyFallback(t *testing.T) {
	a, b := pipeConn(t)
	c := newConn(a, nil, netip.AddrPort{}, netip.AddrPort{}, nil)
	pool := &countingPool{}

	go b.Write([]byte("over a pipe"))
	buf, n, err := c.ReadOnReady(64, pool)
	if err != nil || string((*buf)[:n]) != "over a pipe" {
		t.Fatalf("ReadOnReady = %d bytes, %v, want %q, nil", n, err, "over a pipe")
	}
	pool.Put(buf)

	b.Close()
	if buf, n, err := c.ReadOnReady(64, pool); buf != nil || n != 0 || err != io.EOF {
		t.Fatalf("ReadOnReady after the peer closed = %v, %d, %v, want nil, 0, io.EOF", buf, n, err)
	}
	c.Close()
	if buf, _, err := c.ReadOnReady(64, pool); buf != nil || !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("ReadOnReady after Close = %v, %v, want nil, io.ErrClosedPipe", buf, err)
	}
	if n := pool.out.Load(); n != 0 {
		t.Errorf("buffers not returned to the pool = %d, want 0", n)
	}
}

func TestConnReadOnReadyFallbackDeadline(t *testing.T) {
	a, _ := pipeConn(t)
	c := newConn(a, nil, netip.AddrPort{}, netip.AddrPort{}, nil)
	pool := &countingPool{}
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if buf, _, err := c.ReadOnReady(64, pool); buf != nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("ReadOnReady past the read deadline = %v, %v, want nil, os.ErrDeadlineExceeded", buf, err)
	}
	if n := pool.out.Load(); n != 0 {
		t.Errorf("buffers not returned to the pool = %d, want 0", n)
	}
}

// closeRecorder is a net.Conn that counts its Close calls.
type closeRecorder struct {
	net.Conn
	closes atomic.Int32
}

func (r *closeRecorder) Close() error {
	r.closes.Add(1)
	return r.Conn.Close()
}

func TestConnCloseCallsOnCloseOnce(t *testing.T) {
	a, _ := pipeConn(t)
	under := &closeRecorder{Conn: a}
	var calls atomic.Int32
	var onCloseDone atomic.Bool
	c := newConn(under, nil, netip.AddrPort{}, netip.AddrPort{}, func() {
		calls.Add(1)
		if n := under.closes.Load(); n != 0 {
			t.Errorf("onClose ran after %d Close calls on the underlying connection, want before", n)
		}
		time.Sleep(20 * time.Millisecond) // give the other Closes a chance to overtake
		onCloseDone.Store(true)
	})

	const closers = 8
	var wg sync.WaitGroup
	for range closers {
		wg.Go(func() {
			c.Close()
			if !onCloseDone.Load() {
				t.Error("Close returned before onClose finished")
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("onClose calls after %d concurrent Closes = %d, want 1", closers, n)
	}
	if n := under.closes.Load(); n != closers {
		t.Errorf("underlying Close calls = %d, want %d", n, closers)
	}
}

func TestConnCloseNilOnClose(t *testing.T) {
	a, _ := tcpPair(t)
	c := wrapTCP(t, a, nil)
	if err := c.Close(); err != nil {
		t.Fatalf("first Close() = %v, want nil", err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close() = %v, want net.ErrClosed", err)
	}
}

func TestConnAccessors(t *testing.T) {
	a, d := tcpPair(t)
	chain := &filterchain.FilterChain{}
	src := netip.MustParseAddrPort("[::ffff:10.1.2.3]:4567")
	dst := netip.MustParseAddrPort("[2001:db8::1]:443")
	c := newConn(a, chain, src, dst, nil)

	// Credentials find the chain by asserting this interface on a net.Conn.
	var nc net.Conn = c
	fc, ok := nc.(interface {
		FilterChain() *filterchain.FilterChain
	})
	if !ok || fc.FilterChain() != chain {
		t.Errorf("FilterChain not reachable through the net.Conn")
	}
	if got, want := c.Source(), netip.MustParseAddrPort("10.1.2.3:4567"); got != want {
		t.Errorf("Source() = %v, want %v", got, want)
	}
	if got := c.Destination(); got != dst {
		t.Errorf("Destination() = %v, want %v", got, dst)
	}
	// The embedded connection's addresses show through.
	if got, want := c.RemoteAddr().String(), d.LocalAddr().String(); got != want {
		t.Errorf("RemoteAddr() = %v, want %v", got, want)
	}
	// conn must not expose the raw socket (a TLS layer on top could be bypassed).
	if _, ok := nc.(syscall.Conn); ok {
		t.Errorf("conn has a SyscallConn method")
	}

	c = wrapTCP(t, a, nil)
	if got, want := c.Source(), d.LocalAddr().(*net.TCPAddr).AddrPort(); got != want {
		t.Errorf("Source() of a loopback connection = %v, want %v", got, want)
	}
	if got, want := c.Destination(), d.RemoteAddr().(*net.TCPAddr).AddrPort(); got != want {
		t.Errorf("Destination() of a loopback connection = %v, want %v", got, want)
	}
}

func TestAddrPortOf(t *testing.T) {
	tests := []struct {
		desc   string
		addr   net.Addr
		want   netip.AddrPort
		wantOK bool
	}{
		{
			desc:   "IPv4",
			addr:   &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80},
			want:   netip.MustParseAddrPort("127.0.0.1:80"),
			wantOK: true,
		},
		{
			desc:   "IPv4-mapped IPv6 unmapped",
			addr:   net.TCPAddrFromAddrPort(netip.MustParseAddrPort("[::ffff:192.0.2.1]:8080")),
			want:   netip.MustParseAddrPort("192.0.2.1:8080"),
			wantOK: true,
		},
		{
			desc:   "IPv6",
			addr:   net.TCPAddrFromAddrPort(netip.MustParseAddrPort("[2001:db8::2]:443")),
			want:   netip.MustParseAddrPort("[2001:db8::2]:443"),
			wantOK: true,
		},
		{
			desc:   "IPv6 with zone",
			addr:   &net.TCPAddr{IP: netip.MustParseAddr("fe80::1").AsSlice(), Port: 1, Zone: "eth0"},
			want:   netip.MustParseAddrPort("[fe80::1%eth0]:1"),
			wantOK: true,
		},
		{desc: "TCPAddr without IP", addr: &net.TCPAddr{Port: 1}},
		{desc: "nil TCPAddr", addr: (*net.TCPAddr)(nil)},
		{desc: "UDPAddr", addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}},
		{desc: "pipe", addr: pipeAddr{}},
		{desc: "nil"},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			got, ok := AddrPortOf(test.addr)
			if got != test.want || ok != test.wantOK {
				t.Errorf("AddrPortOf(%v) = %v, %v, want %v, %v", test.addr, got, ok, test.want, test.wantOK)
			}
		})
	}
}

// pipeAddr is a net.Addr that is not an IP address.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// waitReadParked waits until a goroutine is parked in the network poller
// inside ReadOnReady: the read is waiting for data.
func waitReadParked(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	testutils.WaitFor(testutils.Context(t), t, "a ReadOnReady parked in the poller", func() error {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, ").ReadOnReady(") {
				return nil
			}
		}
		return errors.New("no goroutine waits in ReadOnReady")
	})
}
