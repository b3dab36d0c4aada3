package e2e_test

// Hostile clients (issue 9, item 3): garbage bytes, an HTTP/1.1 request, a
// TLS ClientHello to a plaintext chain, a connection that never sends
// anything, and thousands of connections opened and dropped. Each must be
// closed by the server (at once, or when gRPC's connection timeout ends
// the HTTP/2 handshake), must not hold up the accept loop or other
// clients, must not leave goroutines or sockets behind, and must get no
// byte while the server is not serving.
//
// The servers get a short grpc.ConnectionTimeout (the default is 120 s)
// where a test waits for it, and a long one where a test needs slow
// clients to stay open or must tell "closed at once" from "timed out".

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

const (
	// hostileShortTimeout is the connection timeout of the server that
	// silent clients wait out.
	hostileShortTimeout = 500 * time.Millisecond
	// hostileLongTimeout is the connection timeout of servers on which
	// nothing may be closed by the timeout within a test.
	hostileLongTimeout = time.Minute
	// hostileSlack is how many more goroutines than before the hostile
	// clients a test accepts afterwards (timers, runtime helpers).
	hostileSlack = 5
)

// Each kind of hostile client is closed by a serving server: the ones that
// send bytes that are not an HTTP/2 preface at once (well before the
// connection timeout), a silent one when the connection timeout ends the
// HTTP/2 handshake. A well-behaved client's stream and RPCs are unaffected,
// and no goroutine is left behind. The chains are plaintext behind xDS
// credentials (insecure fallback), so the ClientHello hits a plaintext chain.
func TestHostileClientsAreClosed(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	prompt := env.newServer(t, xdsCreds(t), grpc.ConnectionTimeout(hostileLongTimeout))
	slow := env.newServer(t, xdsCreds(t), grpc.ConnectionTimeout(hostileShortTimeout))
	lisP, _ := listen(t, "127.0.0.1")
	lisS, _ := listen(t, "127.0.0.1")
	prompt.serveOn(lisP)
	slow.serveOn(lisS)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lisP.Addr()), simpleListener(lisS.Addr())}, nil)
	prompt.modes.wait(ctx, t, lisP.Addr(), connectivity.ServingModeServing)
	slow.modes.wait(ctx, t, lisS.Addr(), connectivity.ServingModeServing)

	good := newClient(t, lisP.Addr(), "127.0.0.1", 0)
	waitForCode(ctx, t, "well-behaved client", codes.OK, good.emptyCallNoOpts)
	goodSlow := newClient(t, lisS.Addr(), "127.0.0.1", 0)
	waitForCode(ctx, t, "well-behaved client of the short-timeout server", codes.OK, goodSlow.emptyCallNoOpts)
	before := hostileGoroutines()
	k := startHostileCanary(ctx, t, good)
	kSlow := startHostileCanary(ctx, t, goodSlow)

	for _, kind := range hostileKinds(t) {
		if kind.payload == nil {
			res := hostileConn(t, lisS.Addr(), kind, defaultTestTimeout)
			// The deadline is set after the accept, so the close comes at
			// least the timeout after the dial; allow for timer coarseness.
			if res.elapsed < hostileShortTimeout-50*time.Millisecond {
				t.Errorf("%s: closed after %v, want the connection timeout (%v)", kind.name, res.elapsed, hostileShortTimeout)
			}
			t.Logf("%s: closed %v after the dial (connection timeout %v), %d bytes read", kind.name, res.elapsed, hostileShortTimeout, res.read)
			continue
		}
		// hostileConn waits at most defaultTestTimeout, far less than the
		// connection timeout: a close is the server's reaction to the bytes.
		res := hostileConn(t, lisP.Addr(), kind, defaultTestTimeout)
		t.Logf("%s: closed %v after the payload, %d bytes read", kind.name, res.elapsed, res.read)
		// The same bytes on the short-timeout server: closed as well.
		hostileConn(t, lisS.Addr(), kind, defaultTestTimeout)
	}

	k.stop()
	kSlow.stop()
	hostileWaitGoroutines(t, before+hostileSlack)
}

