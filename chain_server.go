package xds

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
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
// outlive several Listener updates that leave its chain unchanged). Its
// connections are spread round-robin over shards, each a grpc.Server that is
// created on its first connection and serves an in-memory listener; a drain
// gracefully stops the shards, one at a random offset in the jitter window
// each, without touching the real listening socket.
type chainServer struct {
	// Immutable after newChainServer.
	lw     *listenerWrapper // owner: counts the goroutines, stops them
	chain  *filterchain.FilterChain
	routes routeSource
	shards []*shard

	mu       sync.Mutex
	draining bool                      // guarded by mu; no connection is added once set
	next     int                       // guarded by mu; round-robin position
	conns    map[*trackedConn]struct{} // guarded by mu; live connections
	running  int                       // guarded by mu; shards whose drain has not finished
	// unstarted counts the connections that gRPC has not yet started
	// serving (see trackedConn); guarded by mu. When a drain starts with
	// some, startedAll is made, and closed by the last of them.
	unstarted  int
	startedAll chan struct{}
}

// trackedConn is the connection handed to a shard's grpc.Server. It tells
// its chainServer when gRPC has started serving it: grpc.Server closes,
// without a byte written, a connection it accepted but whose serving
// goroutine had not started when GracefulStop was called, so a drain waits
// for that point before stopping a shard. grpc-go (1.85) sets the
// connection's deadline (for the handshake) right after that check, which
// is the signal used; closing the connection counts as well. The embedded
// *conn keeps its methods (FilterChain, ReadOnReady, ...) visible to gRPC and
// to credentials.
type trackedConn struct {
	*conn
	cs      *chainServer // immutable
	started bool         // guarded by cs.mu
}

// SetDeadline marks the connection started and sets the deadline.
func (c *trackedConn) SetDeadline(t time.Time) error {
	c.cs.markStarted(c, false)
	return c.conn.SetDeadline(t)
}

// shard is one grpc.Server of a chainServer.
type shard struct {
	// srv and lis are set once, under chainServer.mu, by the first
	// connection of the shard; they are read without the lock only after
	// draining is set, when they no longer change.
	srv *grpc.Server
	lis *memListener
}

func newChainServer(lw *listenerWrapper, fc *filterchain.FilterChain, routes routeSource) *chainServer {
	cs := &chainServer{
		lw:     lw,
		chain:  fc,
		routes: routes,
		shards: make([]*shard, lw.opts.shardCount()),
		conns:  make(map[*trackedConn]struct{}),
	}
	for i := range cs.shards {
		cs.shards[i] = &shard{}
	}
	return cs
}

// serve hands c to a shard. It reports false, without taking c, when the
// chainServer is draining. Called with lw.connMu held; it never closes a
// connection.
func (cs *chainServer) serve(c net.Conn, src, dst netip.AddrPort) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.draining {
		return false
	}
	sh := cs.shards[cs.next%len(cs.shards)]
	cs.next++
	if sh.srv == nil {
		cs.startShardLocked(sh)
	}
	tc := &trackedConn{cs: cs}
	tc.conn = newConn(c, cs.chain, src, dst, func() { cs.markStarted(tc, true) })
	if err := sh.lis.push(tc); err != nil {
		// Cannot happen: a shard's listener is closed only after draining
		// is set. Leave c to the caller, which looks again.
		return false
	}
	cs.conns[tc] = struct{}{}
	cs.unstarted++
	return true
}

// startShardLocked creates sh's grpc.Server, with the user's options, the
// chain's tap handle and every registered service, and serves it. Called
// with cs.mu held.
func (cs *chainServer) startShardLocked(sh *shard) {
	lw := cs.lw
	opts := make([]grpc.ServerOption, 0, len(lw.opts.grpcOpts)+1)
	opts = append(opts, lw.opts.grpcOpts...)
	opts = append(opts, grpc.InTapHandle(cs.tap))
	sh.srv = grpc.NewServer(opts...)
	for _, r := range lw.services {
		sh.srv.RegisterService(r.desc, r.impl)
	}
	sh.lis = newMemListener(lw.lis.Addr())
	cs.running++
	lw.wg.Add(1)
	go func() {
		defer lw.wg.Done()
		// Returns when the server is stopped; its error says nothing more.
		sh.srv.Serve(sh.lis)
	}()
}

