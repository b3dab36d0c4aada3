package xds

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/proxyless-grpc/xds/filterchain"
)

// routeSource is where a filter chain's RPCs find their routes: a fixed
// inline route configuration, or an RDS resource whose routes change under
// it. Immutable.
type routeSource struct {
	fixed *routeTable // the inline route_config; nil when rds is set
	rds   *rdsState
}

// load returns the routes to use now. It takes no lock.
func (r routeSource) load() *routeTable {
	if r.rds != nil {
		return r.rds.load()
	}
	return r.fixed
}

// chainServer serves the connections of one filter chain for as long as the
// chain is part of the listener's active configuration (one chainServer may
// outlive several Listener updates that leave its chain unchanged).
//
// Each connection is served by a grpc.Server of its own, built from the
// user's options, the chain's tap handle and the registered services: a
// grpc.Server can only be drained as a whole through gRPC's public API, and
// gRFC A36 as extended here drains exactly the connections whose chain
// changed or which the new Listener would route elsewhere. A drain gracefully
// stops a connection's server, never the listening socket.
type chainServer struct {
	// Immutable after newChainServer.
	lw       *listenerWrapper // owner: counts the goroutines, stops them
	chain    *filterchain.FilterChain
	routes   routeSource
	grpcOpts []grpc.ServerOption // the user's options and the chain's tap handle

	mu sync.Mutex
	// retired is set when the chain left the active configuration: no
	// connection is added, and the chainServer is forgotten once its last
	// connection is gone. Guarded by mu.
	retired bool
	// conns are the connections not yet closed, draining or not. Guarded by
	// mu.
	conns map[*trackedConn]struct{}

	// sec holds the certificate providers of the chain's TLS configuration
	// for the credentials (credentials.go); released by removeServer.
	sec chainSecurity
}

// trackedConn is one connection of a chainServer and the grpc.Server that
// serves it. It also tells when gRPC has started serving it: grpc.Server
// closes, without a byte written, a connection it accepted but whose serving
// goroutine had not started when GracefulStop was called, so a drain waits
// for that point. grpc-go (1.85) sets the connection's deadline (for the
// handshake) right after that check, which is the signal used; closing the
// connection counts as well. The embedded *conn keeps its methods
// (FilterChain, ReadOnReady, ...) visible to gRPC and to credentials.
type trackedConn struct {
	*conn
	cs      *chainServer  // immutable
	srv     *grpc.Server  // immutable
	started chan struct{} // closed once gRPC serves the conn, or it closed
	// startOnce closes started.
	startOnce sync.Once
	draining  bool // guarded by cs.mu
}

// SetDeadline marks the connection started and sets the deadline.
func (c *trackedConn) SetDeadline(t time.Time) error {
	c.startOnce.Do(func() { close(c.started) })
	return c.conn.SetDeadline(t)
}

func newChainServer(lw *listenerWrapper, fc *filterchain.FilterChain, routes routeSource) *chainServer {
	cs := &chainServer{
		lw:     lw,
		chain:  fc,
		routes: routes,
		conns:  make(map[*trackedConn]struct{}),
	}
	cs.grpcOpts = make([]grpc.ServerOption, 0, len(lw.opts.grpcOpts)+1)
	cs.grpcOpts = append(cs.grpcOpts, lw.opts.grpcOpts...)
	cs.grpcOpts = append(cs.grpcOpts, grpc.InTapHandle(cs.tap))
	return cs
}

// add creates the connection's server and records it. It returns nil,
// without taking c, when the chainServer is retired. Called with lw.connMu
// held; it never closes a connection.
func (cs *chainServer) add(c net.Conn, src, dst netip.AddrPort) *trackedConn {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.retired {
		return nil
	}
	srv := grpc.NewServer(cs.grpcOpts...)
	for _, r := range cs.lw.services {
		srv.RegisterService(r.desc, r.impl)
	}
	tc := &trackedConn{cs: cs, srv: srv, started: make(chan struct{})}
	tc.conn = newConn(c, cs.chain, src, dst, func() { cs.connClosed(tc) })
	cs.conns[tc] = struct{}{}
	return tc
}

// serve hands tc to its server. grpc.Server.Serve returns as soon as the
// one-connection listener has given its connection (gRPC serves it on its
// own goroutines), so this does not block.
func (tc *trackedConn) serve() {
	// The error only says that the one-connection listener is exhausted.
	tc.srv.Serve(&oneConnListener{c: tc})
}

// connClosed forgets a closed connection and stops its server. Called by
// the conn's first Close, which may be inside gRPC (even inside
// grpc.Server.Stop), so the server is stopped on the reaper goroutine. The
// reaper is scheduled under cs.mu, so that once close has taken cs.mu after
// draining cs, every server of a connection closed before is queued.
func (cs *chainServer) connClosed(tc *trackedConn) {
	tc.startOnce.Do(func() { close(tc.started) })
	cs.mu.Lock()
	delete(cs.conns, tc)
	if !tc.draining {
		// A draining connection's server is stopped by its drain.
		srv := tc.srv
		cs.lw.reaper.TrySchedule(func(context.Context) { srv.Stop() })
	}
	gone := cs.retired && len(cs.conns) == 0
	cs.mu.Unlock()
	if gone {
		cs.lw.removeServer(cs)
	}
}

