// Package connserver serves the accepted connections of one listener of an
// xDS server, each with a grpc.Server of its own: gRPC's public API can only
// drain a grpc.Server as a whole, and gRFC A36 (as extended here) drains
// exactly the connections whose filter chain changed, or which a new
// Listener would give to another chain. Draining a connection gracefully
// stops its server (GOAWAY, in-flight RPCs finish), then stops it when the
// drain grace time is over; the listening socket is never involved.
//
// A server serves one connection at a time, not one in its life: once its
// connection has closed on its own, the server waits, idle, for the next
// connection of its chain (a few per chain, see maxIdle), so that a new
// connection costs neither grpc.NewServer, the registration of every
// service, nor Stop.
//
// A Group is the per-listener owner: it holds the ChainServers (one per
// filter chain in service, or still serving connections after it left
// service), and starts and waits for every goroutine of the package.
package connserver

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

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/accesslog/sink"
	"github.com/proxyless-grpc/xds/internal/clock"
	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/grpccompat"
	"github.com/proxyless-grpc/xds/internal/meshmetrics"
	"github.com/proxyless-grpc/xds/internal/server/rpclog"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/server/security"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
	"github.com/proxyless-grpc/xds/internal/syncutil"
)

// Service is one service registration, replayed into every grpc.Server.
type Service struct {
	Desc *grpc.ServiceDesc
	Impl any
}

// Options configure a Group. Immutable once given.
type Options struct {
	// GRPC are the user's server options; each grpc.Server also gets its
	// chain's tap handle and interceptors (rpcpath.Chain.ServerOptions).
	GRPC rpcpath.UserOptions
	// Services are registered on every grpc.Server.
	Services []Service
	// DrainGrace is how long a drained connection keeps its RPCs after its
	// GOAWAY; DrainJitter spreads the GOAWAYs of one drain over a window.
	DrainGrace, DrainJitter time.Duration
	// Mesh records Istio's standard metrics of the RPCs; nil records none.
	Mesh *meshmetrics.Recorder
	// AccessLogs are the server's access log outputs; nil logs nothing.
	// AccessLog is the access log every chain writes besides its
	// HttpConnectionManager's own (xds.AccessLogFile); nil for none.
	AccessLogs *sink.Outputs
	AccessLog  *accesslog.Config
	// Log is the listener's logger.
	Log *serverlog.Logger
	// Clock times the drains (jitter delays, grace deadlines, the wait for
	// gRPC to start serving a connection). Nil means clock.Real.
	Clock clock.Clock
	// Rand returns a random duration in [0, n), n > 0: a drained
	// connection's jitter delay. Nil means math/rand/v2's N.
	Rand func(n time.Duration) time.Duration
}

// Group serves the connections of one listener.
type Group struct {
	opts Options // immutable

	closing  *syncutil.Event // fired when the listener starts closing: drains get no deadline
	graceful *syncutil.Event // fired by a graceful close: drains skip their jitter delay
	hardStop *syncutil.Event // fired by a hard close: drains stop their servers at once
	// reaper stops the grpc.Servers of connections that closed on their
	// own (a server holds gRPC resources, such as its channelz entry, until
	// stopped); closed by Close, after every other server has stopped.
	reaper *syncutil.CallbackSerializer

	mu sync.Mutex
	// servers are the ChainServers not yet gone: in service, or retired
	// with connections left. Guarded by mu.
	servers map[*ChainServer]struct{}
	// wg counts the drain goroutines; Close waits for it.
	wg sync.WaitGroup
	// idle counts the idle servers of every chain server, up to
	// maxIdleGroup.
	idle atomic.Int32
	// registered reports whether a registered service has a method, for
	// the mesh metrics to count the RPCs gRPC refuses for the others; nil
	// when they are not counted (no mesh metrics, or a
	// grpc.UnknownServiceHandler serves them through the interceptors).
	registered func(method string) bool // immutable
}

// maxIdle bounds the idle servers kept by one chain server for its next
// connections, and maxIdleGroup those of a listener: enough for bursts of
// short connections on each of many chains, little memory (an idle
// grpc.Server is about 3 KiB, and has no goroutine).
const (
	maxIdle      = 4
	maxIdleGroup = 1024
)