// Slow clients do not block the accept loop: with 50 connections open that
// never send a byte (their handshakes pending for a minute), a new client
// connects and completes an RPC at once, on a plaintext chain (gRPC waits
// for the HTTP/2 preface) and on a TLS chain (the TLS handshake waits for a
// ClientHello). Handshakes run off the accept goroutine; if they did not,
// the first silent connection would hold up every later one.
func TestHostileSlowClientsDoNotBlockAccept(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plaintext", false}, {"tls", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			mr := testutils.NewMetricReader(t)
			var env *testEnv
			var pki *testPKI
			if tc.tls {
				pki = newTestPKI(t)
				env = newTLSTestEnv(t, pki, time.Hour)
			} else {
				env = newTestEnv(t)
			}
			s := env.newServer(t, xdsCreds(t), xds.MeterProvider(mr.Provider), grpc.ConnectionTimeout(hostileLongTimeout))
			lis, _ := listen(t, "127.0.0.1")
			addr := lis.Addr()
			s.serveOn(lis)
			l := simpleListener(addr)
			var creds []grpc.DialOption
			if tc.tls {
				l = withTransportSocket(t, l, "A", downstreamTLS(false, false))
				creds = append(creds, tlsClientCreds(pki.ca.Pool, nil))
			}
			env.update(ctx, t, []*listenerpb.Listener{l}, nil)
			s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
			first := newClient(t, addr, "127.0.0.1", 0, creds...)
			waitForCode(ctx, t, "first client", codes.OK, first.emptyCallNoOpts)
			before := hostileGoroutines()
			lisAttr := attribute.String("grpc.xds_server.listener", addr.String())
			accepted, _ := mr.Value(t, "grpc.xds_server.connections.accepted", lisAttr)

			const silent = 50
			var conns []net.Conn
			for range silent {
				c, err := net.DialTimeout("tcp", addr.String(), defaultTestTimeout)
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				conns = append(conns, c)
			}
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			// Every silent connection has been accepted (and handed to
			// gRPC): the accept loop went on after each.
			mr.WaitForValue(ctx, t, "grpc.xds_server.connections.accepted", accepted+silent, lisAttr)

			c := newClient(t, addr, "127.0.0.1", 0, creds...)
			start := time.Now()
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			code := c.emptyCall(rctx)
			cancel()
			if code != codes.OK {
				t.Fatalf("EmptyCall of a new client with %d silent connections open: %v, want OK", silent, code)
			}
			t.Logf("a new client's first RPC took %v with %d silent connections open", time.Since(start), silent)
			if code := first.emptyCall(ctx); code != codes.OK {
				t.Errorf("EmptyCall of the client connected before: %v, want OK", code)
			}

			// The silent connections are still open (their handshakes wait
			// for the connection timeout); closing them frees everything.
			for _, sc := range conns[:1] {
				sc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				buf := make([]byte, 64)
				for {
					if _, err := sc.Read(buf); err != nil {
						if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
							t.Errorf("a silent connection was closed (%v), want it open until the connection timeout", err)
						}
						break
					}
				}
			}
			for _, sc := range conns {
				sc.Close()
			}
			conns = nil
			c.Close()
			hostileWaitGoroutines(t, before+hostileSlack)
		})
	}
}

