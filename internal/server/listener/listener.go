// Package listener runs one listener of an xDS server (gRFC A36): it
// watches the listener's Listener resource, keeps its serving mode, accepts
// connections and hands each to the server of its filter chain, and applies
// each new Listener by swapping the active configuration at once.
//
// A Listener update crosses it in this order: the xDS client calls
// ldsWatcher on its own goroutine, which schedules handleListener on the
// listener's serializer; the Listener's address is checked, its RDS
// resources are watched (package rds), and once each has answered, apply
// builds the new active configuration (reusing the chain servers of
// unchanged chains), publishes it with one atomic store, drains the
// connections that changed chains, and tells the serving-mode callback.
package listener

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/server/connserver"
	"github.com/proxyless-grpc/xds/internal/server/rds"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/server/security"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
	"github.com/proxyless-grpc/xds/internal/server/status"
	"github.com/proxyless-grpc/xds/internal/syncutil"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

// XDSClient is what a Listener needs of the xDS client: watches (of its
// Listener, and of RouteConfigurations through package rds) and the
// bootstrap (its certificate provider instances). *xdsclient.Client
// satisfies it; tests use a fake that delivers updates and errors on
// demand. Watchers are called as xdsclient.ResourceWatcher documents: one
// call at a time, each calling onDone when done; no call starts once cancel
// has returned.
type XDSClient interface {
	rds.XDSClient
	BootstrapConfig() *bootstrap.Config
}

// The production client is one.
var _ XDSClient = (*xdsclient.Client)(nil)

// Params are the inputs of New.
type Params struct {
	// Lis is the listening socket; the Listener owns it.
	Lis net.Listener
	// Addr is Lis's address, IPv4-mapped addresses unmapped.
	Addr netip.AddrPort
	// Name is the Listener resource to watch.
	Name string
	// Client is the xDS client to watch with.
	Client XDSClient
	// ModeCallback is told of every serving-mode transition, on the
	// listener's serializer and never under a lock; nil logs transitions at
	// warning level instead.
	ModeCallback func(addr net.Addr, mode connectivity.ServingMode, err error)
	// ModeObserver, when not nil, is told of every serving-mode transition
	// too, before ModeCallback and whether or not there is one (the server's
	// readiness report); same calling rules.
	ModeObserver func(mode connectivity.ServingMode)
	// Conns configures the per-connection servers (its Log is set by New).
	Conns connserver.Options
	// Metrics records the listener's metrics; nil records none.
	Metrics *metrics.Listener
	// NonXDSCreds describes the server's transport credentials when they
	// are not xDS credentials; empty when they are. Filter chains with a
	// transport_socket are then served with those credentials (gRFC A29),
	// and the listener says so: a warning per Listener, a metric per
	// connection, and its status.
	NonXDSCreds string
	// UnknownCreds, when not empty, says why the server cannot tell what
	// its transport credentials are: they might serve a filter chain that
	// asks for TLS in plaintext, so the connections of such chains are
	// closed unserved, and the listener says so (a warning per Listener, a
	// rejection metric per connection, and its status).
	UnknownCreds string
}

// active is what the accept path serves with: the compiled Listener and
// the chain server of each of its filter chains. Immutable, except for the
// log-once flag.
type active struct {
	res     *xdsresource.Listener // what table was compiled from
	table   *filterchain.Table
	servers map[*filterchain.FilterChain]*connserver.ChainServer
	// loggedNoChain is set by the first connection that matched no chain,
	// so that a misconfiguration is logged once per configuration.
	loggedNoChain atomic.Bool
}

