package connserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/proxyless-grpc/xds/internal/clock"
	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// epoch is the fake clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var (
	listenAddr = netip.MustParseAddrPort("127.0.0.1:8080")
	peerA      = netip.MustParseAddrPort("192.168.1.1:40001")
)

// holdServer is a health service whose Check runs until released, or until
// the RPC ends: an RPC kept in flight for as long as a test wants.
type holdServer struct {
	healthgrpc.UnimplementedHealthServer
	started chan struct{} // one value per Check begun
	release chan struct{} // closed by releaseAll to let every Check return
	once    sync.Once
}

// releaseAll lets every Check, running or to come, return successfully.
func (h *holdServer) releaseAll() { h.once.Do(func() { close(h.release) }) }

func newHoldServer() *holdServer {
	return &holdServer{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (h *holdServer) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.started <- struct{}{}
	select {
	case <-h.release:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fixture is a Group on a fake clock with one chain server (the default
// test Listener's chain, inline routes accepting every RPC) and the hold
// service registered.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	clk  *clock.Fake
	g    *Group
	cs   *ChainServer
	hold *holdServer

	closeOnce sync.Once
}

// newFixture returns a fixture whose Group has o's grace, jitter and Rand;
// the Group is closed (hard) at cleanup unless the test closed it.
func newFixture(t *testing.T, o Options) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, clk: clock.NewFake(epoch), hold: newHoldServer()}
	o.Clock = f.clk
	o.Log = serverlog.New("[test]")
	o.Services = []Service{{Desc: &healthgrpc.Health_ServiceDesc, Impl: f.hold}}
	f.g = NewGroup(o)
	fc := compileTable(t, e2e.DefaultServerListener("127.0.0.1", 8080, "")).Lookup(peerA, listenAddr)
	routes := rpcpath.NewSource(rpcpath.NewRoutes(fc.HCM.Routes, fc.HCM, nil))
	f.cs = f.g.NewChainServer(fc, routes, nil, func() {})
	t.Cleanup(func() {
		f.hold.releaseAll()
		f.close(false)
	})
	return f
}

// close closes the Group, gracefully or not, once.
func (f *fixture) close(graceful bool) {
	f.closeOnce.Do(func() {
		f.g.BeginClose(graceful)
		f.g.Close(graceful)
	})
}

func compileTable(t *testing.T, l *listenerpb.Listener) *filterchain.Table {
	t.Helper()
	tbl, err := filterchain.Compile(l, filterchain.Options{})
	if err != nil {
		t.Fatalf("filterchain.Compile() failed: %v", err)
	}
	return tbl
}

// add adds an in-memory connection from src to the chain server without
// serving it, and returns it with the peer's end of the pipe (closed at
// cleanup).
func (f *fixture) add(src netip.AddrPort) (*Conn, net.Conn) {
	f.t.Helper()
	server, peer := net.Pipe()
	f.t.Cleanup(func() { peer.Close() })
	c := f.cs.Add(server, src, listenAddr, f.cs.NewServer())
	if c == nil {
		f.t.Fatal("Add() = nil for a chain server in service")
	}
	return c, peer
}

// connect adds and serves a connection from src, and returns it with a gRPC
// client connected over it (READY). The client dials the pipe once; its
// later reconnection attempts fail.
func (f *fixture) connect(src netip.AddrPort) (*Conn, *grpc.ClientConn) {
	f.t.Helper()
	c, cc := f.dial(src)
	cc.Connect()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(f.ctx, s) {
			f.t.Fatalf("client over the pipe not READY: %v", s)
		}
	}
	return c, cc
}

// dial adds and serves a connection from src, and returns it with a gRPC
// client over it that has not connected yet: when the server closes the
// connection, the client's first RPC fails at once instead of the test
// waiting for READY. The client dials the pipe once.
func (f *fixture) dial(src netip.AddrPort) (*Conn, *grpc.ClientConn) {
	f.t.Helper()
	c, peer := f.add(src)
	c.Serve()
	var dialed atomic.Bool
	cc, err := grpc.NewClient("passthrough:///pipe",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			if dialed.Swap(true) {
				return nil, errors.New("the test's pipe was dialed already")
			}
			return peer, nil
		}))
	if err != nil {
		f.t.Fatalf("grpc.NewClient() failed: %v", err)
	}
	f.t.Cleanup(func() { cc.Close() })
	return c, cc
}

