package xds

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds/filterchain"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/syncutil"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
	"github.com/proxyless-grpc/xds/xdsclient"
)

// listenerParams are the inputs of newListenerWrapper.
type listenerParams struct {
	lis      net.Listener
	addr     netip.AddrPort // lis's address, IPv4-mapped addresses unmapped
	name     string         // the Listener resource to watch
	opts     *serverOptions
	client   *xdsclient.Client
	services []serviceRegistration // not modified after the first Serve
}

// activeConfig is the configuration a listener serves new connections with:
// the compiled Listener and the chainServer of each of its filter chains.
// Immutable, except for the log-once flag.
type activeConfig struct {
	table   *filterchain.Table
	servers map[*filterchain.FilterChain]*chainServer
	// loggedNoChain is set by the first connection that matched no chain,
	// so that a misconfiguration is logged once per configuration.
	loggedNoChain atomic.Bool
}

// listenerWrapper serves one listener passed to Serve: it watches the
// listener's Listener resource and its RouteConfigurations, keeps the serving
// mode, and hands each accepted connection to the chainServer of its filter
// chain.
//
// Every xDS event is handled on the wrapper's own serializer, so that the
// user's serving-mode callback and the wrapper's work never hold up the
// shared xDS client. Fields are grouped by owner below.
type listenerWrapper struct {
	// Immutable after newListenerWrapper.
	listenerParams
	log       *prefixLogger
	metrics   *metrics.Listener // nil without a MeterProvider
	hsLog     handshakeLog      // rate-limits handshake failure logs; see handshakeFailed
	ser       *syncutil.CallbackSerializer
	cancelLDS func()
	closing   *syncutil.Event // fired when close starts; the accept loop then exits quietly
	graceful  *syncutil.Event // fired by GracefulStop: drains skip their jitter delay
	hardStop  *syncutil.Event // fired by Stop: drains stop their servers at once
	serveDone chan struct{}   // closed when the accept loop has returned
	// reaper stops the grpc.Servers of connections that closed on their
	// own (a server holds gRPC resources, such as its channelz entry, until
	// stopped); closed by close, after every other server has stopped.
	reaper *syncutil.CallbackSerializer

	// active is what the accept path serves with; nil when not serving.
	// Stored only under connMu, on the serializer or in close.
	active atomic.Pointer[activeConfig]
	// connMu makes the choice of a chainServer for a new connection atomic
	// with respect to a configuration change: apply decides which
	// chainServers keep their connections by looking at those connections,
	// and no connection may join one between that look and the swap of
	// active. It is taken once per accepted connection, never per RPC.
	// Lock order: connMu, then chainServer.mu.
	connMu sync.Mutex

	// mu guards servers.
	mu sync.Mutex
	// servers are the chainServers of the active configuration and the
	// retired ones that still have connections; a retired chainServer is
	// removed when its last connection has closed.
	servers map[*chainServer]struct{}
	// wg counts the goroutines of every chainServer (drains); close waits
	// for it.
	wg sync.WaitGroup

	// Only touched on the serializer.
	mode       connectivity.ServingMode // ServingModeStarting until the first transition
	currentLDS *xdsresource.Listener    // the applied Listener; nil when not serving
	pending    *xdsresource.Listener    // a Listener waiting for its RDS answers
	rds        map[string]*rdsState     // RDS watches by resource name
	inlineBad  bool                     // inline routes logged as a configuration error
	// connErrLogged: a connectivity error was logged as a warning since the
	// last Listener answer; later ones are logged at info level.
	connErrLogged bool
}

// newListenerWrapper starts watching p.name. The caller must call serve and,
// eventually, close.
func newListenerWrapper(p listenerParams) *listenerWrapper {
	lw := &listenerWrapper{
		listenerParams: p,
		log:            newPrefixLogger("[listener %v]", p.lis.Addr()),
		metrics:        p.opts.metrics.Listener(p.addr.String()),
		ser:            syncutil.NewCallbackSerializer(),
		closing:        syncutil.NewEvent(),
		graceful:       syncutil.NewEvent(),
		hardStop:       syncutil.NewEvent(),
		serveDone:      make(chan struct{}),
		reaper:         syncutil.NewCallbackSerializer(),
		servers:        make(map[*chainServer]struct{}),
		mode:           connectivity.ServingModeStarting,
		rds:            make(map[string]*rdsState),
	}
	lw.log.Infof("watching Listener %q", p.name)
	lw.cancelLDS = xdsclient.Watch[*xdsresource.Listener](p.client, xdsresource.ListenerType, p.name, &ldsWatcher{lw: lw})
	return lw
}

