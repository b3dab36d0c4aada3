// Package xdsclient is a State-of-the-World ADS client (gRFC A27, A30),
// generic over resource types: callers describe each type with a
// ResourceType and watch resources by name; the client keeps one ADS stream
// per management server, ACKs and NACKs responses (gRFC A40, A46), caches
// resources, runs the does-not-exist timer (gRFC A57), handles deletions
// (gRFC A53), xdstp names and authorities (gRFC A47) and server fallback
// (gRFC A71), and dumps its state for CSDS.
//
// # Concurrency
//
// Every piece of protocol and cache state of a Client is owned by one
// callback serializer (a goroutine that runs scheduled functions in order);
// public methods schedule work on it. Watcher callbacks run on that
// goroutine, one at a time, never under a lock. Each management server
// connection has one goroutine for the stream (receiving) and one per live
// stream for sending; Close waits for all of them.
//
// # Errors given to watchers
//
// Data errors (gRFC A88's term) go to ResourceError when the client has no
// valid value for the resource (does-not-exist timer, deletion by absence,
// NACK without a cached value, unknown authority, bad name) and to
// AmbientError when it has one (NACK of an update). Connectivity errors (an
// ADS stream that failed before receiving any response, gRFC A57) never
// invalidate anything: they go to AmbientError for every watcher of the
// affected authority, with or without a cached value, and only once no
// fallback server is left to try (gRFC A71). This differs from A88, which
// reports them through OnResourceChanged(error) when nothing is cached: here
// ResourceError means "drop what you have", which a connectivity error never
// means, and a watcher with no value learns the reason from the AmbientError
// anyway. A stream closed after it received a response is not an error.
//
// # CSDS and metrics
//
// Dump gives each watched resource's cache state as gRFC A40 and A88 define
// it (REQUESTED, ACKED, NACKED, DOES_NOT_EXIST, TIMEOUT, RECEIVED_ERROR),
// the value as received, and the error state of the last failed update. As
// in gRFC A40's "continue after first error" example, the error of a
// rejected response is recorded on every resource it carried: the rejected
// ones (NACKED) and the valid ones, which are applied (gRFC A46) and stay
// ACKED with the response's error state until an accepted response carries
// them again. Clients lists every client of the process, whichever Pool made
// it, for CSDS. With Options.MeterProvider the client records the gRFC A78
// metrics.
//
// # Caveats
//
//   - Whether a cancel function, Close or Dump runs inside a watcher callback
//     is told by goroutine identity: a callback that blocks on another
//     goroutine which cancels that same watcher deadlocks, as any callback
//     that blocks on the client would.
//   - Connections are opened on the first watch of a resource served by the
//     server and stay open until Close (gRFC A47 allows either), except
//     fallback connections, closed when the primary answers again.
//   - A deletion ignored under ignore_resource_deletion (gRFC A53) leaves the
//     resource ACKED in Dump; gRFC A88's DOES_NOT_EXIST-but-cached state is
//     not implemented.
//   - Of gRFC A88, the client implements the TIMEOUT and RECEIVED_ERROR
//     states, xRFC TP3 resource_errors in State-of-the-World responses and
//     the resource_timer_is_transient_error server feature, without the
//     GRPC_EXPERIMENTAL_XDS_DATA_ERROR_HANDLING guard. Not implemented:
//     fail_on_data_errors (a data error never drops a cached value, except
//     a Listener or Cluster deletion, as before A88).
package xdsclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxyless-grpc/xds/internal/backoff"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/clock"
	"github.com/proxyless-grpc/xds/internal/syncutil"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/grpclog"
)

var logger = grpclog.Component("xdsclient")

// DefaultWatchExpiryTimeout is the does-not-exist timeout used when
// Options.WatchExpiryTimeout is zero (the xDS protocol's 15 seconds).
const DefaultWatchExpiryTimeout = 15 * time.Second

// Options configures a Client. The zero value is usable.
type Options struct {
	// ResourceTypes are registered up front. Types can also be registered
	// implicitly by the first WatchResource that uses them; a response of a
	// type that is not registered is NACKed.
	ResourceTypes []*ResourceType

	// WatchExpiryTimeout is how long after a subscription was sent on a
	// live ADS stream a resource that has not arrived is considered not to
	// exist. Zero means DefaultWatchExpiryTimeout.
	WatchExpiryTimeout time.Duration

	// Backoff returns the delay before reconnecting after retries failed
	// stream attempts (0-based). Nil means backoff.DefaultExponential.Backoff.
	Backoff func(retries int) time.Duration

	// Clock runs the does-not-exist timers and the waits between stream
	// attempts, and dates the dump's updates and errors. Nil means
	// clock.Real.
	Clock clock.Clock

	// MeterProvider receives the client's metrics (gRFC A78:
	// grpc.xds_client.resource_updates_valid, resource_updates_invalid,
	// server_failure, connected and resources). Nil means no metrics. In a
	// Pool, see Pool.GetWithMeterProvider for how a shared client's provider
	// is chosen.
	MeterProvider metric.MeterProvider

	// Scope names the client's users: it is the client_scope of its CSDS
	// ClientConfig (gRFC A71) and the grpc.target attribute of its metrics
	// (gRFC A78). Empty means DefaultScope ("#server").
	Scope string
}

