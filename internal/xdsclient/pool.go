package xdsclient

import (
	"sort"
	"sync"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"go.opentelemetry.io/otel/metric"
)

// Pool shares clients between users of the same bootstrap configuration:
// Get returns the same client for configurations with the same Key, counting
// references; the last release closes it.
type Pool struct {
	opts Options // immutable

	mu      sync.Mutex
	clients map[string]*poolEntry // guarded by mu; by bootstrap Key
}

type poolEntry struct {
	c    *Client // immutable
	refs int     // guarded by Pool.mu
}

// NewPool returns a pool whose clients are created with opts.
func NewPool(opts Options) *Pool {
	return &Pool{opts: opts, clients: make(map[string]*poolEntry)}
}

// DefaultPool is the process-wide pool, with default options (resource
// types are registered by the first watch that uses them).
var DefaultPool = NewPool(Options{})

// Get returns the client for cfg, creating it if the pool has none for
// cfg.Key(), and a release function that drops the reference. release is
// idempotent; the last release closes the client, waiting for its
// goroutines to exit, so it must not be called from a watcher callback of
// that client if the caller needs that guarantee (see Client.Close).
func (p *Pool) Get(cfg *bootstrap.Config) (c *Client, release func(), err error) {
	return p.GetWithMeterProvider(cfg, nil)
}

// GetWithMeterProvider is Get for a user with its own metrics destination:
// a client that this call creates reports its metrics to mp, unless the
// pool's Options have a MeterProvider, which always wins. A client is shared
// by every user of its bootstrap configuration, and its metrics go to one
// provider only: the one chosen when it was created (the first user's). A
// later call with another provider gets the same client, without metrics in
// its own provider; use a separate Pool per provider to keep them apart.
//
// # Experimental
//
// This method may change or be removed in a later release.
func (p *Pool) GetWithMeterProvider(cfg *bootstrap.Config, mp metric.MeterProvider) (c *Client, release func(), err error) {
	if cfg == nil {
		return nil, nil, errNoConfig
	}
	key := cfg.Key()
	p.mu.Lock()
	e := p.clients[key]
	if e == nil {
		opts := p.opts
		if opts.MeterProvider == nil {
			opts.MeterProvider = mp
		}
		c, err := New(cfg, opts)
		if err != nil {
			p.mu.Unlock()
			return nil, nil, err
		}
		e = &poolEntry{c: c}
		p.clients[key] = e
	}
	e.refs++
	p.mu.Unlock()

	var once sync.Once
	release = func() {
		once.Do(func() {
			p.mu.Lock()
			e.refs--
			last := e.refs == 0
			if last {
				delete(p.clients, key)
			}
			p.mu.Unlock()
			if last {
				e.c.Close()
			}
		})
	}
	return e.c, release, nil
}

// Clients returns every open client of the process, from any pool or from
// New, in creation order (CSDS reports them all).
func Clients() []*Client {
	registry.mu.Lock()
	type entry struct {
		c   *Client
		seq uint64
	}
	all := make([]entry, 0, len(registry.clients))
	for c, seq := range registry.clients {
		all = append(all, entry{c, seq})
	}
	registry.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	out := make([]*Client, len(all))
	for i, e := range all {
		out[i] = e.c
	}
	return out
}