// schedule runs f on the serializer and then calls onDone, the xDS client's
// flow control; after close, f is skipped and onDone called at once.
func (lw *listenerWrapper) schedule(f func(), onDone func()) {
	lw.ser.ScheduleOr(func(ctx context.Context) {
		if ctx.Err() == nil {
			f()
		}
		onDone()
	}, onDone)
}

// ldsWatcher hands the xDS client's Listener callbacks to the serializer.
type ldsWatcher struct{ lw *listenerWrapper }

func (w *ldsWatcher) ResourceChanged(l *xdsresource.Listener, onDone func()) {
	w.lw.schedule(func() { w.lw.handleListener(l) }, onDone)
}

func (w *ldsWatcher) ResourceError(err error, onDone func()) {
	w.lw.schedule(func() { w.lw.handleListenerError(err) }, onDone)
}

func (w *ldsWatcher) AmbientError(err error, onDone func()) {
	// A NACKed update or an unreachable control plane: the last good
	// configuration keeps serving (gRFC A36), whatever the mode.
	w.lw.schedule(func() { w.lw.handleListenerAmbient(err) }, onDone)
}

// handleListenerAmbient logs an error that leaves the configuration as it
// is, once: a NACK's reasons are logged as a warning by the xDS client, so
// here at info level; a connectivity error, which repeats on every
// reconnection attempt, is a warning the first time after the last Listener
// answer and info after. Only called on the serializer.
func (lw *listenerWrapper) handleListenerAmbient(err error) {
	var kind xdsclient.ErrorKind
	if xe := (*xdsclient.Error)(nil); errors.As(err, &xe) {
		kind = xe.Kind
	}
	switch {
	case kind == xdsclient.KindNACK:
		lw.log.Infof("Listener %q: keeping the last good configuration: %v", lw.name, err)
	case kind == xdsclient.KindConnection && lw.connErrLogged:
		lw.log.Infof("Listener %q: %v", lw.name, err)
	default:
		lw.connErrLogged = kind == xdsclient.KindConnection
		lw.log.Warningf("Listener %q: %v", lw.name, err)
	}
}

// handleListener takes a new Listener. Only called on the serializer.
func (lw *listenerWrapper) handleListener(l *xdsresource.Listener) {
	lw.connErrLogged = false
	if err := l.Table.CheckAddress(lw.addr); err != nil {
		// Not a reason to NACK, but the server must not serve (gRFC A36).
		lw.pending = nil
		lw.stopServing(err)
		return
	}
	lw.pending = l // replaces any older pending Listener
	lw.startRDSWatches(l)
	lw.maybeApply()
}

// handleListenerError handles a Listener that does not exist, was deleted,
// or was NACKed with no good version: not serving, every connection drained.
// Only called on the serializer.
func (lw *listenerWrapper) handleListenerError(err error) {
	lw.connErrLogged = false
	lw.pending = nil
	lw.stopServing(err)
}

// maybeApply applies the pending Listener once each of its RDS resources
// has had a first answer (gRFC A36). Only called on the serializer.
func (lw *listenerWrapper) maybeApply() {
	if lw.pending == nil || !lw.rdsReady(lw.pending) {
		return
	}
	l := lw.pending
	lw.pending = nil
	lw.apply(l)
}

// apply makes l the active configuration. A chain whose ID is unchanged
// keeps its chainServer and the connections that l still routes to it; its
// connections that l routes to another chain (or to none) are drained. Every
// other old chainServer is retired, all its connections drained. Only called
// on the serializer.
func (lw *listenerWrapper) apply(l *xdsresource.Listener) {
	cfg := &activeConfig{table: l.Table, servers: make(map[*filterchain.FilterChain]*chainServer)}
	var created []*chainServer
	lw.connMu.Lock()
	old := lw.active.Load()
	oldByID := make(map[string]*chainServer)
	if old != nil {
		for _, cs := range old.servers {
			oldByID[cs.chain.ID] = cs
		}
	}
	kept := make(map[*chainServer]bool)
	rerouted := make(map[*chainServer][]*trackedConn)
	for _, fc := range l.Table.Chains() {
		if cs := oldByID[fc.ID]; cs != nil && !kept[cs] {
			// Unchanged chain: its connections stay, except those the new
			// table would route to another chain.
			kept[cs] = true
			cfg.servers[fc] = cs
			if r := cs.rerouted(l.Table); len(r) > 0 {
				rerouted[cs] = r
			}
			continue
		}
		cs := newChainServer(lw, fc, lw.routeSource(fc))
		cfg.servers[fc] = cs
		created = append(created, cs)
	}
	var retired []*chainServer
	if old != nil {
		for _, cs := range old.servers {
			if !kept[cs] {
				retired = append(retired, cs)
			}
		}
	}
	drained := drainCount(retired, rerouted)
	lw.active.Store(cfg)
	lw.connMu.Unlock()

	lw.mu.Lock()
	for _, cs := range created {
		lw.servers[cs] = struct{}{}
	}
	lw.mu.Unlock()
	for cs, conns := range rerouted {
		cs.drainConns(conns)
	}
	for _, cs := range retired {
		cs.retire()
	}
	lw.noteDrain("Listener update", drained)
	lw.currentLDS = l
	lw.cancelUnusedRDSWatches()
	lw.logInlineRouteErrors(l)
	lw.log.Infof("applied Listener %q: %d filter chain(s), %d kept, %d new, %d kept chain(s) with rerouted connections", lw.name, len(cfg.servers), len(kept), len(created), len(rerouted))
	if ignored := l.Table.Ignored(); len(ignored) > 0 && logger.V(2) {
		// Accepted fields without effect (gRFC A29's ignored fields,
		// deprecated duplicates): worth knowing when debugging, not a
		// problem.
		lw.log.Infof("Listener %q: %d field(s) accepted and ignored: %s", lw.name, len(ignored), strings.Join(ignored, "; "))
	}
	lw.setMode(connectivity.ServingModeServing, nil)
}

