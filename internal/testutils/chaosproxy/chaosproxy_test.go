package chaosproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const (
	timeout      = 5 * time.Second
	shortTimeout = 200 * time.Millisecond
)

// upstream is a TCP server on loopback that runs handle on every accepted
// connection; it is stopped at cleanup, waiting for its goroutines.
type upstream struct {
	lis      net.Listener
	accepted atomic.Int32
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func startUpstream(t *testing.T, handle func(net.Conn)) *upstream {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{lis: lis}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			u.accepted.Add(1)
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func echo(c net.Conn) { io.Copy(c, c) }

// responder answers every byte it reads with size bytes.
func responder(size int) func(net.Conn) {
	return func(c net.Conn) {
		resp := bytes.Repeat([]byte{'r'}, size)
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	}
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), timeout)
	if err != nil {
		t.Fatalf("dial %s: %v", p.Addr(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back (from an echo upstream).
func roundTrip(c net.Conn, msg string) error {
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	return expectRead(c, msg)
}

func expectRead(c net.Conn, want string) error {
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != want {
		return errors.New("read " + string(got) + ", want " + want)
	}
	return nil
}

// expectSilence fails t if c yields a byte (or ends) within shortTimeout.
func expectSilence(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(shortTimeout))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, 1)
	n, err := c.Read(b)
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a black-holed connection: %d bytes, %v; want a timeout", n, err)
	}
}

// expectClosed fails t unless c ends (EOF or reset) without a byte.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(timeout))
	b := make([]byte, 1)
	n, err := c.Read(b)
	if n > 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %d bytes, %v; want the connection closed", n, err)
	}
}

// expectRefused fails t unless a connection to p is refused: the dial fails
// or the connection ends without a byte.
func expectRefused(t *testing.T, p *Proxy) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), timeout)
	if err != nil {
		return // reset before connect returned
	}
	defer c.Close()
	expectClosed(t, c)
}

