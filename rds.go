package xds

import (
	"errors"
	"fmt"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"slices"
	"sync/atomic"

	"github.com/proxyless-grpc/xds/filterchain"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
	"github.com/proxyless-grpc/xds/xdsclient"
)

// routeTable is what a filter chain routes RPCs with at one moment: a
// router and the HTTP filter steps of its routes, or the reason there is
// none. Immutable.
type routeTable struct {
	router *routing.Router // nil when err is set
	// err says why there are no routes (RDS resource does not exist, NACKed
	// without a good version, unreachable control plane); RPCs fail with
	// UNAVAILABLE and this text.
	err error
	// filters are the precomputed filter steps of router's routes, one entry
	// per HttpConnectionManager using the table: the chain's for inline
	// routes; for RDS, every HttpConnectionManager naming the resource in
	// the active or pending Listener or on a chain still serving
	// connections. An RPC on a chain whose HttpConnectionManager is missing
	// fails (closed).
	filters []*routeFilters
}

// rdsState is one RouteConfiguration watch of a listener, shared by every
// filter chain (of the active and of the pending Listener) whose
// HttpConnectionManager names it. An update swaps table, which every
// connection on those chains sees on its next RPC, without a drain (gRFC
// A36).
type rdsState struct {
	name   string // immutable
	cancel func() // immutable once set, before any callback is handled
	// table is the current routes; nil until the first answer. Written only
	// on the listener's serializer, read by RPCs.
	table atomic.Pointer[routeTable]
	// answered is set by the first answer (resource, error, or
	// does-not-exist timer). Only touched on the listener's serializer.
	answered bool
	// broken is whether the last answer was logged as a configuration
	// error (gRFC A36 configuration error logging). Only touched on the
	// listener's serializer.
	broken bool
}

// load returns the current routes, or a table with an error before the
// first answer (applied configurations never reach that case).
func (st *rdsState) load() *routeTable {
	if rt := st.table.Load(); rt != nil {
		return rt
	}
	return &routeTable{err: fmt.Errorf("RouteConfiguration %q not received yet", st.name)}
}

// rdsWatcher hands the xDS client's callbacks for one RouteConfiguration to
// the listener's serializer.
type rdsWatcher struct {
	lw *listenerWrapper
	st *rdsState
}

func (w *rdsWatcher) ResourceChanged(data *xdsresource.RouteConfig, onDone func()) {
	w.lw.schedule(func() { w.lw.handleRDS(w.st, &routeTable{router: data.Router}) }, onDone)
}

func (w *rdsWatcher) ResourceError(err error, onDone func()) {
	w.lw.schedule(func() {
		w.lw.handleRDS(w.st, &routeTable{err: rdsError(w.st.name, err)})
	}, onDone)
}

func (w *rdsWatcher) AmbientError(err error, onDone func()) {
	w.lw.schedule(func() { w.lw.handleRDSAmbient(w.st, err) }, onDone)
}

// rdsError says why a RouteConfiguration cannot be used, for RPC statuses
// and logs.
func rdsError(name string, err error) error {
	var xe *xdsclient.Error
	if errors.As(err, &xe) {
		switch xe.Kind {
		case xdsclient.KindDoesNotExist:
			return fmt.Errorf("RouteConfiguration %q does not exist: %w", name, err)
		case xdsclient.KindNACK:
			return fmt.Errorf("RouteConfiguration %q was rejected and no valid version was received: %w", name, err)
		case xdsclient.KindConnection:
			return fmt.Errorf("RouteConfiguration %q is unavailable, the control plane cannot be reached: %w", name, err)
		}
	}
	return fmt.Errorf("RouteConfiguration %q is unavailable: %w", name, err)
}

// handleRDS installs a new answer for st. Only called on the serializer.
func (lw *listenerWrapper) handleRDS(st *rdsState, rt *routeTable) {
	if lw.rds[st.name] != st {
		return // cancelled since
	}
	if rt.router != nil {
		// gRFC A39: filter configs are merged with the routes' overrides
		// when the routes are applied, not per RPC.
		rt = newRouteTable(rt.router, lw.rdsUsers(st.name), lw.metrics)
	}
	st.table.Store(rt)
	st.answered = true
	lw.logRouteErrors(st, rt)
	lw.maybeApply()
}

// handleRDSAmbient handles an error that leaves the last routes in place:
// a NACKed update, or a connectivity problem. With no routes yet, the error
// is the first answer: RPCs on the chains fail with it (gRFC A36). Only
// called on the serializer.
func (lw *listenerWrapper) handleRDSAmbient(st *rdsState, err error) {
	if lw.rds[st.name] != st {
		return
	}
	if st.table.Load() != nil {
		lw.log.Warningf("RouteConfiguration %q: keeping the last good version: %v", st.name, err)
		return
	}
	lw.handleRDS(st, &routeTable{err: rdsError(st.name, err)})
}