// Listener serves one listener passed to Serve.
//
// Its xDS events (Listener and RouteConfiguration updates) are handled on
// its own serializer, so that the user's serving-mode callback and the
// listener's work never hold up the shared xDS client.
type Listener struct {
	// Immutable after New.
	p         Params
	log       *serverlog.Logger
	ser       *syncutil.CallbackSerializer
	rds       *rds.Handler // only used on the serializer
	conns     *connserver.Group
	hsLog     *security.HandshakeLog
	obs       *rpcpath.ListenerShared // what its routes share: counters, filter state
	cancelLDS func()
	closing   *syncutil.Event // fired when Close starts; the accept loop then exits quietly
	serveDone chan struct{}   // closed when the accept loop has returned

	// modeNow is the serving mode for the status page: set with mode, read
	// anywhere.
	modeNow atomic.Pointer[modeState]

	// cur is what the accept path serves with; nil when not serving.
	// Stored only under connMu, on the serializer or in Close.
	cur atomic.Pointer[active]
	// connMu makes the addition of a connection to a chain server atomic
	// with respect to a configuration change: apply decides which chain
	// servers keep their connections by looking at those connections, and
	// no connection may join one between that look and the swap of cur. It
	// is taken once per accepted connection, never per RPC, and never while
	// calling gRPC. Lock order: connMu, then a ChainServer's lock.
	connMu sync.Mutex

	// Only touched on the serializer.
	mode      connectivity.ServingMode // ServingModeStarting until the first transition
	applied   *xdsresource.Listener    // the applied Listener; nil when not serving
	pending   *xdsresource.Listener    // a Listener waiting for its RDS answers
	inlineBad bool                     // inline routes logged as a configuration error
	// connErrLogged: a connectivity error was logged as a warning since the
	// last Listener answer; later ones are logged at info level.
	connErrLogged bool
}

// New starts watching p.Name. The caller must call Serve and, eventually,
// Close.
func New(p Params) *Listener {
	l := &Listener{
		p:         p,
		log:       serverlog.New("[listener %v]", p.Lis.Addr()),
		ser:       syncutil.NewCallbackSerializer(),
		closing:   syncutil.NewEvent(),
		serveDone: make(chan struct{}),
		mode:      connectivity.ServingModeStarting,
	}
	l.hsLog = security.NewHandshakeLog(l.log, p.Metrics)
	l.obs = &rpcpath.ListenerShared{Metrics: p.Metrics, Counts: &rpcpath.Counts{}}
	p.Conns.Log = l.log
	l.conns = connserver.NewGroup(p.Conns)
	l.rds = rds.New(rds.Params{
		Client:         p.Client,
		Schedule:       l.schedule,
		OnAnswer:       l.maybeApply,
		ListenerShared: l.obs,
		Log:            l.log,
	})
	l.log.Infof("watching Listener %q", p.Name)
	l.cancelLDS = xdsclient.Watch[*xdsresource.Listener](p.Client, xdsresource.ListenerType, p.Name, &ldsWatcher{l: l})
	return l
}

// schedule runs f on the serializer and then calls onDone, the xDS client's
// flow control; after Close, f is skipped and onDone called at once.
func (l *Listener) schedule(f func(), onDone func()) {
	l.ser.ScheduleOr(func(ctx context.Context) {
		if ctx.Err() == nil {
			f()
		}
		onDone()
	}, onDone)
}

// ldsWatcher hands the xDS client's Listener callbacks to the serializer.
type ldsWatcher struct{ l *Listener }

func (w *ldsWatcher) ResourceChanged(r *xdsresource.Listener, onDone func()) {
	w.l.schedule(func() { w.l.handleListener(r) }, onDone)
}

func (w *ldsWatcher) ResourceError(err error, onDone func()) {
	w.l.schedule(func() { w.l.handleListenerError(err) }, onDone)
}

func (w *ldsWatcher) AmbientError(err error, onDone func()) {
	// A NACKed update or an unreachable control plane: the last good
	// configuration keeps serving (gRFC A36), whatever the mode.
	w.l.schedule(func() { w.l.handleListenerAmbient(err) }, onDone)
}