func TestForwardsBothWays(t *testing.T) {
	testutils.CheckGoroutines(t)
	u := startUpstream(t, echo)
	p := newProxy(t, u.lis.Addr().String())
	a, b := dial(t, p), dial(t, p)
	for i := range 3 {
		if err := roundTrip(a, "hello"); err != nil {
			t.Fatalf("a, round %d: %v", i, err)
		}
		if err := roundTrip(b, "world"); err != nil {
			t.Fatalf("b, round %d: %v", i, err)
		}
	}
	big := string(bytes.Repeat([]byte("0123456789"), 20000)) // more than one read
	done := make(chan error, 1)
	go func() { _, err := a.Write([]byte(big)); done <- err }()
	if err := expectRead(a, big); err != nil {
		t.Fatalf("big round trip: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := u.accepted.Load(); got != 2 {
		t.Errorf("upstream accepted %d connections, want 2", got)
	}
}

func TestCutClosesAndRefusesUntilRestore(t *testing.T) {
	testutils.CheckGoroutines(t)
	u := startUpstream(t, echo)
	p := newProxy(t, u.lis.Addr().String())
	a := dial(t, p)
	if err := roundTrip(a, "x"); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	expectClosed(t, a)
	for range 3 {
		expectRefused(t, p)
	}
	if got := u.accepted.Load(); got != 1 {
		t.Errorf("upstream accepted %d connections, want 1 (none while cut)", got)
	}
	p.Restore()
	if err := roundTrip(dial(t, p), "y"); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

func TestBlackHoleHoldsBytesUntilRestore(t *testing.T) {
	testutils.CheckGoroutines(t)
	u := startUpstream(t, echo)
	p := newProxy(t, u.lis.Addr().String())
	a := dial(t, p)
	if err := roundTrip(a, "x"); err != nil {
		t.Fatal(err)
	}
	p.BlackHole()
	if _, err := a.Write([]byte("held-a")); err != nil {
		t.Fatal(err)
	}
	b := dial(t, p) // accepted, not forwarded
	if _, err := b.Write([]byte("held-b")); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, a)
	expectSilence(t, b)
	if got := u.accepted.Load(); got != 1 {
		t.Errorf("upstream accepted %d connections, want 1 (none while black-holed)", got)
	}
	p.Restore()
	if err := expectRead(a, "held-a"); err != nil {
		t.Errorf("existing connection after Restore: %v", err)
	}
	if err := expectRead(b, "held-b"); err != nil {
		t.Errorf("black-holed new connection after Restore: %v", err)
	}
}

func TestCutThenBlackHoleHangsReconnections(t *testing.T) {
	testutils.CheckGoroutines(t)
	u := startUpstream(t, echo)
	p := newProxy(t, u.lis.Addr().String())
	a := dial(t, p)
	if err := roundTrip(a, "x"); err != nil { // a is accepted before the Cut
		t.Fatal(err)
	}
	p.Cut()
	p.BlackHole()
	expectClosed(t, a)
	b := dial(t, p)
	if _, err := b.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, b)
	p.Restore()
	if err := expectRead(b, "z"); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

func TestCutDuringBlackHoleClosesHeldConnections(t *testing.T) {
	testutils.CheckGoroutines(t)
	u := startUpstream(t, echo)
	p := newProxy(t, u.lis.Addr().String())
	a := dial(t, p)
	if err := roundTrip(a, "x"); err != nil {
		t.Fatal(err)
	}
	p.BlackHole()
	b := dial(t, p)
	a.Write([]byte("held"))
	b.Write([]byte("held"))
	expectSilence(t, a)
	p.Cut()
	expectClosed(t, a)
	expectClosed(t, b)
}

func TestResetMidResponse(t *testing.T) {
	testutils.CheckGoroutines(t)
	const size = 1000
	u := startUpstream(t, responder(size))
	p := newProxy(t, u.lis.Addr().String())
	a, b := dial(t, p), dial(t, p)
	want := string(bytes.Repeat([]byte{'r'}, size))
	for _, c := range []net.Conn{a, b} { // both connected upstream
		c.Write([]byte{'?'})
		if err := expectRead(c, want); err != nil {
			t.Fatal(err)
		}
	}

	p.ResetMidResponse()
	a.Write([]byte{'?'})
	a.SetReadDeadline(time.Now().Add(timeout))
	got, err := io.ReadAll(a)
	if len(got) >= size {
		t.Errorf("read %d bytes of the reset response, want fewer than %d", len(got), size)
	}
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read of the reset response ended with %v, want a connection reset", err)
	}
	if got := p.Resets(); got != 1 {
		t.Errorf("Resets() = %d, want 1", got)
	}

	// One-shot: the other connection and new ones are unaffected.
	b.Write([]byte{'?'})
	if err := expectRead(b, want); err != nil {
		t.Errorf("other connection after the reset: %v", err)
	}
	c := dial(t, p)
	c.Write([]byte{'?'})
	if err := expectRead(c, want); err != nil {
		t.Errorf("new connection after the reset: %v", err)
	}
	if got := p.Resets(); got != 1 {
		t.Errorf("Resets() = %d, want 1", got)
	}
}

func TestUnreachableTargetClosesConnection(t *testing.T) {
	testutils.CheckGoroutines(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := lis.Addr().String()
	lis.Close() // nothing listens there now
	p := newProxy(t, target)
	expectRefused(t, p)
}

func TestCloseStopsEverything(t *testing.T) {
	testutils.CheckGoroutines(t)
	u := startUpstream(t, echo)
	p, err := New(u.lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := dial(t, p)
	if err := roundTrip(a, "x"); err != nil {
		t.Fatal(err)
	}
	p.BlackHole()
	b := dial(t, p) // waiting for the gate
	b.Write([]byte("held"))
	a.Write([]byte("held")) // a pipe waiting for the gate
	expectSilence(t, a)

	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(timeout):
		t.Fatal("Close did not return")
	}
	expectClosed(t, a)
	expectClosed(t, b)
	if _, err := net.DialTimeout("tcp", p.Addr(), timeout); err == nil {
		t.Error("dial after Close succeeded, want it refused")
	}
	// Everything is a no-op now.
	p.Cut()
	p.BlackHole()
	p.ResetMidResponse()
	p.Restore()
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// goleak (TestMain) checks that no goroutine is left.
}
