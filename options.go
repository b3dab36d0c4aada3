package xds

import (
	"fmt"
	"net"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/grpccompat"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	pubxdsclient "github.com/proxyless-grpc/xds/xdsclient"
)

// DefaultDrainGraceTime is how long a drained connection may keep running
// in-flight RPCs after its GOAWAY when no DrainGraceTime option is given
// (gRFC A36: "a default grace period of 10 minutes").
const DefaultDrainGraceTime = 10 * time.Minute

// ServingModeChangeArgs describes a change of the serving mode of one
// listener, as given to the ServingModeCallback.
type ServingModeChangeArgs struct {
	// Mode is the new serving mode: connectivity.ServingModeServing or
	// connectivity.ServingModeNotServing.
	Mode connectivity.ServingMode
	// Err says why the listener is not serving (the Listener resource does
	// not exist, was deleted, or names another address). It is nil when Mode
	// is connectivity.ServingModeServing.
	Err error
}

// ServingModeCallback returns a server option that calls f on every change of
// the serving mode of a listener passed to Serve: once when it first serves,
// once when it first finds it cannot (for example, the Listener resource does
// not exist), and once on each later transition. addr is the listener's
// address (lis.Addr()).
//
// Calls for one listener are made one at a time, in order, from a goroutine
// of that listener and never while the server holds a lock; calls for
// different listeners may run concurrently. f may block, but while it does
// that listener applies no configuration update (connections and RPCs are
// not affected). f must not call Stop or GracefulStop of the server and wait
// for it, since they wait for f to return; call them from another goroutine.
//
// Without this option each transition is logged at warning level; with
// it, the server logs transitions only at verbosity 2.
func ServingModeCallback(f ServingModeCallbackFunc) grpc.ServerOption {
	return &servingModeCallbackOption{f: f}
}

// ServingModeCallbackFunc is the function of a ServingModeCallback: it is
// told the address of a listener and its new serving mode. The name, type
// and meaning are those of grpc-go's xds.ServingModeCallbackFunc.
type ServingModeCallbackFunc func(addr net.Addr, args ServingModeChangeArgs)

// DrainGraceTime returns a server option that sets how long a drained
// connection keeps running its in-flight RPCs after it was sent a GOAWAY
// (gRFC A36 "drain grace time"); when it expires the connection is closed and
// the RPCs still running on it fail. A connection is drained when its filter
// chain changes or goes away, or when the listener stops serving.
//
// The default, when the option is not given, is DefaultDrainGraceTime (10
// minutes). Zero closes drained connections at once. A negative value makes
// NewGRPCServer fail.
func DrainGraceTime(d time.Duration) grpc.ServerOption {
	return &drainGraceTimeOption{d: d}
}

// DrainJitter returns a server option that spreads the GOAWAYs of one drain
// over a window of length d: each drained connection gets its GOAWAY at an
// independent, uniformly random offset in [0, d), so that a configuration
// push to a whole fleet does not make every client reconnect in the same
// second. The drain grace time of a connection starts when its GOAWAY is
// sent. GracefulStop sends the GOAWAYs it still owes at once.
//
// The default, zero, sends every GOAWAY of a drain at once. A negative value
// makes NewGRPCServer fail.
func DrainJitter(d time.Duration) grpc.ServerOption {
	return &drainJitterOption{d: d}
}

// BootstrapContents returns a server option that gives the xDS bootstrap
// configuration (gRFC A27 JSON) to use instead of the one named by the
// environment (the file named by GRPC_XDS_BOOTSTRAP, else the contents of
// GRPC_XDS_BOOTSTRAP_CONFIG). A nil slice means "read the environment".
func BootstrapContents(contents []byte) grpc.ServerOption {
	return &bootstrapContentsOption{contents: contents}
}

// BootstrapContentsForTesting is BootstrapContents, under the name grpc-go's
// xds package gives it, so that a program written for grpc-go compiles
// unchanged. Unlike grpc-go's, it is not limited to tests: CSDS and the
// status page report the server's xDS client whatever its bootstrap, and a
// bootstrap that does not parse makes NewGRPCServer fail with the reason.
func BootstrapContentsForTesting(contents []byte) grpc.ServerOption {
	return BootstrapContents(contents)
}

