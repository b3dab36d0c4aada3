package connserver

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// TestDrainGrace: a drained connection gets its GOAWAY at once (no jitter);
// an RPC in flight that finishes within the grace time ends normally, and
// one still running at the grace deadline, exactly, is cut (UNAVAILABLE).
func TestDrainGrace(t *testing.T) {
	const grace = 5 * time.Second
	t.Run("RPC outlives the grace time", func(t *testing.T) {
		f := newFixture(t, Options{DrainGrace: grace})
		c, cc := f.connect(peerA)
		errc := f.startRPC(cc)
		f.cs.Drain([]*Conn{c})
		f.waitPending(grace)
		f.waitGoAway(cc)
		if got, want := f.cs.Stats(), (Stats{Draining: 1, DrainDeadline: epoch.Add(grace)}); got != want {
			t.Errorf("Stats() after the GOAWAY = %+v, want %+v", got, want)
		}
		f.clk.Advance(grace - time.Nanosecond)
		notYet(t, errc, "before the grace deadline")
		f.clk.Advance(time.Nanosecond)
		if err := f.result(errc); status.Code(err) != codes.Unavailable {
			t.Errorf("RPC cut at the grace deadline: %v, want code %v", err, codes.Unavailable)
		}
		if got := f.cs.Stats(); got != (Stats{}) {
			t.Errorf("Stats() after the deadline = %+v, want none", got)
		}
	})
	t.Run("RPC ends within the grace time", func(t *testing.T) {
		f := newFixture(t, Options{DrainGrace: grace})
		c, cc := f.connect(peerA)
		errc := f.startRPC(cc)
		f.cs.Drain([]*Conn{c})
		f.waitPending(grace)
		f.waitGoAway(cc)
		f.clk.Advance(grace / 2)
		f.hold.releaseAll()
		if err := f.result(errc); err != nil {
			t.Errorf("RPC in flight during the drain: %v, want success", err)
		}
		f.waitPending() // the drain stopped its grace timer
		f.waitFor("the connection to close", func() bool { return f.cs.Stats() == Stats{} })
	})
}

// TestDrainGracefulClose: a drain started by a graceful close has no
// deadline: the GOAWAY goes out, the RPC in flight runs as long as it
// needs (no timer is set), and Close returns once it has ended.
func TestDrainGracefulClose(t *testing.T) {
	f := newFixture(t, Options{DrainGrace: time.Second, DrainJitter: time.Minute})
	_, cc := f.connect(peerA)
	errc := f.startRPC(cc)
	closed := make(chan struct{})
	go func() {
		f.close(true)
		close(closed)
	}()
	f.waitGoAway(cc)
	if p := f.clk.Pending(); len(p) != 0 {
		t.Errorf("timers pending during a graceful close: %v, want none", p)
	}
	f.clk.Advance(time.Hour)
	notYet(t, errc, "during a graceful close with no deadline")
	select {
	case <-closed:
		t.Fatal("Close(true) returned with an RPC in flight")
	default:
	}
	f.hold.releaseAll()
	if err := f.result(errc); err != nil {
		t.Errorf("RPC in flight during a graceful close: %v, want success", err)
	}
	select {
	case <-closed:
	case <-f.ctx.Done():
		t.Fatal("Close(true) did not return after the last RPC ended")
	}
}