// Thousands of connections opened and dropped (closed at once, reset,
// closed after half an HTTP/2 preface, reset after garbage), from 32
// goroutines, within a time bound: every one is accepted and closed by the
// server (no socket left open), a stream opened before and a unary client
// keep working throughout, a new client is served afterwards, and no
// goroutine is left behind.
func TestHostileManyConnectionsOpenedAndDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	mr := testutils.NewMetricReader(t)
	env := newTestEnv(t)
	s := env.newServer(t, xds.MeterProvider(mr.Provider), grpc.ConnectionTimeout(hostileShortTimeout))
	lis, _ := listen(t, "127.0.0.1")
	addr := lis.Addr()
	s.serveOn(lis)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	good := newClient(t, addr, "127.0.0.1", 0)
	waitForCode(ctx, t, "well-behaved client", codes.OK, good.emptyCallNoOpts)
	lisAttr := attribute.String("grpc.xds_server.listener", addr.String())
	accepted, _ := mr.Value(t, "grpc.xds_server.connections.accepted", lisAttr)
	beforeG := hostileGoroutines()
	beforeFDs := hostileOpenFDs()
	k := startHostileCanary(ctx, t, good)

	const (
		total   = 2000
		workers = 32
		bound   = 20 * time.Second
	)
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	garbage := hostileKinds(t)[0].payload
	var next, failed atomic.Int64
	var firstErr sync.Once
	start := time.Now()
	deadline := start.Add(bound)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= total || time.Now().After(deadline) {
					return
				}
				c, err := net.DialTimeout("tcp", addr.String(), defaultTestTimeout)
				if err != nil {
					failed.Add(1)
					firstErr.Do(func() { t.Errorf("dial %d: %v", i, err) })
					continue
				}
				tc := c.(*net.TCPConn)
				switch i % 4 {
				case 0: // closed at once
				case 1: // reset at once
					tc.SetLinger(0)
				case 2: // half a preface, then closed
					tc.Write(preface[:len(preface)/2])
				case 3: // garbage, then reset
					tc.Write(garbage[:64])
					tc.SetLinger(0)
				}
				tc.Close()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if n := next.Load(); n < total {
		t.Fatalf("opened %d of %d connections within %v", n, total, bound)
	}
	t.Logf("opened and dropped %d connections in %v (%d dial failures)", total, took, failed.Load())
	// Each connection was accepted: the accept loop kept up.
	mr.WaitForValue(ctx, t, "grpc.xds_server.connections.accepted", accepted+total, lisAttr)

	c := newClient(t, addr, "127.0.0.1", 0)
	if code := c.emptyCall(ctx); code != codes.OK {
		t.Errorf("EmptyCall of a new client after the barrage: %v, want OK", code)
	}
	c.Close()
	k.stop()
	// Every dropped connection was closed by the server too.
	hostileWaitFDs(t, beforeFDs+hostileSlack)
	hostileWaitGoroutines(t, beforeG+hostileSlack)
}

// While not serving (before any Listener, and after the Listener is
// deleted), every kind of hostile client is closed without a byte written:
// a raw read sees 0 bytes, then EOF (or a reset, when the server closes a
// socket with unread bytes). In between, while serving, the server does
// write (its HTTP/2 SETTINGS), which shows the raw read would see bytes.
func TestHostileNothingWrittenWhileNotServing(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t, xdsCreds(t), grpc.ConnectionTimeout(hostileShortTimeout))
	lis, _ := listen(t, "127.0.0.1")
	addr := lis.Addr()
	s.serveOn(lis)
	kinds := hostileKinds(t)

	check := func(when string) {
		t.Helper()
		for _, kind := range kinds {
			res := hostileConn(t, addr, kind, defaultTestTimeout)
			if res.read != 0 {
				t.Errorf("%s %s: the server wrote %d bytes, want none", when, kind.name, res.read)
			}
		}
	}
	check("before any Listener:")

	env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	c := newClient(t, addr, "127.0.0.1", 0)
	waitForCode(ctx, t, "RPC while serving", codes.OK, c.emptyCallNoOpts)
	c.Close()
	for _, kind := range kinds {
		if kind.payload != nil {
			continue
		}
		if res := hostileConn(t, addr, kind, defaultTestTimeout); res.read == 0 {
			t.Errorf("serving, %s: the server wrote nothing, want its HTTP/2 SETTINGS", kind.name)
		}
	}

	env.update(ctx, t, nil, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeNotServing)
	check("after the Listener was deleted:")
}