// MeterProvider returns a server option that records the server's
// OpenTelemetry metrics in mp. Without it (or with a nil mp) no metric is
// recorded.
//
// The server records, per listener passed to Serve (attribute
// grpc.xds_server.listener, the address as "ip:port"):
// grpc.xds_server.serving (1 while serving, else 0),
// grpc.xds_server.connections.accepted,
// grpc.xds_server.connections.rejected (attribute grpc.xds_server.reason:
// not_serving or no_filter_chain) and grpc.xds_server.drains (configuration
// changes that started draining connections).
//
// The xDS client records the gRFC A78 metrics (grpc.xds_client.*, with
// grpc.target "#server") in mp too, if this server creates it: servers with
// equal bootstrap configurations share one client per pool (see ClientPool),
// whose metrics go to the MeterProvider of the server that created it, or to
// the pool's own xdsclient.Options.MeterProvider when set. Give servers that
// need separate client metrics separate pools.
//
// # Experimental
//
// This option and the metrics it enables may change in a later release.
func MeterProvider(mp metric.MeterProvider) grpc.ServerOption {
	return &meterProviderOption{mp: mp}
}

// MeshMetrics returns a server option that records, in the MeterProvider
// the server is given, Istio's standard metrics of every RPC it handles, as
// an Envoy sidecar in front of it would (reporter="destination"), so that
// Istio's dashboards and Kiali see the server with no sidecar:
// istio_requests_total, istio_request_duration_milliseconds,
// istio_request_bytes, istio_response_bytes (histograms with Envoy's
// default buckets), istio_request_messages_total and
// istio_response_messages_total, with Istio's 25 labels. The server's own
// labels come from the bootstrap's node metadata as istio-agent writes it
// (WORKLOAD_NAME, NAMESPACE, CLUSTER_ID, LABELS), the client's from the
// x-envoy-peer-metadata header (Istio's keys or those of grpc-go's CSM
// plugin) or else its certificate's SPIFFE ID; a request that carried the
// header is answered with the server's own. docs/observability.md says how
// the names come out in Prometheus, and what Kiali needs.
//
// Off by default. Without a MeterProvider it records nothing.
//
// # Experimental
//
// This option and the metrics it enables may change in a later release.
func MeshMetrics() grpc.ServerOption {
	return &meshMetricsOption{}
}

// AccessLogFile returns a server option that writes an access log line for
// every RPC of every filter chain to the file at path ("/dev/stdout" for a
// pod's log), in Istio's default format: what a sidecar writes when
// Istio's meshConfig has accessLogFile (Istio sends no access log
// configuration to proxyless servers). It is written besides any access_log
// the control plane sets on an HttpConnectionManager. Lines never slow an
// RPC: they are written on a goroutine of their own, and dropped (and
// counted, grpc.xds_server.access_log.dropped) when it falls behind.
// GRPCServer.ReopenAccessLogs reopens the file after logrotate moved it.
// docs/observability.md shows the lines and what each field says.
//
// An empty path (the default) writes no such log. NewGRPCServer fails on a
// path no log can be written to.
//
// # Experimental
//
// This option may change in a later release.
func AccessLogFile(path string) grpc.ServerOption {
	return &accessLogFileOption{path: path}
}

// ClientPool returns a server option that takes the xDS client from p
// instead of xdsclient.DefaultPool. Servers of one process whose bootstrap
// configurations are equal share one client per pool. A nil p means
// xdsclient.DefaultPool.
func ClientPool(p *pubxdsclient.Pool) grpc.ServerOption {
	return &clientPoolOption{p: p}
}

type servingModeCallbackOption struct {
	grpc.EmptyServerOption
	f ServingModeCallbackFunc
}

type drainGraceTimeOption struct {
	grpc.EmptyServerOption
	d time.Duration
}

type drainJitterOption struct {
	grpc.EmptyServerOption
	d time.Duration
}

type bootstrapContentsOption struct {
	grpc.EmptyServerOption
	contents []byte
}

type meterProviderOption struct {
	grpc.EmptyServerOption
	mp metric.MeterProvider
}

type meshMetricsOption struct {
	grpc.EmptyServerOption
}

type accessLogFileOption struct {
	grpc.EmptyServerOption
	path string
}

type clientPoolOption struct {
	grpc.EmptyServerOption
	p *pubxdsclient.Pool
}

