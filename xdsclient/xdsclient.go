// Package xdsclient is the pool of xDS clients that a program's servers
// share: servers whose bootstraps are equal share one xDS client, and so one
// ADS stream per management server, per pool.
//
// Most programs never name it: every server uses DefaultPool unless given
// xds.ClientPool. A pool of its own gives a server a client of its own, for
// example to keep its xDS client metrics apart or to wait for resources a
// shorter time.
//
// # Stability
//
// Stable: Pool, NewPool, DefaultPool and Options keep their meaning; Options
// may gain fields.
package xdsclient

import (
	"time"

	"go.opentelemetry.io/otel/metric"

	internal "github.com/proxyless-grpc/xds/internal/xdsclient"
)

// DefaultWatchExpiryTimeout is how long a server waits for a resource it
// asked for before taking it not to exist (gRFC A57), when
// Options.WatchExpiryTimeout is zero.
const DefaultWatchExpiryTimeout = internal.DefaultWatchExpiryTimeout

// Options configures the clients of a Pool.
type Options struct {
	// WatchExpiryTimeout is how long, after asking a management server for a
	// resource, a client waits for it before taking it not to exist (a
	// server then does not serve on that listener). Zero means
	// DefaultWatchExpiryTimeout.
	WatchExpiryTimeout time.Duration

	// MeterProvider receives the clients' metrics (gRFC A78,
	// grpc.xds_client.*). Nil means the provider of the server that creates
	// the client (xds.MeterProvider), if any.
	MeterProvider metric.MeterProvider
}

// Pool shares xDS clients between the servers of a program: servers with
// equal bootstrap configurations get the same client. A client is created
// by the first server that needs it and closed when the last one stops.
// Safe for concurrent use.
type Pool struct {
	p *internal.Pool // immutable
}

// NewPool returns an empty pool whose clients are created with opts.
func NewPool(opts Options) *Pool {
	return &Pool{p: internal.NewPool(internal.Options{
		WatchExpiryTimeout: opts.WatchExpiryTimeout,
		MeterProvider:      opts.MeterProvider,
	})}
}

// DefaultPool is the pool of every server not given xds.ClientPool.
var DefaultPool = &Pool{p: internal.DefaultPool}

func init() {
	internal.PoolOf = func(p any) *internal.Pool { return p.(*Pool).p }
	internal.WrapPool = func(p *internal.Pool) any { return &Pool{p: p} }
}