// handleListener takes a new Listener. Only called on the serializer.
func (l *Listener) handleListener(r *xdsresource.Listener) {
	l.connErrLogged = false
	if err := r.Table.CheckAddress(l.p.Addr); err != nil {
		// Not a reason to NACK, but the server must not serve (gRFC A36).
		l.pending = nil
		l.stopServing(l.notServingError(err))
		return
	}
	l.pending = r // replaces any older pending Listener
	l.rds.Watch(r)
	l.maybeApply()
}

// handleListenerError handles a Listener that does not exist, was deleted,
// or was NACKed with no good version: not serving, every connection drained.
// Only called on the serializer.
func (l *Listener) handleListenerError(err error) {
	l.connErrLogged = false
	l.pending = nil
	l.stopServing(l.notServingError(err))
}

// notServingError adds to the error of a Listener the server cannot serve
// what an operator needs to publish the right one: the name of the Listener
// requested, when err does not already say it, and, for a socket on every
// interface that Go reports as [::] (a dual-stack host, even for
// net.Listen("tcp", "0.0.0.0:p")), that the name has [::], not 0.0.0.0, in
// it. err stays matchable with errors.Is and errors.As.
func (l *Listener) notServingError(err error) error {
	var extra []string
	xe := (*xdsclient.Error)(nil)
	isXDS := errors.As(err, &xe)
	if !isXDS || xe.Name != l.p.Name {
		extra = append(extra, fmt.Sprintf("requested Listener %q", l.p.Name))
	}
	// The hint is for a name or an address that does not match, not for a
	// Listener that was found and rejected.
	nameOrAddr := !isXDS || xe.Kind == xdsclient.KindDoesNotExist || xe.Kind == xdsclient.KindTimeout
	if a := l.p.Addr.Addr(); nameOrAddr && a.IsUnspecified() && a.Is6() {
		extra = append(extra, fmt.Sprintf("the socket listens on every interface as %s, so the Listener's name has [::], not 0.0.0.0: publish it under that name, or listen on \"tcp4\" or on one IP", l.p.Addr))
	}
	if len(extra) == 0 {
		return err
	}
	return fmt.Errorf("%w (%s)", err, strings.Join(extra, "; "))
}

// handleListenerAmbient logs an error that leaves the configuration as it
// is, once: a NACK's reasons are logged as a warning by the xDS client, so
// here at info level; a connectivity error, which repeats on every
// reconnection attempt, is a warning the first time after the last Listener
// answer and info after. Only called on the serializer.
func (l *Listener) handleListenerAmbient(err error) {
	var kind xdsclient.ErrorKind
	if xe := (*xdsclient.Error)(nil); errors.As(err, &xe) {
		kind = xe.Kind
	}
	switch {
	case kind == xdsclient.KindNACK:
		l.log.Infof("Listener %q: keeping the last good configuration: %v", l.p.Name, err)
	case kind == xdsclient.KindConnection && l.connErrLogged:
		l.log.Infof("Listener %q: %v", l.p.Name, err)
	default:
		l.connErrLogged = kind == xdsclient.KindConnection
		l.log.Warningf("Listener %q: %v", l.p.Name, err)
	}
}

// maybeApply applies the pending Listener once each of its RDS resources
// has had a first answer (gRFC A36). Only called on the serializer.
func (l *Listener) maybeApply() {
	if l.pending == nil || !l.rds.Ready(l.pending) {
		return
	}
	r := l.pending
	l.pending = nil
	l.apply(r)
}