// TestDrainJitter: each connection of one drain gets its GOAWAY at its own
// offset in [0, DrainJitter), drawn from Rand, and its grace deadline runs
// from there.
func TestDrainJitter(t *testing.T) {
	const (
		jitter = time.Second
		grace  = 10 * time.Second
	)
	offsets := []time.Duration{700 * time.Millisecond, 0, 300 * time.Millisecond, jitter - time.Nanosecond}
	var next int
	rnd := func(n time.Duration) time.Duration {
		if n != jitter {
			t.Errorf("Rand(%v), want Rand(%v)", n, jitter)
		}
		d := offsets[next]
		next++
		return d
	}
	f := newFixture(t, Options{DrainGrace: grace, DrainJitter: jitter, Rand: rnd})
	conns := make([]*Conn, len(offsets))
	rpcs := make([]<-chan error, len(offsets))
	for i := range conns {
		var cc *grpc.ClientConn
		conns[i], cc = f.connect(peerA)
		rpcs[i] = f.startRPC(cc)
	}
	f.cs.Drain(conns)

	// Each connection waits for its offset; the one at 0 has its GOAWAY
	// and grace timer at once.
	f.waitPending(300*time.Millisecond, 700*time.Millisecond, jitter-time.Nanosecond, grace)
	sorted := slices.Clone(offsets)
	slices.Sort(sorted)
	var now time.Duration
	for _, at := range sorted {
		f.clk.Advance(at - now)
		now = at
		// The connection due now has its grace timer: grace from now.
		if err := f.clk.WaitPending(f.ctx, func(p []time.Duration) bool { return slices.Contains(p, grace) }); err != nil {
			t.Fatalf("at +%v: no grace timer for the connection due: %v", now, err)
		}
		for i, c := range conns {
			var want time.Time
			if offsets[i] <= now {
				want = epoch.Add(offsets[i] + grace)
			}
			if got := drainDeadline(c); !got.Equal(want) {
				t.Errorf("at +%v: connection %d (offset %v) has deadline %v, want %v", now, i, offsets[i], got, want)
			}
		}
	}
	if got, want := f.cs.Stats(), (Stats{Draining: len(conns), DrainDeadline: epoch.Add(jitter - time.Nanosecond + grace)}); got != want {
		t.Errorf("Stats() after every GOAWAY = %+v, want %+v", got, want)
	}
	// The grace deadlines are as spread as the GOAWAYs.
	f.clk.Advance(grace)
	for i, errc := range rpcs {
		if err := f.result(errc); status.Code(err) != codes.Unavailable {
			t.Errorf("RPC %d at its grace deadline: %v, want code %v", i, err, codes.Unavailable)
		}
	}
}

// TestDrainJitterDefaultRand: without Rand, every delay is in
// [0, DrainJitter).
func TestDrainJitterDefaultRand(t *testing.T) {
	const jitter = 2 * time.Second
	f := newFixture(t, Options{DrainGrace: time.Minute, DrainJitter: jitter})
	const n = 8
	conns := make([]*Conn, n)
	for i := range conns {
		var cc *grpc.ClientConn
		conns[i], cc = f.connect(peerA)
		f.startRPC(cc)
	}
	f.cs.Drain(conns)
	var p []time.Duration
	if err := f.clk.WaitPending(f.ctx, func(q []time.Duration) bool { p = q; return len(q) == n }); err != nil {
		t.Fatalf("pending timers %v, want %d", p, n)
	}
	for _, d := range p {
		if d < 0 || d >= jitter && d != time.Minute {
			t.Errorf("pending timers %v: %v is neither a delay in [0, %v) nor the grace time", p, d, jitter)
		}
	}
}

// TestForceStop: a hard stop ends a graceful close waiting for an RPC, and
// a drain still in its jitter delay stops its server at once.
func TestForceStop(t *testing.T) {
	t.Run("during a graceful close", func(t *testing.T) {
		f := newFixture(t, Options{DrainGrace: time.Second})
		_, cc := f.connect(peerA)
		errc := f.startRPC(cc)
		closed := make(chan struct{})
		go func() {
			f.close(true)
			close(closed)
		}()
		f.waitGoAway(cc)
		f.g.ForceStop()
		if err := f.result(errc); status.Code(err) != codes.Unavailable {
			t.Errorf("RPC after ForceStop: %v, want code %v", err, codes.Unavailable)
		}
		select {
		case <-closed:
		case <-f.ctx.Done():
			t.Fatal("Close(true) did not return after ForceStop")
		}
	})
	t.Run("during the jitter delay", func(t *testing.T) {
		const jitter = time.Second
		f := newFixture(t, Options{DrainGrace: time.Minute, DrainJitter: jitter, Rand: func(n time.Duration) time.Duration { return n / 2 }})
		c, cc := f.connect(peerA)
		errc := f.startRPC(cc)
		f.cs.Drain([]*Conn{c})
		f.waitPending(jitter / 2)
		f.g.ForceStop()
		if err := f.result(errc); status.Code(err) != codes.Unavailable {
			t.Errorf("RPC after ForceStop: %v, want code %v", err, codes.Unavailable)
		}
		f.waitPending() // the drain ended without a GOAWAY or grace timer
		if !drainDeadline(c).IsZero() {
			t.Errorf("drain deadline %v after ForceStop in the jitter delay, want none (no GOAWAY)", drainDeadline(c))
		}
	})
	t.Run("graceful close skips the jitter delay", func(t *testing.T) {
		const grace = time.Minute
		f := newFixture(t, Options{DrainGrace: grace, DrainJitter: time.Second, Rand: func(n time.Duration) time.Duration { return n / 2 }})
		c, cc := f.connect(peerA)
		f.startRPC(cc)
		f.cs.Drain([]*Conn{c})
		f.waitPending(500 * time.Millisecond)
		f.g.BeginClose(true)
		// The drain was started with a deadline, which it keeps.
		f.waitPending(grace)
		f.waitGoAway(cc)
	})
}