// markStarted records that gRPC started serving c, or, if closed, that c
// is gone. Never called with cs.mu held (conns are not closed under it).
func (cs *chainServer) markStarted(c *trackedConn, closed bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if closed {
		delete(cs.conns, c)
	}
	if c.started {
		return
	}
	c.started = true
	cs.unstarted--
	if cs.unstarted == 0 && cs.startedAll != nil {
		close(cs.startedAll)
		cs.startedAll = nil
	}
}

// connsStayOn reports whether t routes every live connection of cs to a
// chain with cs's ID, so that cs can serve on under t. Called with
// lw.connMu held.
func (cs *chainServer) connsStayOn(t *filterchain.Table) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.draining {
		return false
	}
	for c := range cs.conns {
		fc := t.Lookup(c.Source(), c.Destination())
		if fc == nil || fc.ID != cs.chain.ID {
			return false
		}
	}
	return true
}

// drain stops cs from taking connections and gracefully stops its shards:
// each sends GOAWAY after its jitter delay and is stopped when the drain
// grace time runs out. A drain started by the server's GracefulStop skips the
// jitter and has no deadline; after Stop, shards are stopped at once.
// Calling drain again does nothing.
func (cs *chainServer) drain() {
	lw := cs.lw
	cs.mu.Lock()
	if cs.draining {
		cs.mu.Unlock()
		return
	}
	cs.draining = true
	startedAll := make(chan struct{})
	if cs.unstarted > 0 {
		cs.startedAll = startedAll
	} else {
		close(startedAll)
	}
	var started []*shard
	for _, sh := range cs.shards {
		if sh.srv != nil {
			started = append(started, sh)
		}
	}
	cs.mu.Unlock()
	if len(started) == 0 {
		lw.removeServer(cs)
		return
	}
	deadline := !lw.closing.HasFired()
	for _, sh := range started {
		var delay time.Duration
		if j := lw.opts.drainJitter; j > 0 && deadline {
			delay = rand.N(j)
		}
		lw.wg.Add(1)
		go func() {
			defer lw.wg.Done()
			cs.drainShard(sh, delay, deadline, startedAll)
			cs.shardStopped()
		}()
	}
}

// drainShard waits for delay, sends GOAWAY and waits for sh's RPCs to end,
// stopping sh when the drain grace time (if deadline) runs out or Stop is
// called. Before the GOAWAY it waits (briefly) for startedAll, so that no
// connection handed to gRPC is closed unserved.
func (cs *chainServer) drainShard(sh *shard, delay time.Duration, deadline bool, startedAll <-chan struct{}) {
	lw := cs.lw
	wait := time.NewTimer(maxStartWait)
	select {
	case <-startedAll:
	case <-wait.C:
		lw.log.Warningf("filter chain %q: gRPC did not start serving every new connection within %v; draining anyway", cs.chain.Name, maxStartWait)
	case <-lw.hardStop.Done():
	}
	wait.Stop()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-lw.graceful.Done():
		case <-lw.hardStop.Done():
		}
		t.Stop()
	}
	if lw.hardStop.HasFired() {
		sh.srv.Stop()
		return
	}
	done := make(chan struct{})
	lw.wg.Add(1)
	go func() {
		defer lw.wg.Done()
		sh.srv.GracefulStop()
		close(done)
	}()
	var expired <-chan time.Time
	if deadline {
		t := time.NewTimer(lw.opts.drainGrace)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-done:
		return
	case <-expired:
		lw.log.Infof("drain grace time (%v) over for filter chain %q: closing its remaining connections", lw.opts.drainGrace, cs.chain.Name)
	case <-lw.hardStop.Done():
	}
	sh.srv.Stop()
	<-done
}

// maxStartWait bounds how long a drain waits for gRPC to start serving the
// connections it was just handed.
const maxStartWait = time.Second

// shardStopped counts a stopped shard; the last one removes cs from the
// listener.
func (cs *chainServer) shardStopped() {
	cs.mu.Lock()
	cs.running--
	last := cs.running == 0
	cs.mu.Unlock()
	if last {
		cs.lw.removeServer(cs)
	}
}

// removeServer forgets a chainServer that has fully stopped.
func (lw *listenerWrapper) removeServer(cs *chainServer) {
	lw.mu.Lock()
	delete(lw.servers, cs)
	lw.mu.Unlock()
}