// apply makes r the active configuration. A chain whose ID is unchanged
// keeps its chain server and the connections that r still routes to it; its
// connections that r routes to another chain (or to none) are drained.
// Every other old chain server is retired, all its connections drained.
// Only called on the serializer.
func (l *Listener) apply(r *xdsresource.Listener) {
	chains := r.Table.Chains()
	cfg := &active{res: r, table: r.Table, servers: make(map[*filterchain.FilterChain]*connserver.ChainServer, len(chains))}
	// The new chain servers are built before connMu is taken: which old
	// ones to keep depends only on chain IDs, and only the serializer
	// changes cur.
	old := l.cur.Load()
	oldByID := make(map[string]*connserver.ChainServer)
	if old != nil {
		for _, cs := range old.servers {
			oldByID[cs.Chain().ID] = cs
		}
	}
	kept := make(map[*connserver.ChainServer]bool)
	inline := make(map[*filterchain.HTTPConnectionManager]*rpcpath.Source)
	created := 0
	for _, fc := range chains {
		if cs := oldByID[fc.ID]; cs != nil && !kept[cs] {
			kept[cs] = true
			cfg.servers[fc] = cs
			continue
		}
		cfg.servers[fc] = l.newChainServer(fc, inline)
		created++
	}

	l.connMu.Lock()
	// Unchanged chains keep their connections, except those the new table
	// would route to another chain.
	rerouted := make(map[*connserver.ChainServer][]*connserver.Conn)
	for cs := range kept {
		if c := cs.Rerouted(r.Table); len(c) > 0 {
			rerouted[cs] = c
		}
	}
	var retired []*connserver.ChainServer
	if old != nil {
		for _, cs := range old.servers {
			if !kept[cs] {
				retired = append(retired, cs)
			}
		}
	}
	drained := drainCount(retired, rerouted)
	l.cur.Store(cfg)
	l.connMu.Unlock()

	for cs, conns := range rerouted {
		cs.Drain(conns)
	}
	for _, cs := range retired {
		cs.Retire()
	}
	l.noteDrain("Listener update", drained)
	l.applied = r
	l.rds.Retain(l.applied, l.pending)
	l.logInlineRouteErrors(r)
	if l.log.V(2) {
		l.log.Infof("applied Listener %q: %d filter chain(s), %d kept, %d new, %d kept chain(s) with rerouted connections", l.p.Name, len(cfg.servers), len(kept), created, len(rerouted))
	}
	if ignored := r.Table.Ignored(); len(ignored) > 0 && l.log.V(2) {
		// Accepted fields without effect (gRFC A29's ignored fields,
		// deprecated duplicates): worth knowing when debugging, not a
		// problem.
		l.log.Infof("Listener %q: %d field(s) accepted and ignored: %s", l.p.Name, len(ignored), strings.Join(ignored, "; "))
	}
	l.warnTLSNotApplied(r)
	l.warnAccessLogNotRecorded(r)
	l.setMode(connectivity.ServingModeServing, nil)
}

// warnAccessLogNotRecorded warns, once per applied Listener, of the
// access log operators its chains use that Envoy would give a value but
// this server does not record: they print "-". A log field is no reason
// to NACK a Listener, but whoever reads the log must know why it is empty.
func (l *Listener) warnAccessLogNotRecorded(r *xdsresource.Listener) {
	var notes []string
	seen := map[*accesslog.Config]bool{}
	for _, fc := range r.Table.Chains() {
		if fc.HCM == nil {
			continue
		}
		cfg := fc.HCM.AccessLog
		if cfg == nil || seen[cfg] {
			continue
		}
		seen[cfg] = true
		for _, n := range cfg.NotRecorded() {
			if !slices.Contains(notes, n) {
				notes = append(notes, n)
			}
		}
	}
	if len(notes) == 0 {
		return
	}
	slices.Sort(notes)
	l.log.Warningf("Listener %q: access_log operators this server does not record print \"-\": %s", l.p.Name, strings.Join(notes, "; "))
}

