package xdsclient

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/clock"
	"google.golang.org/protobuf/types/known/anypb"
)

// authority is the set of resources served by one list of management servers
// (gRFC A47): the top-level servers for old-style names, or one entry of the
// bootstrap's "authorities" for xdstp names.
type authority struct {
	name    string                    // immutable; "" for old-style names
	servers []*bootstrap.ServerConfig // immutable; primary first (gRFC A71)

	// Only touched on the serializer:

	// chans[i] is the channel to servers[i]. The last one is the active
	// server; earlier ones are higher-priority servers that are still being
	// retried (fallback, gRFC A71). Empty until the first watch.
	chans []*xdsChannel
	// resources holds every watched resource, by type URL and canonical name.
	resources map[string]map[string]*resourceState
}

func newAuthority(name string, servers []*bootstrap.ServerConfig) *authority {
	return &authority{name: name, servers: servers, resources: make(map[string]map[string]*resourceState)}
}

// String names the authority in logs.
func (a *authority) String() string {
	if a.name == "" {
		return "<default>"
	}
	return fmt.Sprintf("%q", a.name)
}

// resourceState is the cache entry and watcher list of one resource. Only
// touched on the serializer.
type resourceState struct {
	rt       *ResourceType
	name     string // canonical
	watchers []*watcherEntry

	status ResourceStatus
	data   ResourceData // last accepted value; nil if none
	// decoded is the last value decoded for the resource, kept after a
	// deletion, handed to the next decode as DecodeInput.Previous, and
	// reused for the same bytes (decodedRaw) from the same server.
	decoded       ResourceData
	decodedRaw    *anypb.Any
	decodedServer *bootstrap.ServerConfig
	raw           *anypb.Any  // data as received
	from          *xdsChannel // the channel data came from
	version       string      // version_info of the response that carried data
	lastUpdated   time.Time
	// errState is the last failed update (UpdateErrorState): set by a
	// NACKed response that carried the resource, valid or not, and by a
	// server-sent error; cleared by an accepted response carrying it.
	errState *UpdateErrorState
	lastErr  error // the error of the last ResourceError, replayed to new watchers

	timer    clock.Timer // does-not-exist timer; nil when not running
	timerCh  *xdsChannel // the channel whose send started the timer
	timerSeq uint64      // bumped on every start and stop, to drop stale firings
	ignored  bool        // a deletion was ignored (gRFC A53)
}

// cached reports whether the resource counts as cached for gRFC A71: a value
// was received, it is known not to exist, or the server answered with an
// error for it.
func (s *resourceState) cached() bool {
	return s.data != nil || s.status == StatusDoesNotExist || s.status == StatusReceivedError
}

func (s *resourceState) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.timerSeq++
}

// notifyData calls ResourceChanged on every watcher. Only called from
// serializer callbacks.
func (s *resourceState) notifyData(fc *flowControl) {
	for _, w := range s.watchers {
		w.deliverData(s.data, fc)
	}
}

// notifyError calls ResourceError or AmbientError on every watcher. Only
// called from serializer callbacks.
func (s *resourceState) notifyError(resource bool, err error, fc *flowControl) {
	for _, w := range s.watchers {
		w.deliverError(resource, err, fc)
	}
}

// stopTimers stops every does-not-exist timer of the authority. Only called
// from serializer callbacks.
func (a *authority) stopTimers() {
	for _, states := range a.resources {
		for _, s := range states {
			s.stopTimer()
		}
	}
}

// index returns the position of ch in a.chans, or -1.
func (a *authority) index(ch *xdsChannel) int {
	for i, x := range a.chans {
		if x == ch {
			return i
		}
	}
	return -1
}

// hasUncached reports whether some watched resource is not cached.
func (a *authority) hasUncached() bool {
	for _, states := range a.resources {
		for _, s := range states {
			if !s.cached() {
				return true
			}
		}
	}
	return false
}