// TestReuse: the server of a connection that closed on its own serves the
// chain's next connection; the idle servers are stopped when the chain
// server is retired, and the connection forgotten.
func TestReuse(t *testing.T) {
	f := newFixture(t, Options{DrainGrace: time.Second})
	c, cc := f.connect(peerA)
	if err := f.result(f.startRPCReleased(cc)); err != nil {
		t.Fatalf("RPC on the first connection: %v", err)
	}
	cc.Close()
	f.waitFor("the closed connection to be forgotten", func() bool { return f.cs.Stats() == Stats{} })
	f.waitFor("its server to be idle", func() bool { return f.idle() == 1 })
	c2, cc2 := f.connect(peerA)
	if c2.srv != c.srv {
		t.Error("the second connection has a new server, want the idle one")
	}
	if err := f.result(f.startRPCReleased(cc2)); err != nil {
		t.Fatalf("RPC on the second connection, served by the reused server: %v", err)
	}
	if got := f.idle(); got != 0 {
		t.Errorf("%d idle servers while the second connection is served, want 0", got)
	}
	cc2.Close()
	f.waitFor("the server to be idle again", func() bool { return f.idle() == 1 })
	f.cs.Retire()
	if got := f.idle(); got != 0 {
		t.Errorf("%d idle servers after Retire, want 0", got)
	}
	f.close(true) // waits for the reaper
	if err := c.srv.srv.Serve(&oneConnListener{c: c}); err != grpc.ErrServerStopped {
		t.Errorf("Serve() on the retired chain's idle server = %v, want %v (stopped)", err, grpc.ErrServerStopped)
	}
	if p := f.clk.Pending(); len(p) != 0 {
		t.Errorf("timers pending: %v, want none", p)
	}
}

// TestReuseBounded: at most maxIdle servers wait per chain; the server of
// one more connection closing on its own is stopped by the reaper.
func TestReuseBounded(t *testing.T) {
	f := newFixture(t, Options{DrainGrace: time.Second})
	var conns []*Conn
	var ccs []*grpc.ClientConn
	for range maxIdle + 1 {
		c, cc := f.connect(peerA)
		conns, ccs = append(conns, c), append(ccs, cc)
	}
	for _, cc := range ccs {
		cc.Close()
	}
	f.waitFor("every connection to be forgotten", func() bool { return f.cs.Stats() == Stats{} })
	f.waitFor("maxIdle idle servers", func() bool { return f.idle() == maxIdle })
	// The one not kept is stopped by the reaper: serving on it fails.
	idle := map[*Server]bool{}
	f.cs.mu.Lock()
	for _, s := range f.cs.idle {
		idle[s] = true
	}
	f.cs.mu.Unlock()
	for _, c := range conns {
		if idle[c.srv] {
			continue
		}
		f.close(true) // waits for the reaper
		if err := c.srv.srv.Serve(&oneConnListener{c: c}); err != grpc.ErrServerStopped {
			t.Errorf("Serve() on the server not kept = %v, want %v (stopped)", err, grpc.ErrServerStopped)
		}
	}
}