// warnTLSNotApplied warns, once per applied Listener, when some of its
// filter chains ask for TLS that the server's credentials do not give, or
// may not give (their connections are then refused). Only called on the
// serializer.
func (l *Listener) warnTLSNotApplied(r *xdsresource.Listener) {
	if l.p.NonXDSCreds == "" && l.p.UnknownCreds == "" {
		return
	}
	var names []string
	for _, fc := range r.Table.Chains() {
		if fc.Security != nil {
			names = append(names, strconv.Quote(fc.Name))
		}
	}
	if len(names) == 0 {
		return
	}
	if l.p.UnknownCreds != "" {
		l.log.Warningf("Listener %q: %d filter chain(s) ask for TLS (transport_socket), and their connections are REFUSED: the server cannot tell its transport credentials (%s), "+
			"which might serve them in plaintext; pass grpc.Creds(xds.NewServerCredentials(...)) to NewGRPCServer as an option of its own. Chains: %s",
			l.p.Name, len(names), l.p.UnknownCreds, strings.Join(names, ", "))
		return
	}
	l.log.Warningf("Listener %q: %d filter chain(s) ask for TLS (transport_socket), which is NOT applied: the server's credentials are not xDS credentials (%s), so their connections are served with them (gRFC A29); "+
		"pass grpc.Creds(xds.NewServerCredentials(...)) to NewGRPCServer to apply it. Chains: %s",
		l.p.Name, len(names), l.p.NonXDSCreds, strings.Join(names, ", "))
}

// newChainServer builds the chain server of fc: its routes (inline, shared
// by the chains of one HttpConnectionManager through inline, or from RDS),
// its security, and what to release when it is gone. Only called on the
// serializer.
func (l *Listener) newChainServer(fc *filterchain.FilterChain, inline map[*filterchain.HTTPConnectionManager]*rpcpath.Source) *connserver.ChainServer {
	var src *rpcpath.Source
	release := func() {}
	if fc.HCM.RDSName != "" {
		src, release = l.rds.Source(fc.HCM)
	} else if src = inline[fc.HCM]; src == nil {
		src = rpcpath.NewSource(rpcpath.NewRoutes(fc.HCM.Routes, fc.HCM, l.obs))
		inline[fc.HCM] = src
	}
	sec := security.NewChain(fc, l.p.Client.BootstrapConfig().CertProviders, l.hsLog)
	// What the chain's filter configs hold (the ext_authz side channel) is
	// taken before the chain serves and released once it is gone, so that
	// an update keeping it hands it over without closing it (gRFC A83).
	routesRelease, filtersRelease := release, httpfilter.AcquireAll(fc.HCM.Filters)
	release = func() {
		routesRelease()
		filtersRelease()
	}
	return l.conns.NewChainServer(fc, src, sec, release)
}

// stopServing enters "not serving" because of err: new connections are
// closed and every existing one is drained (gRFC A36). Only called on the
// serializer.
func (l *Listener) stopServing(err error) {
	l.connMu.Lock()
	old := l.cur.Load()
	var retired []*connserver.ChainServer
	if old != nil {
		for _, cs := range old.servers {
			retired = append(retired, cs)
		}
	}
	drained := drainCount(retired, nil)
	l.cur.Store(nil)
	l.connMu.Unlock()
	for _, cs := range retired {
		cs.Retire()
	}
	l.noteDrain("not serving", drained)
	l.applied = nil
	l.rds.Retain(l.applied, l.pending)
	l.setMode(connectivity.ServingModeNotServing, err)
}

// setMode records a serving mode and tells the user of a transition, once.
// Each transition is logged once: at warning level without a serving-mode
// callback, at info level with one (the callback is the user's log). Only
// called on the serializer, never under a lock.
func (l *Listener) setMode(mode connectivity.ServingMode, err error) {
	if l.mode == mode {
		if err != nil {
			l.log.Warningf("still not serving: %v", err)
		}
		return
	}
	was := l.mode
	l.mode = mode
	l.modeNow.Store(&modeState{mode: mode, err: err, since: time.Now()})
	switch {
	case mode == connectivity.ServingModeServing:
		l.p.Metrics.ServingChanged(1)
	case was == connectivity.ServingModeServing:
		l.p.Metrics.ServingChanged(-1)
	}
	if obs := l.p.ModeObserver; obs != nil {
		obs(mode)
	}
	cb := l.p.ModeCallback
	switch {
	case cb != nil:
		// The callback is the user's log of transitions; the server's own
		// lines are for debugging (formatting them costs a push).
		if l.log.V(2) {
			l.logMode(l.log.Infof, mode, err)
		}
		cb(l.p.Lis.Addr(), mode, err)
	default:
		l.logMode(l.log.Warningf, mode, err)
	}
}