// serverOptions are the options of NewGRPCServer, split into this package's
// and gRPC's. Immutable after parseOptions returns.
type serverOptions struct {
	onModeChange ServingModeCallbackFunc // nil: log transitions
	drainGrace   time.Duration
	drainJitter  time.Duration
	bootstrap    []byte // nil: read the environment
	pool         *xdsclient.Pool
	meters       metric.MeterProvider // nil: no metrics
	metrics      *metrics.Server      // nil without meters
	readiness    *readinessConfig     // nil: no ReadinessHealth
	mesh         bool                 // MeshMetrics
	accessLog    *accesslog.Config    // AccessLogFile's; nil: none
	// nonXDSCreds describes the server's transport credentials when they
	// are not xDS credentials (a filter chain's transport_socket is then
	// not applied, gRFC A29); empty when they are. Set by resolveCreds.
	nonXDSCreds string
	// unknownCreds says why the transport credentials of grpcOpts could
	// not be told (filter chains that ask for TLS are then refused); empty
	// when they could. Set by resolveCreds.
	unknownCreds string
	// grpcOpts are every option that is not this package's, in order; they
	// are given to every grpc.Server the GRPCServer creates, as userOpts.
	grpcOpts []grpc.ServerOption
	// userOpts are grpcOpts with the single interceptors taken out, to run
	// behind the filters. Set by splitInterceptors.
	userOpts rpcpath.UserOptions
}

// modeCallback adapts the user's ServingModeCallback for the listeners; nil
// without one (transitions are then logged).
func (so *serverOptions) modeCallback() func(net.Addr, connectivity.ServingMode, error) {
	f := so.onModeChange
	if f == nil {
		return nil
	}
	return func(addr net.Addr, mode connectivity.ServingMode, err error) {
		f(addr, ServingModeChangeArgs{Mode: mode, Err: err})
	}
}

// parseOptions picks this package's options out of opts; the last of each
// kind wins, as with gRPC's own options.
func parseOptions(opts []grpc.ServerOption) (*serverOptions, error) {
	so := &serverOptions{drainGrace: DefaultDrainGraceTime, pool: xdsclient.DefaultPool}
	for _, o := range opts {
		switch o := o.(type) {
		case *servingModeCallbackOption:
			so.onModeChange = o.f
		case *drainGraceTimeOption:
			if o.d < 0 {
				return nil, fmt.Errorf("xds: DrainGraceTime(%v): must not be negative", o.d)
			}
			so.drainGrace = o.d
		case *drainJitterOption:
			if o.d < 0 {
				return nil, fmt.Errorf("xds: DrainJitter(%v): must not be negative", o.d)
			}
			so.drainJitter = o.d
		case *bootstrapContentsOption:
			so.bootstrap = o.contents
		case *meterProviderOption:
			so.meters = o.mp
		case *readinessOption:
			if o.r.hs == nil {
				return nil, fmt.Errorf("xds: ReadinessHealth: the health server is nil")
			}
			so.readiness = &o.r
		case *meshMetricsOption:
			so.mesh = true
		case *accessLogFileOption:
			so.accessLog = nil
			if o.path != "" {
				cfg, err := accesslog.IstioFile(o.path)
				if err != nil {
					return nil, fmt.Errorf("xds: AccessLogFile(%q): %w", o.path, err)
				}
				so.accessLog = cfg
			}
		case *clientPoolOption:
			so.pool = xdsclient.DefaultPool
			if o.p != nil {
				so.pool = xdsclient.PoolOf(o.p)
			}
		default:
			so.grpcOpts = append(so.grpcOpts, o)
		}
	}
	so.metrics = metrics.NewServer(so.meters)
	so.resolveCreds()
	so.splitInterceptors()
	return so, nil
}

// splitInterceptors takes grpc.UnaryInterceptor and grpc.StreamInterceptor
// out of the user's options, so that the servers run them behind the
// filters, chained first after the server's own interceptors, where gRPC
// would run them first of all (it gives no other way to get ahead of
// them). An interceptor of the user's then never sees an RPC the filters
// refuse, nor request headers before a filter changed them. Options that
// cannot be read (an option of the program's that cannot be followed, or a
// grpc-go release that changed its option types) may set one: the
// listeners then refuse every RPC of the filter chains whose filters may
// refuse RPCs after the tap (ext_authz, the rate limits, fault delays)
// rather than let such an interceptor run first, and this says so.
func (so *serverOptions) splitInterceptors() {
	split, err := grpccompat.SplitInterceptors(so.grpcOpts)
	if err != nil {
		serverlog.Component.Warningf("xds: cannot tell whether the server options set grpc.UnaryInterceptor or grpc.StreamInterceptor (%v): "+
			"every RPC of filter chains whose HTTP filters may refuse RPCs after gRPC's tap handle (ext_authz, rate limits, fault delays) will be REFUSED, "+
			"since such an interceptor would run before those filters; pass interceptors with grpc.ChainUnaryInterceptor and grpc.ChainStreamInterceptor instead", err)
		so.userOpts = rpcpath.UserOptions{Options: so.grpcOpts, Unknown: err}
		return
	}
	so.userOpts = rpcpath.UserOptions{Options: split.Options, Unary: split.Unary, Stream: split.Stream}
}