// routeSource returns where fc's RPCs find their routes. Only called on the
// serializer, after startRDSWatches for fc's Listener.
func (lw *listenerWrapper) routeSource(fc *filterchain.FilterChain) routeSource {
	if name := fc.HCM.RDSName; name != "" {
		return routeSource{rds: lw.rds[name]}
	}
	return routeSource{fixed: inlineRoutes(fc, lw.metrics)}
}

// stopServing enters "not serving" because of err: new connections are
// closed and every existing one is drained (gRFC A36). Only called on the
// serializer.
func (lw *listenerWrapper) stopServing(err error) {
	lw.connMu.Lock()
	old := lw.active.Load()
	var retired []*chainServer
	if old != nil {
		for _, cs := range old.servers {
			retired = append(retired, cs)
		}
	}
	drained := drainCount(retired, nil)
	lw.active.Store(nil)
	lw.connMu.Unlock()
	for _, cs := range retired {
		cs.retire()
	}
	lw.noteDrain("not serving", drained)
	lw.currentLDS = nil
	lw.cancelUnusedRDSWatches()
	lw.setMode(connectivity.ServingModeNotServing, err)
}

// setMode records a serving mode and tells the user of a transition, once.
// Each transition is logged once: at warning level without a serving-mode
// callback, at info level with one (the callback is the user's log). Only
// called on the serializer, never under a lock.
func (lw *listenerWrapper) setMode(mode connectivity.ServingMode, err error) {
	if lw.mode == mode {
		if err != nil {
			lw.log.Warningf("still not serving: %v", err)
		}
		return
	}
	was := lw.mode
	lw.mode = mode
	switch {
	case mode == connectivity.ServingModeServing:
		lw.metrics.ServingChanged(1)
	case was == connectivity.ServingModeServing:
		lw.metrics.ServingChanged(-1)
	}
	cb := lw.opts.modeCallback
	logf := lw.log.Warningf
	if cb != nil {
		logf = lw.log.Infof
	}
	if mode == connectivity.ServingModeServing {
		logf("serving (Listener %q)", lw.name)
	} else {
		logf("not serving (Listener %q): %v", lw.name, err)
	}
	if cb != nil {
		cb(lw.lis.Addr(), ServingModeChangeArgs{Mode: mode, Err: err})
	}
}

// logInlineRouteErrors does gRFC A36 configuration error logging for the
// inline route configurations of an applied Listener. Only called on the
// serializer.
func (lw *listenerWrapper) logInlineRouteErrors(l *xdsresource.Listener) {
	bad := false
	for _, fc := range l.Table.Chains() {
		if fc.HCM.Routes == nil {
			continue
		}
		if msg := routeTableProblem(&routeTable{router: fc.HCM.Routes}); msg != "" {
			lw.log.Warningf("configuration error in filter chain %q: %s", fc.Name, msg)
			bad = true
		}
	}
	if lw.inlineBad && !bad {
		lw.log.Warningf("configuration error fixed: no inline route configuration fails RPCs")
	}
	lw.inlineBad = bad
}