// modeState is a serving mode, why and since when.
type modeState struct {
	mode  connectivity.ServingMode
	err   error
	since time.Time
}

// Status returns the listener's status now, for people to read: its mode,
// the Listener it serves with, and the connections of every chain server.
// Safe to call from any goroutine.
func (l *Listener) Status() status.Listener {
	st := status.Listener{Addr: l.p.Lis.Addr(), Name: l.p.Name, Mode: connectivity.ServingModeStarting, Counted: l.obs.Counts.Snapshot(), NonXDSCreds: l.p.NonXDSCreds, UnknownCreds: l.p.UnknownCreds}
	if m := l.modeNow.Load(); m != nil {
		st.Mode, st.Err, st.Since = m.mode, m.err, m.since
	}
	cfg := l.cur.Load()
	inService := make(map[*connserver.ChainServer]bool)
	if cfg != nil {
		st.Applied = cfg.res.Raw()
		for _, fc := range cfg.table.Chains() {
			cs := cfg.servers[fc]
			inService[cs] = true
			st.Chains = append(st.Chains, chainStatus(fc, cs))
		}
	}
	for _, cs := range l.conns.ChainServers() {
		if inService[cs] {
			continue
		}
		if c := chainStatus(cs.Chain(), cs); c.Conns.Live+c.Conns.Draining > 0 {
			st.Retired = append(st.Retired, c)
		}
	}
	return st
}

func chainStatus(fc *filterchain.FilterChain, cs *connserver.ChainServer) status.Chain {
	return status.Chain{Chain: fc, Routes: cs.Routes().Load(), Conns: cs.Stats()}
}

// logMode logs a serving-mode transition with logf.
func (l *Listener) logMode(logf func(string, ...any), mode connectivity.ServingMode, err error) {
	if mode == connectivity.ServingModeServing {
		logf("serving (Listener %q)", l.p.Name)
	} else {
		logf("not serving (Listener %q): %v", l.p.Name, err)
	}
}

// logInlineRouteErrors does gRFC A36 configuration error logging for the
// inline route configurations of an applied Listener. Only called on the
// serializer.
func (l *Listener) logInlineRouteErrors(r *xdsresource.Listener) {
	bad := false
	for _, fc := range r.Table.Chains() {
		if fc.HCM.Routes == nil {
			continue
		}
		if msg := rpcpath.Problem(fc.HCM.Routes, nil); msg != "" {
			l.log.Warningf("configuration error in filter chain %q: %s", fc.Name, msg)
			bad = true
		}
	}
	if l.inlineBad && !bad {
		l.log.Warningf("configuration error fixed: no inline route configuration fails RPCs")
	}
	l.inlineBad = bad
}

// drainCount is the number of connections a configuration change drains:
// the live connections of the retired chain servers and the rerouted
// connections of the kept ones. Called with connMu held, before the change
// is published, so that no connection joins or leaves a drain in between.
func drainCount(retired []*connserver.ChainServer, rerouted map[*connserver.ChainServer][]*connserver.Conn) int {
	n := 0
	for _, cs := range retired {
		n += cs.Stats().Live
	}
	for _, conns := range rerouted {
		n += len(conns)
	}
	return n
}

// noteDrain logs and counts a drain of n connections that has started, once
// per configuration change; nothing when n is 0. Only called on the
// serializer.
func (l *Listener) noteDrain(why string, n int) {
	if n == 0 {
		return
	}
	l.p.Metrics.DrainStarted()
	l.log.Infof("draining %d connection(s) (%s): GOAWAY, then closed after at most %v", n, why, l.p.Conns.DrainGrace)
}

