// Package rds is the RouteConfiguration (RDS) handler of one listener of an
// xDS server (gRFC A36): it watches the RouteConfigurations that the
// listener's filter chains name, tells the listener when each has had its
// first answer (a Listener is applied only then), and keeps the routes that
// the chains' RPCs read up to date: an RDS update applies to existing
// connections at once, without a drain.
//
// For each (RouteConfiguration, HttpConnectionManager) in use there is one
// rpcpath.Source, shared by every chain with that HttpConnectionManager; an
// answer replaces the routes of each with the new router and that
// HttpConnectionManager's filter steps. A chain still serving connections
// keeps its source after the Listener stopped using the name, with the last
// routes it had.
package rds

import (
	"errors"
	"fmt"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

// XDSClient is what the handler needs of the xDS client: watches, of
// RouteConfigurations here. *xdsclient.Client satisfies it; tests use a
// fake that delivers answers on demand. Watchers are called as
// xdsclient.ResourceWatcher documents: one call at a time, each calling
// onDone when done; no call starts once cancel has returned.
type XDSClient interface {
	WatchResource(rt *xdsclient.ResourceType, name string, w xdsclient.ResourceWatcher) (cancel func())
}

// The production client is one.
var _ XDSClient = (*xdsclient.Client)(nil)

// Params are the inputs of New.
type Params struct {
	// Client is the xDS client to watch with.
	Client XDSClient
	// Schedule runs f on the owner's serializer and then calls onDone (the
	// xDS client's flow control); once the owner is closed it calls onDone
	// without f.
	Schedule func(f func(), onDone func())
	// OnAnswer is called on the serializer after a watched
	// RouteConfiguration got an answer: a Listener waiting for it may now be
	// ready.
	OnAnswer func()
	// ListenerShared is what the listener's routes share (counters, filter
	// state); may
	// be nil.
	ListenerShared *rpcpath.ListenerShared
	// Log is the listener's logger.
	Log *serverlog.Logger
}

// Handler owns the RDS watches of one listener. Its methods must be called
// on the owner's serializer, except the release functions Source returns.
type Handler struct {
	p       Params            // immutable
	watches map[string]*watch // by resource name; only touched on the serializer
}

// watch is one RouteConfiguration watch. Only touched on the serializer,
// but cancel, which is immutable once set.
type watch struct {
	name   string
	cancel func()
	// answered is set by the first answer: the resource, an error, or the
	// does-not-exist timer.
	answered bool
	router   *routing.Router // the last good routes; nil before, or after a ResourceError
	err      error           // why there are no routes when router is nil and answered
	broken   bool            // the last answer was logged as a configuration error
	sources  map[*filterchain.HTTPConnectionManager]*source
}

// source is one rpcpath.Source and the number of chains using it.
type source struct {
	src  *rpcpath.Source
	refs int
}

// New returns a handler with no watch.
func New(p Params) *Handler {
	return &Handler{p: p, watches: make(map[string]*watch)}
}

// Watch starts a watch for every RDS name of l that is not watched yet.
func (h *Handler) Watch(l *xdsresource.Listener) {
	for _, fc := range l.Table.Chains() {
		name := fc.HCM.RDSName
		if name == "" || h.watches[name] != nil {
			continue
		}
		w := &watch{name: name, sources: make(map[*filterchain.HTTPConnectionManager]*source)}
		h.watches[name] = w
		w.cancel = xdsclient.Watch[*xdsresource.RouteConfig](h.p.Client, xdsresource.RouteConfigType, name, &watcher{h: h, w: w})
	}
}

// Ready reports whether every RDS resource of l has had its first answer
// (gRFC A36: the Listener is applied only then).
func (h *Handler) Ready(l *xdsresource.Listener) bool {
	for _, fc := range l.Table.Chains() {
		if name := fc.HCM.RDSName; name != "" && (h.watches[name] == nil || !h.watches[name].answered) {
			return false
		}
	}
	return true
}

// Retain cancels the watches of the names that none of ls uses (nil
// entries are skipped). Chains still serving connections keep their
// sources, with the last routes.
func (h *Handler) Retain(ls ...*xdsresource.Listener) {
	used := make(map[string]bool)
	for _, l := range ls {
		if l == nil {
			continue
		}
		for _, fc := range l.Table.Chains() {
			if fc.HCM.RDSName != "" {
				used[fc.HCM.RDSName] = true
			}
		}
	}
	for name, w := range h.watches {
		if !used[name] {
			delete(h.watches, name)
			w.cancel()
		}
	}
}

// Close cancels every watch.
func (h *Handler) Close() { h.Retain() }

// Source returns where the RPCs of a chain whose HttpConnectionManager is
// hcm (which takes its routes from RDS) find their routes, and the function
// to call, from any goroutine, once the chain no longer serves. Chains with
// the same hcm share one source. Watch must have been called for the
// Listener of the chain.
func (h *Handler) Source(hcm *filterchain.HTTPConnectionManager) (*rpcpath.Source, func()) {
	w := h.watches[hcm.RDSName]
	if w == nil {
		// Not reachable when Watch and Ready were called for the chain's
		// Listener; fail closed.
		err := fmt.Errorf("RouteConfiguration %q is not watched", hcm.RDSName)
		return rpcpath.NewSource(rpcpath.Unavailable(err)), func() {}
	}
	s := w.sources[hcm]
	if s == nil {
		s = &source{src: rpcpath.NewSource(h.routes(w, hcm))}
		w.sources[hcm] = s
	}
	s.refs++
	release := func() {
		h.p.Schedule(func() {
			if s.refs--; s.refs == 0 && w.sources[hcm] == s {
				delete(w.sources, hcm)
			}
		}, func() {})
	}
	return s.src, release
}

// routes returns the routes of hcm's chains from w's last answer.
func (h *Handler) routes(w *watch, hcm *filterchain.HTTPConnectionManager) *rpcpath.Routes {
	switch {
	case w.router != nil:
		return rpcpath.NewRoutes(w.router, hcm, h.p.ListenerShared)
	case w.err != nil:
		return rpcpath.Unavailable(w.err)
	}
	return rpcpath.Unavailable(fmt.Errorf("RouteConfiguration %q not received yet", w.name))
}

// watcher hands the xDS client's callbacks for one RouteConfiguration to
// the serializer.
type watcher struct {
	h *Handler
	w *watch
}

func (x *watcher) ResourceChanged(rc *xdsresource.RouteConfig, onDone func()) {
	x.h.p.Schedule(func() { x.h.handleAnswer(x.w, rc.Router, nil) }, onDone)
}

func (x *watcher) ResourceError(err error, onDone func()) {
	x.h.p.Schedule(func() { x.h.handleAnswer(x.w, nil, answerError(x.w.name, err)) }, onDone)
}

func (x *watcher) AmbientError(err error, onDone func()) {
	x.h.p.Schedule(func() { x.h.handleAmbient(x.w, err) }, onDone)
}

// handleAnswer installs an answer: new routes, or err when there are none
// (gRFC A36: RPCs then fail with UNAVAILABLE). Only called on the
// serializer.
func (h *Handler) handleAnswer(w *watch, router *routing.Router, err error) {
	if h.watches[w.name] != w {
		return // cancelled since
	}
	w.router, w.err, w.answered = router, err, true
	// gRFC A39: filter configs are merged with the routes' overrides when
	// the routes are applied, not per RPC.
	for hcm, s := range w.sources {
		s.src.Store(h.routes(w, hcm))
	}
	h.logConfigError(w)
	h.p.OnAnswer()
}

// handleAmbient handles an error that leaves the last answer in place: a
// NACKed update, or a connectivity problem. Before any answer, the error is
// the first answer: RPCs on the chains fail with it (gRFC A36). Only called
// on the serializer.
func (h *Handler) handleAmbient(w *watch, err error) {
	if h.watches[w.name] != w {
		return
	}
	if w.answered {
		h.p.Log.Warningf("RouteConfiguration %q: keeping the last good version: %v", w.name, err)
		return
	}
	h.handleAnswer(w, nil, answerError(w.name, err))
}

// logConfigError does gRFC A36 configuration error logging for w: a
// warning on each answer while its routes would fail RPCs, and one when they
// no longer do. Only called on the serializer.
func (h *Handler) logConfigError(w *watch) {
	if msg := rpcpath.Problem(w.router, w.err); msg != "" {
		h.p.Log.Warningf("configuration error: %s", msg)
		w.broken = true
		return
	}
	if w.broken {
		h.p.Log.Warningf("configuration error fixed: RouteConfiguration %q no longer fails RPCs", w.name)
		w.broken = false
	}
}

// answerError says why a RouteConfiguration cannot be used, for RPC
// statuses and logs.
func answerError(name string, err error) error {
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
