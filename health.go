package xds

import (
	"net"
	"sync"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HealthStatusSetter is what ReadinessHealth reports to. The health server
// of gRPC, *health.Server from google.golang.org/grpc/health, is one.
type HealthStatusSetter interface {
	SetServingStatus(service string, status healthpb.HealthCheckResponse_ServingStatus)
}

// ReadinessOptions are the service names ReadinessHealth reports under.
type ReadinessOptions struct {
	// Service is the service name the state of the whole server is
	// reported under. The default, "", is the name Kubernetes gRPC probes
	// and grpc_health_probe check when no service is given.
	Service string
	// ListenerService, when not nil, names a service for each listener
	// passed to Serve (it is given lis.Addr()) under which that listener's
	// own state is reported as well; a listener for which it returns "" or
	// Service has none.
	ListenerService func(addr net.Addr) string
}

// ReadinessHealth returns a server option that keeps hs's status of
// opts.Service equal to the xDS serving state of the server, so that a
// readiness probe keeps traffic away until the server's configuration has
// arrived:
//
//   - NOT_SERVING from NewGRPCServer until at least one listener has been
//     passed to Serve and every listener passed to Serve is serving;
//   - SERVING while every one is;
//   - NOT_SERVING again when any stops serving (its Listener resource is
//     deleted or names another address), when a Serve returns with an error
//     (that listener then counts as not serving for good), and as soon as
//     Stop or GracefulStop starts.
//
// Register hs, typically on a separate admin port served by a plain
// grpc.Server, so that the probe can reach it while the xDS server is not
// serving. The server sets only the services it reports; the rest of hs is
// left alone. hs must not be nil.
func ReadinessHealth(hs HealthStatusSetter, opts ReadinessOptions) grpc.ServerOption {
	return &readinessOption{r: readinessConfig{hs: hs, opts: opts}}
}

type readinessOption struct {
	grpc.EmptyServerOption
	r readinessConfig
}

type readinessConfig struct {
	hs   HealthStatusSetter
	opts ReadinessOptions
}

// readiness reports the serving state of one GRPCServer to a health server.
// Its methods may be called from any goroutine; the health server is called
// under mu, so that the last status it is given is the current one.
type readiness struct {
	readinessConfig

	mu      sync.Mutex
	entries map[*readyEntry]struct{} // every listener passed to Serve
	stopped bool                     // Stop or GracefulStop has started
	last    healthpb.HealthCheckResponse_ServingStatus
}

// readyEntry is the state of one listener.
type readyEntry struct {
	service string // "" when the listener has no service of its own
	serving bool
	failed  bool // its Serve returned an error
}

func newReadiness(c readinessConfig) *readiness {
	r := &readiness{
		readinessConfig: c,
		entries:         make(map[*readyEntry]struct{}),
		last:            healthpb.HealthCheckResponse_NOT_SERVING,
	}
	r.hs.SetServingStatus(r.opts.Service, healthpb.HealthCheckResponse_NOT_SERVING)
	return r
}

// add registers a listener, not serving yet. Called before its Serve starts
// watching, so that no transition of it is missed.
func (r *readiness) add(addr net.Addr) *readyEntry {
	e := &readyEntry{}
	if f := r.opts.ListenerService; f != nil {
		if name := f(addr); name != r.opts.Service {
			e.service = name
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries[e] = struct{}{}
	if e.service != "" {
		r.hs.SetServingStatus(e.service, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	r.reportLocked()
	return e
}

// set records a serving-mode transition of e.
func (r *readiness) set(e *readyEntry, serving bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(e, serving)
}

func (r *readiness) setLocked(e *readyEntry, serving bool) {
	if r.stopped || e.failed || e.serving == serving {
		return
	}
	e.serving = serving
	if e.service != "" {
		r.hs.SetServingStatus(e.service, healthStatus(serving))
	}
	r.reportLocked()
}

// fail records that e's Serve returned with an error: it no longer accepts
// connections, whatever its configuration.
func (r *readiness) fail(e *readyEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(e, false)
	e.failed = true
}

// stop reports every service not serving, for good.
func (r *readiness) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped = true
	for e := range r.entries {
		if e.service != "" && e.serving {
			r.hs.SetServingStatus(e.service, healthpb.HealthCheckResponse_NOT_SERVING)
		}
	}
	r.reportLocked()
}

// reportLocked sets the whole server's status when it changed. Called with
// mu held.
func (r *readiness) reportLocked() {
	serving := !r.stopped && len(r.entries) > 0
	for e := range r.entries {
		serving = serving && e.serving
	}
	if st := healthStatus(serving); st != r.last {
		r.last = st
		r.hs.SetServingStatus(r.opts.Service, st)
	}
}

func healthStatus(serving bool) healthpb.HealthCheckResponse_ServingStatus {
	if serving {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}