// Serve is the accept loop. It returns nil once Close has started, or the
// error of a failed Accept.
func (l *Listener) Serve() error {
	defer close(l.serveDone)
	var delay time.Duration
	for {
		c, err := l.p.Lis.Accept()
		if err != nil {
			if l.closing.HasFired() {
				return nil
			}
			var te interface{ Temporary() bool }
			if !errors.As(err, &te) || !te.Temporary() {
				l.log.Errorf("accept failed, no longer serving new connections: %v", err)
				return err
			}
			delay = nextAcceptDelay(delay)
			l.log.Warningf("accept failed, retrying in %v: %v", delay, err)
			if !l.sleep(delay) {
				return nil
			}
			continue
		}
		delay = 0
		l.handleConn(c)
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

// sleep waits for d, or returns false early if Close has started.
func (l *Listener) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.closing.Done():
		return false
	}
}

// handleConn gives an accepted connection to its filter chain's server, or
// closes it without writing to it when not serving or no chain matches
// (gRFC A36). Called only from the accept loop.
//
// The connection's grpc.Server is built before connMu is taken; if the
// configuration changed meanwhile, it is dropped and the connection looked
// up again in the new one.
func (l *Listener) handleConn(c net.Conn) {
	l.p.Metrics.Accepted()
	src, ok1 := connserver.AddrPortOf(c.RemoteAddr())
	dst, ok2 := connserver.AddrPortOf(c.LocalAddr())
	if !ok1 || !ok2 {
		l.log.Warningf("closing a connection with non-TCP addresses %v -> %v", c.RemoteAddr(), c.LocalAddr())
		c.Close()
		return
	}
	for {
		cfg := l.cur.Load()
		if cfg == nil {
			c.Close()
			l.p.Metrics.RejectedNotServing()
			return
		}
		fc := cfg.table.Lookup(src, dst)
		if fc == nil {
			c.Close()
			l.p.Metrics.RejectedNoFilterChain()
			if !cfg.loggedNoChain.Swap(true) {
				l.log.Warningf("closing connection %v -> %v: no filter chain matches it and the Listener has no default chain (logged once per configuration)", src, dst)
			}
			return
		}
		if fc.Security != nil && l.p.UnknownCreds != "" {
			// warnTLSNotApplied said why when the Listener was applied.
			c.Close()
			l.p.Metrics.RejectedUnknownCreds()
			return
		}
		if fc.Security != nil && l.p.NonXDSCreds != "" {
			l.p.Metrics.TLSNotApplied()
		}
		cs := cfg.servers[fc]
		srv := cs.NewServer()
		var tc *connserver.Conn
		l.connMu.Lock()
		if l.cur.Load() == cfg {
			tc = cs.Add(c, src, dst, srv)
		}
		l.connMu.Unlock()
		if tc != nil {
			tc.Serve()
			return
		}
		// A configuration change won a race with this connection: look
		// again in the newer configuration.
		srv.Stop()
	}
}

// ForceStop turns a graceful Close in progress into a hard one. Safe to
// call concurrently with Close.
func (l *Listener) ForceStop() { l.conns.ForceStop() }

// Close stops the listener: no new connection is accepted, the watches are
// cancelled, and every connection is drained (graceful) or closed; it
// returns once every goroutine of the listener has exited.
func (l *Listener) Close(graceful bool) {
	l.closing.Fire()
	l.conns.BeginClose(graceful)
	l.p.Lis.Close()
	<-l.serveDone
	// cancelLDS never waits: a Listener callback still running only
	// schedules onto l.ser, which skips it once closed.
	l.cancelLDS()
	l.ser.TrySchedule(func(context.Context) { l.rds.Close() })
	l.ser.Close()
	<-l.ser.Done()
	if l.mode == connectivity.ServingModeServing {
		// The serializer is done: l.mode can be read here.
		l.p.Metrics.ServingChanged(-1)
	}
	l.connMu.Lock()
	l.cur.Store(nil)
	l.connMu.Unlock()
	l.conns.Close(graceful)
}
