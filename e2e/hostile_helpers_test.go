package e2e_test

// Helpers of the hostile-client tests (hostile_ext_test.go): raw TCP
// connections that send what a gRPC server does not expect, a canary
// client whose stream and RPCs must keep working, and goroutine and file
// descriptor counts.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"google.golang.org/grpc/codes"
)

// hostileKind is one misbehaving client: what it sends after connecting
// (nil: nothing).
type hostileKind struct {
	name    string
	payload []byte
}

// hostileKinds returns the misbehaving clients: garbage bytes, an HTTP/1.1
// request, a TLS ClientHello, and a client that never sends anything.
func hostileKinds(t *testing.T) []hostileKind {
	t.Helper()
	garbage := make([]byte, 1024)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(r.UintN(256))
	}
	return []hostileKind{
		{name: "garbage", payload: garbage},
		{name: "http1", payload: []byte("GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: hostile\r\nAccept: */*\r\n\r\n")},
		{name: "tls-client-hello", payload: hostileClientHello(t)},
		{name: "silent"},
	}
}

// hostileClientHello returns the first flight of a Go TLS client: a ClientHello
// record.
func hostileClientHello(t *testing.T) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(c1, &tls.Config{ServerName: "server.test", InsecureSkipVerify: true}).Handshake()
		c1.Close()
	}()
	c2.SetReadDeadline(time.Now().Add(defaultTestTimeout))
	buf := make([]byte, 64<<10)
	n, err := c2.Read(buf)
	c2.Close()
	<-done
	if err != nil || n < 5 || buf[0] != 0x16 {
		t.Fatalf("capturing a TLS ClientHello: read %d bytes (%x...), %v", n, buf[:min(n, 8)], err)
	}
	return buf[:n]
}

// hostileResult is how the server treated one hostile connection.
type hostileResult struct {
	read    int           // bytes the server wrote to it
	elapsed time.Duration // from the end of the payload to the close
}

// hostileConn connects to addr, sends k's payload and reads until the
// server closes the connection, waiting at most wait. It fails unless the
// server closes the connection (EOF, or a reset) in time.
func hostileConn(t *testing.T, addr net.Addr, k hostileKind, wait time.Duration) hostileResult {
	t.Helper()
	res, err := hostileConnErr(addr, k, wait)
	if err != nil {
		t.Fatalf("%s: %v", k.name, err)
	}
	return res
}

func hostileConnErr(addr net.Addr, k hostileKind, wait time.Duration) (hostileResult, error) {
	conn, err := net.DialTimeout("tcp", addr.String(), defaultTestTimeout)
	if err != nil {
		return hostileResult{}, fmt.Errorf("dial %v: %v", addr, err)
	}
	defer conn.Close()
	if len(k.payload) > 0 {
		// The server may close the connection before it has all of it.
		if _, err := conn.Write(k.payload); err != nil && !hostileIsReset(err) {
			return hostileResult{}, fmt.Errorf("write: %v", err)
		}
	}
	start := time.Now()
	conn.SetReadDeadline(start.Add(wait))
	var res hostileResult
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		res.read += n
		if err == nil {
			continue
		}
		res.elapsed = time.Since(start)
		if errors.Is(err, io.EOF) || hostileIsReset(err) {
			return res, nil
		}
		return res, fmt.Errorf("the server did not close the connection within %v (read %d bytes): %v", wait, res.read, err)
	}
}

func hostileIsReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// hostileCanary is a well-behaved client that must not notice hostile clients: a
// stream opened before them exchanges a message every few milliseconds, and
// a unary worker calls EmptyCall in a loop, until stop.
type hostileCanary struct {
	t      *testing.T
	st     *stream
	stopCh chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	errs     []error
	rpcs     int
	messages int
}

func startHostileCanary(ctx context.Context, t *testing.T, c *testClient) *hostileCanary {
	t.Helper()
	k := &hostileCanary{t: t, st: c.startStream(ctx, t), stopCh: make(chan struct{})}
	k.wg.Go(func() {
		for k.pause() {
			err := k.st.roundTrip()
			k.mu.Lock()
			k.messages++
			if err != nil {
				k.errs = append(k.errs, fmt.Errorf("stream: %w", err))
			}
			k.mu.Unlock()
			if err != nil {
				return
			}
		}
	})
	k.wg.Go(func() {
		for k.pause() {
			rctx, cancel := context.WithTimeout(ctx, defaultTestTimeout)
			code := c.emptyCall(rctx)
			cancel()
			k.mu.Lock()
			k.rpcs++
			if code != codes.OK {
				k.errs = append(k.errs, fmt.Errorf("EmptyCall: code %v", code))
			}
			k.mu.Unlock()
		}
	})
	return k
}

func (k *hostileCanary) pause() bool {
	timer := time.NewTimer(5 * time.Millisecond)
	defer timer.Stop()
	select {
	case <-k.stopCh:
		return false
	case <-timer.C:
		return true
	}
}

// stop stops the canary, ends its stream (which must end OK) and fails the
// test if anything failed or nothing was exchanged.
func (k *hostileCanary) stop() {
	k.t.Helper()
	close(k.stopCh)
	k.wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, err := range k.errs {
		k.t.Errorf("canary: %v", err)
	}
	if len(k.errs) > 0 {
		return
	}
	if k.messages == 0 || k.rpcs == 0 {
		k.t.Errorf("canary: %d stream messages and %d RPCs, want some of each", k.messages, k.rpcs)
	}
	k.st.pingPong(k.t)
	k.st.finish(k.t)
}

// hostileWaitGoroutines waits until at most max goroutines run.
func hostileWaitGoroutines(t *testing.T, max int) {
	t.Helper()
	ctx := testContext(t)
	testutils.WaitFor(ctx, t, fmt.Sprintf("at most %d goroutines after the hostile clients (the count before them plus slack)", max), func() error {
		n := runtime.NumGoroutine()
		if n <= max {
			return nil
		}
		if ctx.Err() == nil {
			return fmt.Errorf("%d goroutines", n)
		}
		buf := make([]byte, 1<<20)
		return fmt.Errorf("%d goroutines:\n%s", n, buf[:runtime.Stack(buf, true)])
	})
}

// hostileOpenFDs returns the number of open file descriptors of the process, or -1
// if it cannot tell (no /proc).
func hostileOpenFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// hostileWaitFDs waits until the process has at most max open file
// descriptors; it does nothing without /proc.
func hostileWaitFDs(t *testing.T, max int) {
	t.Helper()
	if max < 0 {
		return
	}
	testutils.WaitFor(testContext(t), t, fmt.Sprintf("at most %d open file descriptors after the hostile clients (the server closing every connection)", max), func() error {
		if n := hostileOpenFDs(); n > max {
			return fmt.Errorf("%d open", n)
		}
		return nil
	})
}

// hostileGoroutines is the goroutine count before the hostile clients.
// Goroutines of connections closed a moment ago may still be counted: that
// only loosens the later hostileWaitGoroutines by as many, and never makes
// it fail, so it is read at once rather than after a pause.
func hostileGoroutines() int {
	return runtime.NumGoroutine()
}