// addWatcher registers e for the resource, subscribing to it if it is new,
// or replays the cached state to e. Only called from serializer callbacks.
func (c *Client) addWatcher(a *authority, rt *ResourceType, name string, e *watcherEntry) {
	states := a.resources[rt.TypeURL]
	if states == nil {
		states = make(map[string]*resourceState)
		a.resources[rt.TypeURL] = states
	}
	s := states[name]
	isNew := s == nil
	if isNew {
		s = &resourceState{rt: rt, name: name, status: StatusRequested}
		states[name] = s
	}
	s.watchers = append(s.watchers, e)
	e.auth, e.state = a, s
	if !isNew {
		replay(s, e)
		return
	}
	if len(a.chans) == 0 {
		ch := c.acquireChannel(a.servers[0])
		ch.users[a] = struct{}{}
		a.chans = append(a.chans, ch)
	}
	for _, ch := range a.chans {
		c.sendSubscription(ch, rt.TypeURL)
	}
	c.maybeFallback(a)
}

// replay gives a new watcher what the others already know (gRFC A88: the
// value, then the ambient error if any). Only called from serializer
// callbacks.
func replay(s *resourceState, e *watcherEntry) {
	switch {
	case s.data != nil:
		e.deliverData(s.data, nil)
		if (s.status == StatusNACKed || s.status == StatusReceivedError) && s.lastErr != nil {
			e.deliverError(false, s.lastErr, nil)
		}
	case s.lastErr != nil && s.status != StatusRequested && s.status != StatusACKed:
		e.deliverError(true, s.lastErr, nil)
	}
}

// handleCancel removes a cancelled watcher and unsubscribes from its
// resource if it was the last. Only called from serializer callbacks.
func (c *Client) handleCancel(e *watcherEntry) {
	s, a := e.state, e.auth
	if s == nil || c.closed.HasFired() {
		return
	}
	e.state, e.auth = nil, nil
	for i, w := range s.watchers {
		if w == e {
			s.watchers = append(s.watchers[:i:i], s.watchers[i+1:]...)
			break
		}
	}
	if len(s.watchers) > 0 {
		return
	}
	s.stopTimer()
	if s.ignored {
		logger.Infof("xdsclient: %s resource %q whose deletion was ignored is no longer watched [xds node id %q]", s.rt.TypeName, s.name, c.nodeID)
	}
	typeURL := s.rt.TypeURL
	delete(a.resources[typeURL], s.name)
	if len(a.resources[typeURL]) == 0 {
		delete(a.resources, typeURL)
	}
	for _, ch := range a.chans {
		c.sendSubscription(ch, typeURL)
	}
}

// startTimers starts the does-not-exist timer of every named resource of ch
// that is still awaited, after a request naming them was sent on the live
// stream gen (gRFC A57: the timer starts when the subscription is sent on a
// connected stream). Only called from serializer callbacks.
func (c *Client) startTimers(ch *xdsChannel, gen uint64, typeURL string, names []string) {
	if ch.closed || gen != ch.streamGen {
		return
	}
	for a := range ch.users {
		states := a.resources[typeURL]
		for _, name := range names {
			s := states[name]
			if s == nil || s.cached() || s.status != StatusRequested || s.timer != nil {
				continue
			}
			s.timerSeq++
			seq := s.timerSeq
			s.timerCh = ch
			s.timer = c.opts.Clock.AfterFunc(c.expiryTimeout(ch.server), func() {
				c.serializer.TrySchedule(func(context.Context) { c.handleTimerFired(s, seq) })
			})
		}
	}
}

// handleTimerFired marks a resource that did not arrive in time as not
// existing. Only called from serializer callbacks.
func (c *Client) handleTimerFired(s *resourceState, seq uint64) {
	if seq != s.timerSeq || s.timer == nil || c.closed.HasFired() {
		return
	}
	s.timer = nil
	if s.cached() || s.status != StatusRequested {
		return
	}
	server := s.timerCh.server
	s.status = StatusDoesNotExist
	kind := KindDoesNotExist
	if timerIsTransient(server) {
		s.status, kind = StatusTimeout, KindTimeout
	}
	s.lastErr = &Error{Kind: kind, TypeName: s.rt.TypeName, Name: s.name, Server: server.ServerURI, NodeID: c.nodeID,
		Err: fmt.Errorf("not received within %v of the request", c.expiryTimeout(server))}
	s.notifyError(true, s.lastErr, nil)
}