// serve is the accept loop of Serve. It returns nil once close has started,
// or the error of a failed Accept.
func (lw *listenerWrapper) serve() error {
	defer close(lw.serveDone)
	var delay time.Duration
	for {
		c, err := lw.lis.Accept()
		if err != nil {
			if lw.closing.HasFired() {
				return nil
			}
			var te interface{ Temporary() bool }
			if !errors.As(err, &te) || !te.Temporary() {
				lw.log.Errorf("accept failed, no longer serving new connections: %v", err)
				return err
			}
			delay = nextAcceptDelay(delay)
			lw.log.Warningf("accept failed, retrying in %v: %v", delay, err)
			if !lw.sleep(delay) {
				return nil
			}
			continue
		}
		delay = 0
		lw.handleConn(c)
	}
}

// nextAcceptDelay is the backoff after a temporary Accept error: 5ms
// doubling to 1s, as net/http does.
func nextAcceptDelay(d time.Duration) time.Duration {
	if d == 0 {
		return 5 * time.Millisecond
	}
	return min(2*d, time.Second)
}

// sleep waits for d, or returns false early if close has started.
func (lw *listenerWrapper) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-lw.closing.Done():
		return false
	}
}

// handleConn gives an accepted connection to its filter chain's server, or
// closes it without writing to it when not serving or no chain matches
// (gRFC A36). Called only from the accept loop.
func (lw *listenerWrapper) handleConn(c net.Conn) {
	lw.metrics.Accepted()
	src, ok1 := addrPortOf(c.RemoteAddr())
	dst, ok2 := addrPortOf(c.LocalAddr())
	if !ok1 || !ok2 {
		lw.log.Warningf("closing a connection with non-TCP addresses %v -> %v", c.RemoteAddr(), c.LocalAddr())
		c.Close()
		return
	}
	for {
		lw.connMu.Lock()
		cfg := lw.active.Load()
		if cfg == nil {
			lw.connMu.Unlock()
			c.Close()
			lw.metrics.RejectedNotServing()
			return
		}
		fc := cfg.table.Lookup(src, dst)
		if fc == nil {
			lw.connMu.Unlock()
			c.Close()
			lw.metrics.RejectedNoFilterChain()
			if !cfg.loggedNoChain.Swap(true) {
				lw.log.Warningf("closing connection %v -> %v: no filter chain matches it and the Listener has no default chain (logged once per configuration)", src, dst)
			}
			return
		}
		tc := cfg.servers[fc].add(c, src, dst)
		if tc != nil {
			tc.serve()
		}
		lw.connMu.Unlock()
		if tc != nil {
			return
		}
		// The chainServer is retired: a configuration change won a race
		// with this connection. Look again in the newer configuration.
	}
}

// forceStop turns a graceful close in progress into a hard one: drains not
// yet at their GOAWAY stop their servers at once, and every connection's
// server is stopped, which ends the GracefulStops waiting for RPCs. Safe to
// call concurrently with close.
func (lw *listenerWrapper) forceStop() {
	lw.hardStop.Fire()
	lw.mu.Lock()
	servers := make([]*chainServer, 0, len(lw.servers))
	for cs := range lw.servers {
		servers = append(servers, cs)
	}
	lw.mu.Unlock()
	for _, cs := range servers {
		cs.stopAll()
	}
}

// close stops the listener: no new connection is accepted, the watches are
// cancelled, and every chainServer is stopped (gracefully or not); it returns
// once every goroutine of the listener has exited.
func (lw *listenerWrapper) close(graceful bool) {
	lw.closing.Fire()
	if graceful {
		lw.graceful.Fire()
	} else {
		lw.hardStop.Fire()
	}
	lw.lis.Close()
	<-lw.serveDone
	// cancelLDS never waits: a Listener callback still running only
	// schedules onto lw.ser, which skips it once closed.
	lw.cancelLDS()
	lw.ser.TrySchedule(func(context.Context) {
		for name, st := range lw.rds {
			delete(lw.rds, name)
			st.cancel()
		}
	})
	lw.ser.Close()
	<-lw.ser.Done()
	if lw.mode == connectivity.ServingModeServing {
		// The serializer is done: lw.mode can be read here.
		lw.metrics.ServingChanged(-1)
	}

	lw.connMu.Lock()
	lw.active.Store(nil)
	lw.connMu.Unlock()
	lw.mu.Lock()
	servers := make([]*chainServer, 0, len(lw.servers))
	for cs := range lw.servers {
		servers = append(servers, cs)
	}
	lw.mu.Unlock()
	for _, cs := range servers {
		// Connections already draining keep their drain, which sees the
		// stop events.
		cs.retire()
	}
	if !graceful {
		for _, cs := range servers {
			cs.stopAll()
		}
	}
	lw.wg.Wait()
	lw.reaper.Close()
	<-lw.reaper.Done()
}