// Client is an xDS client for one bootstrap configuration. Create one with
// New or get a shared one from a Pool. All methods are safe for concurrent
// use.
type Client struct {
	cfg     *bootstrap.Config // immutable
	opts    Options           // immutable, defaults filled in
	nodeID  string            // immutable
	metrics *clientMetrics    // immutable; nil without a MeterProvider

	serializer *syncutil.CallbackSerializer // immutable; owns the state below
	closed     *syncutil.Event              // fired by Shutdown
	shutDown   chan struct{}                // closed when Shutdown's work on the serializer is done
	chanWG     sync.WaitGroup               // one per xdsChannel goroutine

	// Only touched on the serializer:
	types       map[string]*ResourceType // by TypeURL
	defaultAuth *authority               // old-style names
	authorities map[string]*authority    // xdstp names, by authority; created on first use
	channels    map[string]*xdsChannel   // by serverKey; created on first use
}

var errNoConfig = errors.New("xdsclient: a bootstrap configuration with at least one xDS server is required")

// New creates a client for cfg. It opens no connection: a management server
// is contacted when the first resource it serves is watched. The caller must
// Close the client.
func New(cfg *bootstrap.Config, opts Options) (*Client, error) {
	if cfg == nil || len(cfg.XDSServers) == 0 {
		return nil, errNoConfig
	}
	if opts.WatchExpiryTimeout <= 0 {
		opts.WatchExpiryTimeout = DefaultWatchExpiryTimeout
	}
	if opts.Backoff == nil {
		opts.Backoff = backoff.DefaultExponential.Backoff
	}
	if opts.Scope == "" {
		opts.Scope = DefaultScope
	}
	opts.Clock = clock.Or(opts.Clock)
	c := &Client{
		cfg:         cfg,
		opts:        opts,
		nodeID:      cfg.Node.GetId(),
		serializer:  syncutil.NewCallbackSerializer(),
		closed:      syncutil.NewEvent(),
		shutDown:    make(chan struct{}),
		types:       make(map[string]*ResourceType),
		authorities: make(map[string]*authority),
		channels:    make(map[string]*xdsChannel),
	}
	for _, rt := range opts.ResourceTypes {
		if err := c.registerType(rt); err != nil {
			c.serializer.Close()
			<-c.serializer.Done()
			return nil, err
		}
	}
	c.defaultAuth = newAuthority("", cfg.XDSServers)
	c.metrics = newClientMetrics(c, opts.MeterProvider, opts.Scope)
	registerClient(c)
	return c, nil
}

// registerType adds rt to the known types. Called from New (before the
// serializer runs anything else) or from serializer callbacks.
func (c *Client) registerType(rt *ResourceType) error {
	if rt == nil || rt.TypeURL == "" || rt.Decode == nil {
		return errors.New("xdsclient: resource type needs a TypeURL and a Decode function")
	}
	if old, ok := c.types[rt.TypeURL]; ok && old != rt {
		return fmt.Errorf("xdsclient: two different resource types use type URL %q", rt.TypeURL)
	}
	c.types[rt.TypeURL] = rt
	return nil
}

// BootstrapConfig returns the configuration the client was created with.
func (c *Client) BootstrapConfig() *bootstrap.Config { return c.cfg }

// Scope returns the client's Options.Scope ("#server" unless set): the
// client_scope of its CSDS dump (gRFC A71).
func (c *Client) Scope() string { return c.opts.Scope }

// Shutdown stops the client without waiting: it closes every ADS stream
// and connection and stops every timer, on the client's serializer. No
// watcher callback starts once Shutdown has returned. It never blocks, so
// it may be called from a watcher callback; Close, which also waits for the
// client's goroutines, may not. Calling it more than once is harmless.
func (c *Client) Shutdown() {
	if !c.closed.Fire() {
		return
	}
	unregisterClient(c)
	shutdown := func(context.Context) {
		for _, ch := range c.channels {
			ch.close()
		}
		c.channels = nil
		for _, a := range c.allAuthorities() {
			a.stopTimers()
		}
		close(c.shutDown)
	}
	if !c.serializer.TrySchedule(shutdown) {
		close(c.shutDown) // cannot happen: only Shutdown closes the serializer
	}
	c.serializer.Close()
}