// ServerFeatureResourceTimerIsTransientError is the server feature of gRFC
// A88 that makes the does-not-exist timer a slow-server timer: it runs twice
// as long (30 s by default) and its expiry puts the resource in
// StatusTimeout (an error of KindTimeout) instead of StatusDoesNotExist.
const ServerFeatureResourceTimerIsTransientError = "resource_timer_is_transient_error"

// timerIsTransient reports whether server has the gRFC A88
// resource_timer_is_transient_error feature.
func timerIsTransient(server *bootstrap.ServerConfig) bool {
	return slices.Contains(server.ServerFeatures, ServerFeatureResourceTimerIsTransientError)
}

// expiryTimeout is the resource timer for subscriptions sent to server.
func (c *Client) expiryTimeout(server *bootstrap.ServerConfig) time.Duration {
	if timerIsTransient(server) {
		return 2 * c.opts.WatchExpiryTimeout
	}
	return c.opts.WatchExpiryTimeout
}

// stopTimersOf stops the timers started by sends on ch; they start again
// when the subscriptions are sent on the next stream. Only called from
// serializer callbacks.
func (c *Client) stopTimersOf(ch *xdsChannel) {
	for a := range ch.users {
		for _, states := range a.resources {
			for _, s := range states {
				if s.timer != nil && s.timerCh == ch {
					s.stopTimer()
				}
			}
		}
	}
}

// maybeFallback moves a to its next server when the active one is failing
// and some watched resource is not cached (gRFC A71). The channels to the
// higher-priority servers stay open and keep their subscriptions. Only
// called from serializer callbacks.
func (c *Client) maybeFallback(a *authority) {
	for len(a.chans) > 0 && len(a.chans) < len(a.servers) {
		last := a.chans[len(a.chans)-1]
		if !last.failing || !a.hasUncached() {
			return
		}
		next := a.servers[len(a.chans)]
		ch := c.acquireChannel(next)
		if a.index(ch) >= 0 {
			return // the same server listed twice
		}
		logger.Warningf("xdsclient: authority %v falls back from management server %q to %q [xds node id %q]", a, last.server, next, c.nodeID)
		ch.users[a] = struct{}{}
		a.chans = append(a.chans, ch)
		for typeURL := range a.resources {
			c.sendSubscription(ch, typeURL)
		}
	}
}

// switchBack makes ch the active server of every authority for which it is
// a higher-priority server than the active one, now that it delivered a
// response (gRFC A71), and releases the lower-priority channels. Only called
// from serializer callbacks.
func (c *Client) switchBack(ch *xdsChannel) {
	for a := range ch.users {
		i := a.index(ch)
		if i < 0 || i == len(a.chans)-1 {
			continue
		}
		logger.Infof("xdsclient: authority %v goes back to management server %q [xds node id %q]", a, ch.server, c.nodeID)
		dropped := a.chans[i+1:]
		a.chans = a.chans[:i+1]
		for _, old := range dropped {
			c.releaseChannel(old, a, ch)
		}
	}
}

// releaseChannel removes a from the users of ch, closing ch if a was the
// last; timers that ch started now belong to keep. Only called from
// serializer callbacks.
func (c *Client) releaseChannel(ch *xdsChannel, a *authority, keep *xdsChannel) {
	delete(ch.users, a)
	for _, states := range a.resources {
		for _, s := range states {
			if s.timerCh == ch {
				s.timerCh = keep
			}
		}
	}
	if len(ch.users) == 0 {
		delete(c.channels, ch.key)
		ch.close()
		return
	}
	for typeURL := range a.resources {
		c.sendSubscription(ch, typeURL)
	}
}

// handleConnectivityFailure reacts to a stream of ch that failed before any
// response, for one authority using ch: fall back if possible, otherwise
// tell every watcher of the authority (gRFC A57, A71). Only called from
// serializer callbacks.
func (c *Client) handleConnectivityFailure(a *authority, ch *xdsChannel, err error) {
	if a.index(ch) != len(a.chans)-1 {
		return // a higher-priority server that is being retried while a fallback serves
	}
	n := len(a.chans)
	c.maybeFallback(a)
	if len(a.chans) != n {
		return
	}
	connErr := &Error{Kind: KindConnection, Server: ch.server.ServerURI, NodeID: c.nodeID, Err: err}
	for _, states := range a.resources {
		for _, s := range states {
			s.notifyError(false, connErr, nil)
		}
	}
}