// registeredMethods returns whether one of services has a method
// ("/service/method").
func registeredMethods(services []Service) func(string) bool {
	set := make(map[string]struct{})
	for _, sv := range services {
		for _, m := range sv.Desc.Methods {
			set["/"+sv.Desc.ServiceName+"/"+m.MethodName] = struct{}{}
		}
		for _, m := range sv.Desc.Streams {
			set["/"+sv.Desc.ServiceName+"/"+m.StreamName] = struct{}{}
		}
	}
	return func(method string) bool {
		_, ok := set[method]
		return ok
	}
}

// NewGroup returns an empty Group; it starts the reaper goroutine, which
// Close stops.
func NewGroup(o Options) *Group {
	o.Clock = clock.Or(o.Clock)
	if o.Rand == nil {
		o.Rand = rand.N[time.Duration]
	}
	var registered func(string) bool
	if o.Mesh != nil || o.AccessLogs != nil {
		// The options' credentials were read the same way before the
		// server was made: an error here is as unlikely, and costs only
		// the count (and log line) of RPCs for unregistered methods.
		if has, err := grpccompat.HasUnknownServiceHandler(o.GRPC.Options); err == nil && !has {
			registered = registeredMethods(o.Services)
		}
	}
	return &Group{
		registered: registered,
		opts:       o,
		closing:    syncutil.NewEvent(),
		graceful:   syncutil.NewEvent(),
		hardStop:   syncutil.NewEvent(),
		reaper:     syncutil.NewCallbackSerializer(),
		servers:    make(map[*ChainServer]struct{}),
	}
}

// NewChainServer returns the server of the filter chain fc, whose RPCs
// route with routes and whose handshakes use sec (nil without TLS).
// onGone is called once, when the chain server is retired and its last
// connection has closed: it releases what the chain held.
func (g *Group) NewChainServer(fc *filterchain.FilterChain, routes *rpcpath.Source, sec *security.Chain, onGone func()) *ChainServer {
	cs := &ChainServer{
		g:      g,
		chain:  fc,
		sec:    sec,
		routes: routes,
		onGone: onGone,
		conns:  make(map[*Conn]struct{}),
	}
	cs.rpc = rpcpath.NewChain(fc.Name, fc.HCM, routes).WithLocalIdentity(sec.LocalCertificate)
	// The access log's interceptors run first, then the mesh metrics':
	// both see the RPCs the chain's filters refuse after the tap (and the
	// log, the status the client gets); the mesh metrics set the peer
	// metadata reply before the user's interceptors run. RPCs refused in
	// the tap handle are logged and counted too, as a sidecar logs and
	// counts those its filters refuse, and so are those gRPC refuses after
	// it for a method no service has.
	var outer []grpc.ServerOption
	var cfg *accesslog.Config
	if fc.HCM != nil {
		cfg = fc.HCM.AccessLog
	}
	cfg = accesslog.Join(cfg, g.opts.AccessLog)
	cs.log = g.opts.AccessLogs.Logger(cfg)
	if al := rpclog.New(cs.log, cfg, fc.Name, sec.LocalCertificate); al != nil {
		cs.rpcLog = al
		cs.rpc.WithAccessLog(cfg.RequestHeaders()).OnRefused(al.Refused)
		outer = al.ServerOptions()
	}
	mesh, refused := g.opts.Mesh.ServerOptions(sec.LocalCertificate)
	if refused != nil {
		cs.rpc.OnRefused(refused)
	}
	if (cs.log != nil || refused != nil) && g.registered != nil {
		cs.rpc.OnUnregistered(g.registered)
	}
	cs.grpcOpts = cs.rpc.ServerOptions(append(outer, mesh...), g.opts.GRPC)
	g.mu.Lock()
	g.servers[cs] = struct{}{}
	g.mu.Unlock()
	return cs
}