// TestRerouted: the live connections a new table sends to another chain
// (or to none) are rerouted; draining ones are not reported.
func TestRerouted(t *testing.T) {
	f := newFixture(t, Options{DrainGrace: time.Second})
	from10, _ := f.add(netip.MustParseAddrPort("10.1.2.3:1000"))
	from192, _ := f.add(peerA)
	draining, _ := f.add(netip.MustParseAddrPort("10.9.9.9:1000"))
	f.cs.mu.Lock()
	draining.draining = true // as Drain marks it, without running its drain
	f.cs.mu.Unlock()

	same := e2e.DefaultServerListener("127.0.0.1", 8080, "")
	split := e2e.DefaultServerListener("127.0.0.1", 8080, "")
	ten := proto.Clone(split.FilterChains[0]).(*listenerpb.FilterChain)
	ten.Name = "from-10"
	ten.FilterChainMatch = &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{{
		AddressPrefix: "10.0.0.0", PrefixLen: wrapperspb.UInt32(8),
	}}}
	split.FilterChains = append(split.FilterChains, ten)
	changed := e2e.DefaultServerListener("127.0.0.1", 8080, "")
	changed.FilterChains[0].FilterChainMatch = &listenerpb.FilterChainMatch{DestinationPort: wrapperspb.UInt32(8080)}

	for _, test := range []struct {
		desc string
		l    *listenerpb.Listener
		want []*Conn
	}{
		{desc: "same chain", l: same},
		{desc: "10/8 split off", l: split, want: []*Conn{from10}},
		{desc: "chain changed", l: changed, want: []*Conn{from10, from192}},
	} {
		t.Run(test.desc, func(t *testing.T) {
			got := f.cs.Rerouted(compileTable(t, test.l))
			byAddr := func(a, b *Conn) int { return a.Source().Compare(b.Source()) }
			slices.SortFunc(got, byAddr)
			slices.SortFunc(test.want, byAddr)
			if !slices.Equal(got, test.want) {
				t.Errorf("Rerouted() = %v, want %v", sources(got), sources(test.want))
			}
		})
	}
	// Close the unserved connections' servers at once.
	f.close(false)
}

func sources(cs []*Conn) []netip.AddrPort {
	out := make([]netip.AddrPort, len(cs))
	for i, c := range cs {
		out[i] = c.Source()
	}
	return out
}

// TestDrainBeforeStart: a drain of a connection gRPC has not started
// serving waits for gRPC's first SetDeadline, so that the connection gets
// a GOAWAY rather than being closed unserved; if that never comes, it
// drains anyway after maxStartWait on the clock.
func TestDrainBeforeStart(t *testing.T) {
	t.Run("gRPC starts", func(t *testing.T) {
		f := newFixture(t, Options{DrainGrace: time.Second})
		c, peer := f.add(peerA)
		f.cs.Drain([]*Conn{c})
		f.waitPending(maxStartWait)
		goaway := make(chan error, 1)
		go func() {
			_, err := readUntilGoAway(peer)
			goaway <- err
		}()
		c.Serve() // the clock never moves: gRPC's SetDeadline lets the drain on
		select {
		case err := <-goaway:
			if err != nil {
				t.Fatalf("client read %v before a GOAWAY, want a GOAWAY", err)
			}
		case <-f.ctx.Done():
			t.Fatal("timed out waiting for the GOAWAY")
		}
		peer.Close()
		f.waitFor("the drained connection to close", func() bool { return f.cs.Stats() == Stats{} })
	})
	t.Run("fallback", func(t *testing.T) {
		f := newFixture(t, Options{DrainGrace: time.Second})
		c, _ := f.add(peerA)
		f.cs.Drain([]*Conn{c})
		f.waitPending(maxStartWait)
		f.clk.Advance(maxStartWait - time.Nanosecond)
		if got, want := f.cs.Stats(), (Stats{Draining: 1}); got != want {
			t.Errorf("Stats() before maxStartWait = %+v, want %+v", got, want)
		}
		f.clk.Advance(time.Nanosecond)
		// The drain went on: GOAWAY (there is no transport to send it on)
		// and GracefulStop, which a server not serving yet returns from at
		// once.
		f.waitFor("the drain to set its deadline", func() bool { return drainDeadline(c).Equal(epoch.Add(maxStartWait + time.Second)) })
		f.waitPending()
		// The server is stopped: serving the connection now closes it.
		c.Serve()
		if got := f.cs.Stats(); got != (Stats{}) {
			t.Errorf("Stats() after serving a connection of a stopped server = %+v, want none", got)
		}
	})
}