// startRPC starts a Check on cc, waits until the handler runs, and returns
// the channel its result arrives on.
func (f *fixture) startRPC(cc *grpc.ClientConn) <-chan error {
	f.t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := healthgrpc.NewHealthClient(cc).Check(f.ctx, &healthpb.HealthCheckRequest{})
		errc <- err
	}()
	select {
	case <-f.hold.started:
	case <-f.ctx.Done():
		f.t.Fatal("timed out waiting for the RPC to reach its handler")
	}
	return errc
}

// startRPCReleased starts a Check on cc that returns as soon as it runs,
// and returns the channel its result arrives on.
func (f *fixture) startRPCReleased(cc *grpc.ClientConn) <-chan error {
	f.t.Helper()
	f.hold.releaseAll()
	return f.startRPC(cc)
}

// call runs a Check on cc that returns as soon as it runs, and returns its
// error: unlike startRPC, it fails at once (not waiting for the handler)
// when the connection was closed.
func (f *fixture) call(cc *grpc.ClientConn) error {
	f.t.Helper()
	f.hold.releaseAll()
	_, err := healthgrpc.NewHealthClient(cc).Check(f.ctx, &healthpb.HealthCheckRequest{})
	return err
}

// idle returns the number of idle servers of the chain server.
func (f *fixture) idle() int {
	f.cs.mu.Lock()
	defer f.cs.mu.Unlock()
	return len(f.cs.idle)
}

// waitGoAway waits until cc leaves READY, which a GOAWAY from the server
// makes it do while its RPCs in flight go on.
func (f *fixture) waitGoAway(cc *grpc.ClientConn) {
	f.t.Helper()
	if !cc.WaitForStateChange(f.ctx, connectivity.Ready) {
		f.t.Fatal("timed out waiting for the client to leave READY (GOAWAY)")
	}
}

// waitPending waits until the fake clock's pending timers are exactly want
// (durations from now, earliest first).
func (f *fixture) waitPending(want ...time.Duration) {
	f.t.Helper()
	var last []time.Duration
	err := f.clk.WaitPending(f.ctx, func(p []time.Duration) bool {
		last = p
		if len(p) != len(want) {
			return false
		}
		for i := range p {
			if p[i] != want[i] {
				return false
			}
		}
		return true
	})
	if err != nil {
		f.t.Fatalf("pending timers %v, want %v", last, want)
	}
}

// waitFor polls cond until it holds, for conditions no event announces.
func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	for !cond() {
		select {
		case <-f.ctx.Done():
			f.t.Fatalf("timed out waiting for %s", what)
		case <-time.After(time.Millisecond):
		}
	}
}

// drainDeadline returns c's grace deadline, zero before its GOAWAY.
func drainDeadline(c *Conn) time.Time {
	c.cs.mu.Lock()
	defer c.cs.mu.Unlock()
	return c.deadline
}

// notYet fails if errc already holds a result.
func notYet(t *testing.T, errc <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errc:
		t.Fatalf("RPC ended (%v) %s", err, what)
	default:
	}
}

// result waits for the RPC's result.
func (f *fixture) result(errc <-chan error) error {
	f.t.Helper()
	select {
	case err := <-errc:
		return err
	case <-f.ctx.Done():
		f.t.Fatal("timed out waiting for the RPC to end")
		return nil
	}
}

// readUntilGoAway speaks HTTP/2 as a client on peer and reads the server's
// frames until a GOAWAY, which it returns; an error (io.EOF: the server
// closed the connection without one) otherwise.
func readUntilGoAway(peer net.Conn) (*http2.GoAwayFrame, error) {
	go func() {
		// A net.Pipe write blocks until the server reads, and the server
		// writes its SETTINGS before reading the preface: write apart.
		w := http2.NewFramer(peer, nil)
		if _, err := io.WriteString(peer, http2.ClientPreface); err == nil {
			w.WriteSettings()
		}
	}()
	r := http2.NewFramer(nil, peer)
	for {
		fr, err := r.ReadFrame()
		if err != nil {
			return nil, err
		}
		if ga, ok := fr.(*http2.GoAwayFrame); ok {
			return ga, nil
		}
	}
}