// removeServer forgets a chain server that is retired and has no
// connection left.
func (g *Group) removeServer(cs *ChainServer) {
	g.mu.Lock()
	delete(g.servers, cs)
	g.mu.Unlock()
	cs.sec.Release()
	if cs.rpcLog != nil {
		// A connection's server is stopped without waiting for its
		// handlers: the RPCs it cut short are logged (drain_timeout,
		// server_stopped) when they return, and the log is closed after.
		cs.rpcLog.Close(cs.log.Close)
	} else {
		cs.log.Close()
	}
	cs.onGone()
}

// BeginClose marks the listener closing, before its accept loop stops:
// drains started from now have no grace deadline; with graceful they send
// their GOAWAYs at once, without it they stop their servers.
func (g *Group) BeginClose(graceful bool) {
	g.closing.Fire()
	if graceful {
		g.graceful.Fire()
	} else {
		g.hardStop.Fire()
	}
}

// ForceStop turns a graceful close in progress into a hard one: drains not
// yet at their GOAWAY stop their servers at once, and every connection's
// server is stopped, which ends the GracefulStops waiting for RPCs. Safe to
// call concurrently with Close.
func (g *Group) ForceStop() {
	g.hardStop.Fire()
	for _, cs := range g.snapshot() {
		cs.stopAll()
	}
}

// Close retires every chain server (their connections drain: gracefully,
// or at once without graceful) and returns once every connection's server
// has stopped and every goroutine of the group has exited. Call it after
// BeginClose and once no connection can be added.
func (g *Group) Close(graceful bool) {
	servers := g.snapshot()
	for _, cs := range servers {
		// Connections already draining keep their drain, which sees the
		// close events.
		cs.Retire()
	}
	if !graceful {
		for _, cs := range servers {
			cs.stopAll()
		}
	}
	g.wg.Wait()
	g.reaper.Close()
	<-g.reaper.Done()
}

func (g *Group) snapshot() []*ChainServer {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*ChainServer, 0, len(g.servers))
	for cs := range g.servers {
		out = append(out, cs)
	}
	return out
}

// ChainServers returns the chain servers not yet gone: those in service and
// the retired ones that still have connections.
func (g *Group) ChainServers() []*ChainServer { return g.snapshot() }

// wait waits for ch, at most d, and returns early (false) on a hard stop;
// it reports whether ch was closed. It makes no timer when ch is already
// closed or the hard stop has fired.
func (g *Group) wait(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-g.hardStop.Done():
		return false
	default:
	}
	t := g.opts.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C():
		return false
	case <-g.hardStop.Done():
		return false
	}
}

// ChainServer serves the connections of one filter chain for as long as the
// chain is in service (one ChainServer may outlive several Listener updates
// that leave its chain unchanged), and its draining connections after.
type ChainServer struct {
	// Immutable after NewChainServer.
	g        *Group
	chain    *filterchain.FilterChain
	sec      *security.Chain     // nil without TLS; released when the chain server is gone
	routes   *rpcpath.Source     // what the chain's RPCs route with
	onGone   func()              // called once by removeServer
	rpc      *rpcpath.Chain      // what the chain's HTTP filters need of its servers
	grpcOpts []grpc.ServerOption // the user's options, with the chain's interceptors and tap handle (rpc.ServerOptions)
	log      *sink.Logger        // the chain's access log; nil for none; closed when the chain server is gone and its RPCs have been logged
	rpcLog   *rpclog.Chain       // what logs the chain's RPCs; nil for none

	mu sync.Mutex
	// retired is set when the chain left service: no connection is added,
	// and the chain server is gone once its last connection is. Guarded by
	// mu.
	retired bool
	// conns are the connections not yet closed, draining or not. Guarded by
	// mu.
	conns map[*Conn]struct{}
	// idle are servers whose connection closed on its own, waiting for the
	// chain's next connection. Guarded by mu.
	idle []*Server
}

// Chain returns the filter chain.
func (cs *ChainServer) Chain() *filterchain.FilterChain { return cs.chain }

// Routes returns where the chain's RPCs find their routes.
func (cs *ChainServer) Routes() *rpcpath.Source { return cs.routes }