// rerouted returns the live, not draining connections that t would not
// route to a chain with cs's ID. Called on the serializer with lw.connMu
// held.
func (cs *chainServer) rerouted(t *filterchain.Table) []*trackedConn {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []*trackedConn
	for c := range cs.conns {
		if c.draining {
			continue
		}
		if fc := t.Lookup(c.Source(), c.Destination()); fc == nil || fc.ID != cs.chain.ID {
			out = append(out, c)
		}
	}
	return out
}

// retire takes cs out of service: it takes no new connection and every
// connection is drained.
func (cs *chainServer) retire() {
	cs.mu.Lock()
	cs.retired = true
	conns := make([]*trackedConn, 0, len(cs.conns))
	for c := range cs.conns {
		conns = append(conns, c)
	}
	gone := len(cs.conns) == 0
	cs.mu.Unlock()
	if gone {
		cs.lw.removeServer(cs)
	}
	cs.drainConns(conns)
}

// drainConns drains each of conns, unless already draining: a GOAWAY after
// a random delay in [0, DrainJitter), then the connection is closed when its
// RPCs have finished or the drain grace time is over. A drain started by the
// server's GracefulStop has no jitter and no deadline; after Stop,
// connections are closed at once.
func (cs *chainServer) drainConns(conns []*trackedConn) {
	lw := cs.lw
	deadline := !lw.closing.HasFired()
	cs.mu.Lock()
	todo := conns[:0:0]
	for _, c := range conns {
		if !c.draining {
			c.draining = true
			todo = append(todo, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range todo {
		var delay time.Duration
		if j := lw.opts.drainJitter; j > 0 && deadline {
			delay = rand.N(j)
		}
		lw.wg.Add(1)
		go func() {
			defer lw.wg.Done()
			c.drain(delay, deadline)
		}()
	}
}

// drain waits for delay, sends GOAWAY and waits for the connection's RPCs
// to end, stopping its server when the drain grace time (if deadline) runs
// out; Stop cuts every phase short (close stops the servers of draining
// connections). Before the GOAWAY it waits (briefly) until gRPC has started
// serving the connection, so that it is not closed unserved. One goroutine
// per draining connection: the grace deadline is a timer, not a goroutine.
func (c *trackedConn) drain(delay time.Duration, deadline bool) {
	lw := c.cs.lw
	if !lw.wait(c.started, maxStartWait) && !lw.hardStop.HasFired() {
		lw.log.Warningf("connection %v: gRPC did not start serving it within %v; draining anyway", c.Source(), maxStartWait)
	}
	if delay > 0 {
		lw.wait(lw.graceful.Done(), delay)
	}
	if lw.hardStop.HasFired() {
		c.srv.Stop()
		return
	}
	if !deadline {
		c.srv.GracefulStop()
		return
	}
	stopped := make(chan struct{})
	t := time.AfterFunc(lw.opts.drainGrace, func() {
		lw.log.Infof("drain grace time (%v) over: closing connection %v of filter chain %q", lw.opts.drainGrace, c.Source(), c.cs.chain.Name)
		c.srv.Stop()
		close(stopped)
	})
	c.srv.GracefulStop()
	if !t.Stop() {
		<-stopped // the timer's Stop has run or is running: wait for it
	}
}

// stopAll stops the server of every connection of cs at once, cutting short
// the drains in progress. Called by close after Stop.
func (cs *chainServer) stopAll() {
	cs.mu.Lock()
	srvs := make([]*grpc.Server, 0, len(cs.conns))
	for c := range cs.conns {
		srvs = append(srvs, c.srv)
	}
	cs.mu.Unlock()
	for _, srv := range srvs {
		srv.Stop()
	}
}

// maxStartWait bounds how long a drain waits for gRPC to start serving a
// connection it was just handed.
const maxStartWait = time.Second

// wait waits for ch, at most d, and returns early (false) on Stop; it
// reports whether ch was closed.
func (lw *listenerWrapper) wait(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-lw.hardStop.Done():
		return false
	}
}

// removeServer forgets a chainServer that has no connection left.
func (lw *listenerWrapper) removeServer(cs *chainServer) {
	lw.mu.Lock()
	delete(lw.servers, cs)
	lw.mu.Unlock()
	cs.sec.release()
}

// errOneConnDone is what oneConnListener.Accept returns once its connection
// was taken. It is not temporary, so grpc.Server.Serve returns.
var errOneConnDone = errors.New("xds: connection handed over")

// oneConnListener is the listener of one connection's grpc.Server: Accept
// returns the connection once, then fails, so Serve returns at once while
// gRPC keeps serving the connection.
type oneConnListener struct {
	c     *trackedConn // immutable; owned by gRPC once taken
	taken atomic.Bool  // set by the first Accept or Close
}

// Accept returns the connection the first time, errOneConnDone after.
func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.taken.Swap(true) {
		return nil, errOneConnDone
	}
	return l.c, nil
}

// Close closes the connection if it was never taken (the server was
// stopped before Serve), else does nothing: gRPC owns it.
func (l *oneConnListener) Close() error {
	if !l.taken.Swap(true) {
		l.c.Close()
	}
	return nil
}

// Addr returns the connection's local address.
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }
