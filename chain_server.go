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
	draining bool               // guarded by mu; no connection is added once set
	next     int                // guarded by mu; round-robin position
	conns    map[*conn]struct{} // guarded by mu; live connections
	running  int                // guarded by mu; shards whose drain has not finished
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
		conns:  make(map[*conn]struct{}),
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
	var wc *conn
	wc = newConn(c, cs.chain, src, dst, func() { cs.removeConn(wc) })
	if err := sh.lis.push(wc); err != nil {
		// Cannot happen: a shard's listener is closed only after draining
		// is set. Leave c to the caller, which looks again.
		return false
	}
	cs.conns[wc] = struct{}{}
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

// removeConn forgets a closed connection. Called by the conn's first Close,
// never with cs.mu held.
func (cs *chainServer) removeConn(c *conn) {
	cs.mu.Lock()
	delete(cs.conns, c)
	cs.mu.Unlock()
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
			cs.drainShard(sh, delay, deadline)
			cs.shardStopped()
		}()
	}
}

// drainShard waits for delay, sends GOAWAY and waits for sh's RPCs to end,
// stopping sh when the drain grace time (if deadline) runs out or Stop is
// called.
func (cs *chainServer) drainShard(sh *shard, delay time.Duration, deadline bool) {
	lw := cs.lw
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