// Server is a grpc.Server of a chain, serving one connection at a time.
type Server struct {
	srv      *grpc.Server // immutable
	reusable bool         // immutable; false when the options are the connection's own
	// info is the connection's, for its chain's access log; nil when the
	// chain does not log. Immutable.
	info *rpcpath.ConnInfo
	// stopped is set before the server is stopped or gracefully stopped,
	// under its chain server's mu by the package (Stop, for a server no
	// chain server holds, without), and never cleared: a stopped server is
	// never kept idle.
	stopped atomic.Bool
}

// Stop stops the server (and closes its connection if it has one). For a
// server that Add did not take.
func (s *Server) Stop() {
	s.stopped.Store(true)
	s.srv.Stop()
}

// NewServer returns a server for one connection of the chain: an idle one
// when there is one, else a new grpc.Server with the user's options, the
// chain's tap handle (the connection's own when the chain's filters keep
// per-connection state) and interceptors, and the registered services.
// Hand it to Add.
func (cs *ChainServer) NewServer() *Server {
	cs.mu.Lock()
	for n := len(cs.idle); n > 0; n = len(cs.idle) {
		s := cs.idle[n-1]
		cs.idle[n-1] = nil
		cs.idle = cs.idle[:n-1]
		cs.g.idle.Add(-1)
		if s.stopped.Load() {
			// keepIdle takes no stopped server and nothing stops an idle
			// one: never here. Were it, the server could not serve.
			cs.g.opts.Log.Warningf("filter chain %q: a stopped server was idle; not reused", cs.chain.Name)
			continue
		}
		cs.mu.Unlock()
		return s
	}
	cs.mu.Unlock()
	return cs.newServer()
}

// newServer returns a new server for one connection of the chain.
func (cs *ChainServer) newServer() *Server {
	var info *rpcpath.ConnInfo
	if cs.rpc.Logs() {
		info = rpcpath.NewConnInfo()
	}
	s := &Server{srv: grpc.NewServer(cs.rpc.ConnOptions(cs.grpcOpts, info)...), reusable: !cs.rpc.PerConn(), info: info}
	for _, svc := range cs.g.opts.Services {
		s.srv.RegisterService(svc.Desc, svc.Impl)
	}
	return s
}

// keepIdle keeps s, whose connection closed on its own, for the chain's
// next connection, unless s was stopped (or is being stopped), the chain
// left service, the listener is closing (a hard close stops the servers of
// connections that are not draining: s may be stopping), or enough servers
// are idle; it reports whether it did. Called with cs.mu held: the servers
// the package stops are marked stopped under it, so the pool only ever
// holds servers that can serve.
func (cs *ChainServer) keepIdle(s *Server) bool {
	if !s.reusable || s.stopped.Load() || cs.retired || len(cs.idle) >= maxIdle || cs.g.closing.HasFired() || cs.g.hardStop.HasFired() {
		return false
	}
	if cs.g.idle.Add(1) > maxIdleGroup {
		cs.g.idle.Add(-1)
		return false
	}
	cs.idle = append(cs.idle, s)
	return true
}

// takeIdle removes and returns the idle servers, marked stopped: the
// caller stops them. Called with cs.mu held.
func (cs *ChainServer) takeIdle() []*Server {
	idle := cs.idle
	cs.idle = nil
	cs.g.idle.Add(-int32(len(idle)))
	for _, s := range idle {
		s.stopped.Store(true)
	}
	return idle
}

// Add records c, from src to dst, served by srv (from NewServer), and
// returns it, or nil, without taking c, when the chain server is retired.
// The caller then calls Conn.Serve. Called with the listener's lock that
// orders additions with configuration changes; it never blocks on I/O.
func (cs *ChainServer) Add(c net.Conn, src, dst netip.AddrPort, srv *Server) *Conn {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.retired {
		return nil
	}
	tc := &Conn{cs: cs, srv: srv, started: make(chan struct{}), served: make(chan struct{})}
	tc.conn = newConn(c, cs.chain, src, dst, func() { cs.connClosed(tc) })
	cs.conns[tc] = struct{}{}
	return tc
}