// TestDrainRacesClose: a connection that closes on its own while its drain
// is being started (the listener picked it to drain, under its lock, and it
// closed before Drain ran) leaves its server in the chain's idle pool, and
// that drain must not stop it: the chain's next connection, which the
// server serves, whether it came before or after the drain started, is
// served.
func TestDrainRacesClose(t *testing.T) {
	// A Listener whose one chain differs from the fixture's (same match,
	// another ID): every connection of the fixture's chain is rerouted.
	changed := e2e.DefaultServerListener("127.0.0.1", 8080, "")
	changed.FilterChains[0].FilterChainMatch = &listenerpb.FilterChainMatch{DestinationPort: wrapperspb.UInt32(8080)}
	for _, before := range []bool{false, true} {
		name := "next connection after the drain"
		if before {
			name = "next connection before the drain"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, Options{DrainGrace: time.Second})
			c, cc := f.connect(peerA)
			// The listener applies a new Listener: under its lock it picks
			// the connections to drain...
			picked := f.cs.Rerouted(compileTable(t, changed))
			if len(picked) != 1 || picked[0] != c {
				t.Fatalf("Rerouted() = %v, want the one connection", sources(picked))
			}
			// ...and before it calls Drain, the connection closes on its own.
			cc.Close()
			f.waitFor("the closed connection to be forgotten", func() bool { return f.cs.Stats() == Stats{} })
			f.waitFor("its server to be idle", func() bool { return f.idle() == 1 })
			var ncc *grpc.ClientConn
			if before {
				var next *Conn
				next, ncc = f.connect(peerA)
				if next.srv != c.srv {
					t.Fatal("the next connection has a new server, want the idle one")
				}
			}
			f.cs.Drain(picked)
			f.g.wg.Wait() // every drain started has ended (none, or a stray one)
			f.cs.mu.Lock()
			for _, s := range f.cs.idle {
				if s.stopped.Load() {
					t.Error("a stopped server is in the idle pool")
				}
			}
			f.cs.mu.Unlock()
			if !before {
				_, ncc = f.dial(peerA)
			}
			if err := f.call(ncc); err != nil {
				t.Fatalf("RPC on the chain's next connection: %v, want success", err)
			}
			if got, want := f.cs.Stats(), (Stats{Live: 1}); got != want {
				t.Errorf("Stats() = %+v, want %+v", got, want)
			}
		})
	}
}

// TestServeStoppedIdleServer: should a server in a chain's idle pool be
// stopped all the same, the connection handed to it (Serve returns
// grpc.ErrServerStopped) is served by a new server, not closed.
func TestServeStoppedIdleServer(t *testing.T) {
	f := newFixture(t, Options{DrainGrace: time.Second})
	_, cc := f.connect(peerA)
	cc.Close()
	f.waitFor("the server to be idle", func() bool { return f.idle() == 1 })
	// A fault made on purpose: no path of the package leaves a stopped
	// server in the pool, so the test stops the idle server (a real
	// grpc.Server) behind the pool's back, as a bug would.
	f.cs.mu.Lock()
	stale := f.cs.idle[0]
	f.cs.mu.Unlock()
	stale.srv.Stop()
	c, ncc := f.dial(peerA)
	if err := f.call(ncc); err != nil {
		t.Fatalf("RPC on the connection handed to a stopped server: %v, want success", err)
	}
	f.cs.mu.Lock()
	srv := c.srv
	f.cs.mu.Unlock()
	if srv == stale {
		t.Error("the connection is still with the stopped server, want a new one")
	}
	if got, want := f.cs.Stats(), (Stats{Live: 1}); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}