// Close stops the client as Shutdown does and waits until every goroutine
// of the client has exited: no watcher callback runs after Close returns.
// It must not be called from a watcher callback, whose return it would wait
// for; call Shutdown there. A channel whose credentials are still being
// built exits once the build returns, so Close waits for it. Calling Close
// more than once, or concurrently, is harmless; each call waits.
func (c *Client) Close() {
	c.Shutdown()
	<-c.shutDown
	// Every chanWG.Add ran on the serializer before the shutdown callback,
	// so this Wait cannot race with an Add.
	c.chanWG.Wait()
	<-c.serializer.Done()
	c.metrics.close()
}

// WaitCallbacks waits until every watcher callback that is running or
// queued when it is called has returned, or ctx ends. With a cancel, which
// never waits, it tells a watcher's owner that none of its callbacks runs
// any more:
//
//	cancel()
//	c.WaitCallbacks(ctx) // a callback running during cancel has returned
//
// It must not be called from a watcher callback (it would wait for its own
// caller until ctx ends). It returns ctx's error if ctx ends first, and nil
// at once for a closed client.
func (c *Client) WaitCallbacks(ctx context.Context) error {
	ran := make(chan struct{})
	done := (<-chan struct{})(ran)
	if !c.serializer.TrySchedule(func(context.Context) { close(ran) }) {
		done = c.serializer.Done()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("xdsclient: waiting for watcher callbacks: %w", ctx.Err())
	}
}

// WatchResource starts a watch of the named resource of type rt and returns
// a function that cancels it. w must not be nil. rt is registered with the client if it was not
// already (another *ResourceType with the same TypeURL is an error, reported
// to w as a ResourceError).
//
// If the resource is cached, w gets it (and, for a NACKed update, the NACK
// as an AmbientError) at once; if it is known not to exist, w gets a
// ResourceError at once. Otherwise the client subscribes to it.
//
// cancel is idempotent and never blocks: it may be called from inside a
// callback. Once it returns, no callback of w starts; one that was already
// running may still be running (WaitCallbacks waits for it). Cancelling the
// last watcher of a resource unsubscribes from it. Watches of a closed
// client get no callback.
func (c *Client) WatchResource(rt *ResourceType, name string, w ResourceWatcher) (cancel func()) {
	e := &watcherEntry{c: c, w: w}
	c.serializer.TrySchedule(func(context.Context) { c.handleWatch(rt, name, e) })
	return e.cancel
}

// handleWatch starts a watch. Only called from serializer callbacks.
func (c *Client) handleWatch(rt *ResourceType, name string, e *watcherEntry) {
	if c.closed.HasFired() {
		return
	}
	if err := c.registerType(rt); err != nil {
		e.deliverError(true, &Error{Kind: KindBadName, TypeName: typeNameOf(rt), Name: name, NodeID: c.nodeID, Err: err}, nil)
		return
	}
	rn, err := parseName(name)
	if err == nil && rn.xdstp && rn.typ != rt.typeSuffix() {
		err = fmt.Errorf("type %q in the name does not match the watched type %q", rn.typ, rt.typeSuffix())
	}
	if err != nil {
		e.deliverError(true, &Error{Kind: KindBadName, TypeName: rt.TypeName, Name: name, NodeID: c.nodeID, Err: err}, nil)
		return
	}
	a := c.authorityFor(rn)
	if a == nil {
		e.deliverError(true, &Error{Kind: KindUnknownAuthority, TypeName: rt.TypeName, Name: name, NodeID: c.nodeID}, nil)
		return
	}
	c.addWatcher(a, rt, rn.canonical, e)
}

// authorityFor returns the authority serving rn, creating it on first use, or
// nil if the bootstrap has no such authority. Only called from serializer
// callbacks.
func (c *Client) authorityFor(rn resourceName) *authority {
	if !rn.xdstp {
		return c.defaultAuth
	}
	if a, ok := c.authorities[rn.authority]; ok {
		return a
	}
	servers, ok := c.cfg.ServersFor(rn.authority)
	if !ok {
		return nil
	}
	a := newAuthority(rn.authority, servers)
	c.authorities[rn.authority] = a
	return a
}

// allAuthorities returns the default authority and every named one. Only
// called from serializer callbacks.
func (c *Client) allAuthorities() []*authority {
	all := make([]*authority, 0, 1+len(c.authorities))
	all = append(all, c.defaultAuth)
	for _, a := range c.authorities {
		all = append(all, a)
	}
	return all
}

func typeNameOf(rt *ResourceType) string {
	if rt == nil {
		return "<nil>"
	}
	return rt.TypeName
}

// registry holds every open client of the process, for Clients.
var registry struct {
	mu      sync.Mutex
	seq     atomic.Uint64
	clients map[*Client]uint64 // guarded by mu; value is the creation order
}

func registerClient(c *Client) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.clients == nil {
		registry.clients = make(map[*Client]uint64)
	}
	registry.clients[c] = registry.seq.Add(1)
}

func unregisterClient(c *Client) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	delete(registry.clients, c)
}