// connClosed forgets a closed connection and keeps its server for the
// next connection, or stops it. Called by the conn's first Close, which may
// be inside gRPC (even inside grpc.Server.Stop, which only a closing
// listener calls on a server whose connection is not draining: keepIdle
// keeps none then), so the server is stopped on the reaper goroutine. The reaper is scheduled under cs.mu, so that once Close
// has taken cs.mu after draining cs, every server of a connection closed
// before is queued.
func (cs *ChainServer) connClosed(tc *Conn) {
	tc.startOnce.Do(func() { close(tc.started) })
	cs.mu.Lock()
	delete(cs.conns, tc)
	if !tc.draining && !cs.keepIdle(tc.srv) {
		// A draining connection's server is stopped by its drain.
		srv := tc.srv
		srv.stopped.Store(true)
		cs.g.reaper.TrySchedule(func(context.Context) { srv.srv.Stop() })
	}
	gone := cs.retired && len(cs.conns) == 0
	cs.mu.Unlock()
	if gone {
		cs.g.removeServer(cs)
	}
}

// Stats counts a chain server's connections.
type Stats struct {
	// Live are the connections in service; Draining those sent, or about
	// to be sent, a GOAWAY.
	Live, Draining int
	// DrainDeadline is when the last draining connection that was sent its
	// GOAWAY will be closed at the latest (the GOAWAY plus the drain grace
	// time); zero when none has a deadline yet (GOAWAYs delayed by jitter,
	// or a graceful stop, which has none).
	DrainDeadline time.Time
	// Retired reports that the chain left service.
	Retired bool
}

// Stats returns the chain server's connection counts now.
func (cs *ChainServer) Stats() Stats {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	st := Stats{Retired: cs.retired}
	for c := range cs.conns {
		if c.draining {
			st.Draining++
			if c.deadline.After(st.DrainDeadline) {
				st.DrainDeadline = c.deadline
			}
		} else {
			st.Live++
		}
	}
	return st
}