// logRouteErrors does gRFC A36 configuration error logging for the routes
// of an RDS resource: a warning on each update while they would fail RPCs,
// and one when they no longer do. Only called on the serializer.
func (lw *listenerWrapper) logRouteErrors(st *rdsState, rt *routeTable) {
	if msg := routeTableProblem(rt); msg != "" {
		lw.log.Warningf("configuration error: %s", msg)
		st.broken = true
		return
	}
	if st.broken {
		lw.log.Warningf("configuration error fixed: RouteConfiguration %q no longer fails RPCs", st.name)
		st.broken = false
	}
}

// routeTableProblem describes why rt fails some or all RPCs, or returns ""
// when it fails none by configuration.
func routeTableProblem(rt *routeTable) string {
	if rt.err != nil {
		return rt.err.Error() + "; every RPC on the filter chains using it fails with UNAVAILABLE"
	}
	failing := rt.router.FailingRoutes()
	if len(failing) == 0 {
		return ""
	}
	r := failing[0]
	return fmt.Sprintf("RouteConfiguration %q has %d route(s) whose action is not non_forwarding_action, failing their RPCs with UNAVAILABLE (first: virtual host %q route %d %q, action %v)",
		rt.router.Name(), len(failing), r.VirtualHost, r.Index, r.Name, r.Action)
}

// syncRDSWatches starts a watch for every RDS name of l that is not
// watched yet (l may be nil). Only called on the serializer.
func (lw *listenerWrapper) startRDSWatches(l *xdsresource.Listener) {
	for _, fc := range l.Table.Chains() {
		name := fc.HCM.RDSName
		if name == "" {
			continue
		}
		if st := lw.rds[name]; st != nil {
			// The Listener may bring new HTTP filters for routes already
			// received: compute their steps before it is applied, and drop
			// those no chain uses any more.
			if rt := st.table.Load(); rt != nil && !rt.has(fc.HCM) {
				st.table.Store(rt.forUsers(lw.rdsUsers(name), lw.metrics))
			}
			continue
		}
		st := &rdsState{name: name}
		lw.rds[name] = st
		st.cancel = xdsclient.Watch[*xdsresource.RouteConfig](lw.client, xdsresource.RouteConfigType, name, &rdsWatcher{lw: lw, st: st})
	}
}

// rdsUsers returns the HttpConnectionManagers that take their routes from
// the RouteConfiguration name: those of the active and pending Listeners
// and of the chains still serving connections. Only called on the
// serializer.
func (lw *listenerWrapper) rdsUsers(name string) []*filterchain.HTTPConnectionManager {
	var out []*filterchain.HTTPConnectionManager
	add := func(h *filterchain.HTTPConnectionManager) {
		if h.RDSName == name && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	for _, l := range []*xdsresource.Listener{lw.currentLDS, lw.pending} {
		if l == nil {
			continue
		}
		for _, fc := range l.Table.Chains() {
			add(fc.HCM)
		}
	}
	lw.mu.Lock()
	for cs := range lw.servers {
		add(cs.chain.HCM)
	}
	lw.mu.Unlock()
	return out
}

// inlineRoutes returns the route table of a chain with an inline route
// configuration. Only called on the serializer.
func inlineRoutes(fc *filterchain.FilterChain, m *metrics.Listener) *routeTable {
	return newRouteTable(fc.HCM.Routes, []*filterchain.HTTPConnectionManager{fc.HCM}, m)
}

// cancelUnusedRDSWatches cancels the RDS watches that neither the active
// nor the pending Listener uses. Only called on the serializer.
func (lw *listenerWrapper) cancelUnusedRDSWatches() {
	used := make(map[string]bool)
	for _, l := range []*xdsresource.Listener{lw.currentLDS, lw.pending} {
		if l == nil {
			continue
		}
		for _, fc := range l.Table.Chains() {
			if fc.HCM.RDSName != "" {
				used[fc.HCM.RDSName] = true
			}
		}
	}
	for name, st := range lw.rds {
		if !used[name] {
			delete(lw.rds, name)
			st.cancel()
		}
	}
}

// rdsReady reports whether every RDS resource of l has answered. Only called
// on the serializer.
func (lw *listenerWrapper) rdsReady(l *xdsresource.Listener) bool {
	for _, fc := range l.Table.Chains() {
		if name := fc.HCM.RDSName; name != "" && !lw.rds[name].answered {
			return false
		}
	}
	return true
}