// Rerouted returns the live, not draining connections that t would not
// route to a chain with cs's chain ID. Called with the listener's lock
// held, before a new configuration is published.
func (cs *ChainServer) Rerouted(t *filterchain.Table) []*Conn {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []*Conn
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

// Retire takes cs out of service: it takes no new connection and every
// connection is drained.
func (cs *ChainServer) Retire() {
	cs.mu.Lock()
	cs.retired = true
	conns := make([]*Conn, 0, len(cs.conns))
	for c := range cs.conns {
		conns = append(conns, c)
	}
	gone := len(cs.conns) == 0
	for _, s := range cs.takeIdle() {
		cs.g.reaper.TrySchedule(func(context.Context) { s.srv.Stop() })
	}
	cs.mu.Unlock()
	if gone {
		cs.g.removeServer(cs)
	}
	cs.Drain(conns)
}

// Drain drains each of conns, unless already draining or closed: a GOAWAY
// after a random delay in [0, DrainJitter), then the connection is closed
// when its RPCs have finished or the drain grace time is over. A drain
// started by a graceful close has no jitter and no deadline; after a hard
// close, connections are closed at once. One goroutine per drained
// connection, owned by the Group.
//
// conns were picked earlier (under the listener's lock), so some may have
// closed on their own since, their servers kept idle or already serving
// the chain's next connection: those are not drained, or that drain would
// stop a server the pool or another connection holds. Whether a connection
// is drained or its server kept is decided under cs.mu (here and in
// connClosed), so exactly one of them happens.
func (cs *ChainServer) Drain(conns []*Conn) {
	g := cs.g
	deadline := !g.closing.HasFired()
	cs.mu.Lock()
	todo := conns[:0:0]
	for _, c := range conns {
		if _, open := cs.conns[c]; open && !c.draining {
			c.draining = true
			todo = append(todo, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range todo {
		var delay time.Duration
		if j := g.opts.DrainJitter; j > 0 && deadline {
			delay = g.opts.Rand(j)
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			c.drain(delay, deadline)
		}()
	}
}

// stopAll stops the server of every connection of cs at once, cutting short
// the drains in progress.
func (cs *ChainServer) stopAll() {
	cs.mu.Lock()
	srvs := cs.takeIdle()
	for c := range cs.conns {
		c.srv.stopped.Store(true)
		srvs = append(srvs, c.srv)
	}
	cs.mu.Unlock()
	for _, srv := range srvs {
		srv.info.End(rpcpath.DetailsServerStopped)
		srv.srv.Stop()
	}
}

// maxStartWait bounds how long a drain waits for gRPC to start serving a
// connection it was just handed.
const maxStartWait = time.Second

// Conn is one connection of a ChainServer and the grpc.Server that serves
// it. It also tells when gRPC has started serving it: grpc.Server closes,
// without a byte written, a connection it accepted but whose serving
// goroutine had not started when GracefulStop was called, so a drain waits
// for that point. grpc-go (1.85) sets the connection's deadline (for the
// handshake) right after that check, which is the signal used; closing the
// connection counts as well. A drain also waits until Serve has returned:
// grpc.Server.Serve, once Stop or GracefulStop has begun, blocks until the
// server is done, and Serve runs on the listener's accept goroutine, so a
// GOAWAY sent before it returned would hold every new connection of the
// listener until the drain ended. The embedded *conn keeps its methods
// (ReadOnReady, ...) visible to gRPC; ChainSecurity is what the credentials
// read.
type Conn struct {
	*conn
	cs *ChainServer // immutable
	// srv serves the connection. Serve replaces it (under cs.mu) when it
	// turns out stopped before it took the connection; others read it
	// under cs.mu, Serve without.
	srv     *Server
	started chan struct{} // closed once gRPC serves the conn, or it closed
	served  chan struct{} // closed once Serve has returned
	// startOnce closes started.
	startOnce sync.Once
	draining  bool      // guarded by cs.mu
	deadline  time.Time // guarded by cs.mu; when a drain with a deadline closes it
	// connDeadline is the deadline last set with SetDeadline, in Unix
	// nanoseconds; 0 for none.
	connDeadline atomic.Int64
}

var _ security.Conn = (*Conn)(nil)

// ChainSecurity implements security.Conn: the TLS of the connection's
// chain, nil without transport_socket.
func (c *Conn) ChainSecurity() *security.Chain { return c.cs.sec }

// SetDeadline marks the connection started and sets the deadline.
func (c *Conn) SetDeadline(t time.Time) error {
	c.startOnce.Do(func() { close(c.started) })
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	c.connDeadline.Store(ns)
	return c.conn.SetDeadline(t)
}

// HandshakeDeadline implements security.Conn: the deadline last set with
// SetDeadline, during the handshake gRPC's handshake deadline.
func (c *Conn) HandshakeDeadline() time.Time {
	if ns := c.connDeadline.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Serve hands c to its server. grpc.Server.Serve returns as soon as the
// one-connection listener has given its connection (gRPC serves it on its
// own goroutines), so this does not block; a server may be handed one
// connection after another this way.
//
// A server stopped before it took c (Serve returns grpc.ErrServerStopped)
// leaves c with Serve: a draining connection, or one of a chain or listener
// going away, is closed; any other is served by a new server, since a
// stopped server kept idle by mistake would otherwise close every
// connection of the chain handed to it.
func (c *Conn) Serve() {
	defer close(c.served)
	l := &oneConnListener{c: c}
	err := c.srv.srv.Serve(l)
	if l.handedOver() {
		return // gRPC owns c; err only says the listener is exhausted
	}
	if errors.Is(err, grpc.ErrServerStopped) {
		if srv := c.cs.replaceStopped(c); srv != nil {
			l = &oneConnListener{c: c}
			srv.srv.Serve(l)
			if l.handedOver() {
				return
			}
		}
	}
	// Stopped while Serve ran, or not replaced: c was never served.
	c.Close()
}

// replaceStopped gives c, whose server was found stopped by Serve, a new
// server, and returns it; nil if c is draining, the chain left service or
// the listener is closing (c is then closed).
func (cs *ChainServer) replaceStopped(c *Conn) *Server {
	g := cs.g
	cs.mu.Lock()
	keep := !c.draining && !cs.retired && !g.closing.HasFired() && !g.hardStop.HasFired()
	cs.mu.Unlock()
	if !keep {
		g.opts.Log.Infof("connection %v of filter chain %q: its server was stopped before it served the connection; closing it (draining, or its chain or listener going away)", c.Source(), cs.chain.Name)
		return nil
	}
	srv := cs.newServer()
	cs.mu.Lock()
	keep = !c.draining && !cs.retired && !g.closing.HasFired() && !g.hardStop.HasFired()
	if keep {
		c.srv = srv
	}
	cs.mu.Unlock()
	if !keep {
		srv.Stop()
		return nil
	}
	g.opts.Log.Warningf("connection %v of filter chain %q: its server was stopped before it served the connection (grpc.ErrServerStopped); serving it with a new server", c.Source(), cs.chain.Name)
	return srv
}

// stopping returns c's server, marked stopped: its drain is about to stop
// it.
func (c *Conn) stopping() *Server {
	c.cs.mu.Lock()
	defer c.cs.mu.Unlock()
	c.srv.stopped.Store(true)
	return c.srv
}

// drain waits for delay, sends GOAWAY and waits for the connection's RPCs
// to end, stopping its server when the drain grace time (if deadline) runs
// out; a hard stop cuts every phase short. Before the GOAWAY it waits
// (briefly) until gRPC has started serving the connection, so that it is
// not closed unserved, and until Serve has returned, so that the accept
// goroutine is not held. The grace deadline is a timer, not a goroutine.
func (c *Conn) drain(delay time.Duration, deadline bool) {
	g := c.cs.g
	if !(g.wait(c.started, maxStartWait) && g.wait(c.served, maxStartWait)) && !g.hardStop.HasFired() {
		g.opts.Log.Warningf("connection %v: gRPC did not start serving it within %v; draining anyway", c.Source(), maxStartWait)
	}
	if delay > 0 {
		g.wait(g.graceful.Done(), delay)
	}
	s := c.stopping()
	srv := s.srv
	if g.hardStop.HasFired() {
		s.info.End(rpcpath.DetailsServerStopped)
		srv.Stop()
		return
	}
	if !deadline {
		srv.GracefulStop()
		return
	}
	c.cs.mu.Lock()
	c.deadline = g.opts.Clock.Now().Add(g.opts.DrainGrace)
	c.cs.mu.Unlock()
	stopped := make(chan struct{})
	t := g.opts.Clock.AfterFunc(g.opts.DrainGrace, func() {
		g.opts.Log.Infof("drain grace time (%v) over: closing connection %v of filter chain %q", g.opts.DrainGrace, c.Source(), c.cs.chain.Name)
		s.info.End(rpcpath.DetailsDrainTimeout)
		srv.Stop()
		close(stopped)
	})
	srv.GracefulStop()
	if !t.Stop() {
		<-stopped // the timer's function has run or is running: wait for it
	}
}

// errOneConnDone is what oneConnListener.Accept returns once its connection
// was taken. It is not temporary, so grpc.Server.Serve returns.
var errOneConnDone = errors.New("xds: connection handed over")

// oneConnListener is what a connection's server serves it from: Accept
// returns the connection once, then fails, so Serve returns at once while
// gRPC keeps serving the connection.
type oneConnListener struct {
	c *Conn // immutable; owned by gRPC once handed over
	// state is listenerOpen, then listenerHandedOver (the first Accept) or
	// listenerClosed (a Close before any Accept).
	state atomic.Int32
}

const (
	listenerOpen int32 = iota
	listenerHandedOver
	listenerClosed
)

// Accept returns the connection the first time, errOneConnDone after, or
// once the listener is closed.
func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.state.CompareAndSwap(listenerOpen, listenerHandedOver) {
		return nil, errOneConnDone
	}
	return l.c, nil
}

// Close closes the listener. It leaves the connection alone: once handed
// over gRPC owns it, and if it never was (the server was stopped before
// or during Serve), Conn.Serve decides what becomes of it.
func (l *oneConnListener) Close() error {
	l.state.CompareAndSwap(listenerOpen, listenerClosed)
	return nil
}

// handedOver reports whether Accept gave the connection to gRPC.
func (l *oneConnListener) handedOver() bool { return l.state.Load() == listenerHandedOver }

// Addr returns the connection's local address.
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }
