// Package metrics records the xDS server's OpenTelemetry metrics: serving
// state, connections accepted and rejected, drains, the outcomes the HTTP
// filters count (RBAC decisions, RPCs refused by local rate limits: each
// filter names its own counter, httpfilter.Outcomes), access log lines
// dropped (per output, not per listener: outputs are shared), and TLS handshakes
// and certificate expiry per filter chain, per listener, under the "grpc.xds_server." prefix
// (the handshake count follows gRFC A118's "grpc.server.tls.handshakes").
// (The xDS client records its
// own gRFC A78 metrics, in package xdsclient.)
//
// Every recorder is nil-safe: a nil *Server, *Listener or *Outcomes records
// nothing, which is what a server without a MeterProvider uses. Recorders
// precompute their attribute sets, so recording is one counter update with
// no allocation, and are safe for concurrent use.
package metrics

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/grpclog"
)

var logger = grpclog.Component("xds-server")

// MeterName is the instrumentation scope of the server's metrics.
const MeterName = "github.com/proxyless-grpc/xds"

// Metric names.
const (
	// Serving is an up-down counter: 1 while a listener serves, 0 otherwise
	// (starting, not serving, stopped).
	Serving = "grpc.xds_server.serving"
	// ConnectionsAccepted counts the connections a listener accepted, before
	// any decision about them.
	ConnectionsAccepted = "grpc.xds_server.connections.accepted"
	// ConnectionsRejected counts the accepted connections closed without a
	// byte written (gRFC A36), with the reason in AttrReason.
	ConnectionsRejected = "grpc.xds_server.connections.rejected"
	// Drains counts the drains a listener started: a configuration change
	// (a Listener update, the Listener going away) that drained at least one
	// connection.
	Drains = "grpc.xds_server.drains"
	// TLSNotApplied counts the connections accepted on a filter chain
	// whose transport_socket asks for TLS and served without it, because
	// the server's transport credentials are not xDS credentials (gRFC
	// A29). Anything but zero means the control plane asked for TLS that
	// the server does not give.
	TLSNotApplied = "grpc.xds_server.connections.tls_not_applied"
	// FilterErrors counts the RPCs an HTTP filter failed with INTERNAL
	// because its own code broke: a panic in its step or in the work it
	// left (ReasonPanic), or work returned by a filter that does not
	// declare Needs.After (ReasonUndeclaredWork). The filter instance is in
	// AttrFilter. Anything but zero is a bug in that filter.
	FilterErrors = "grpc.xds_server.http_filter.errors"
)

// Attribute keys and values.
const (
	// AttrListener is the address of the listener passed to Serve, as
	// "ip:port".
	AttrListener = "grpc.xds_server.listener"
	// AttrReason is why a connection was rejected: ReasonNotServing,
	// ReasonNoFilterChain or ReasonUnknownCredentials.
	AttrReason          = "grpc.xds_server.reason"
	ReasonNotServing    = "not_serving"
	ReasonNoFilterChain = "no_filter_chain"
	// ReasonUnknownCredentials: the filter chain asks for TLS and the
	// server cannot tell its transport credentials, which might serve it
	// in plaintext.
	ReasonUnknownCredentials = "unknown_credentials"
	// AttrFilter is the name of an HTTP filter instance (its name in the
	// HttpConnectionManager's http_filters); with FilterErrors, AttrReason
	// is ReasonPanic or ReasonUndeclaredWork.
	AttrFilter           = "grpc.xds_server.http_filter"
	ReasonPanic          = "panic"
	ReasonUndeclaredWork = "undeclared_work"
)

// Server holds the instruments of one xDS server.
type Server struct {
	serving  metric.Int64UpDownCounter
	accepted metric.Int64Counter
	rejected metric.Int64Counter
	drains   metric.Int64Counter
	noTLS    metric.Int64Counter
	// accessLogDropped counts the access log lines not written
	// (AccessLogDropped).
	accessLogDropped metric.Int64Counter
	tls              *tlsInstruments
	meter            metric.Meter

	mu         sync.Mutex
	counters   map[string]metric.Int64Counter     // the HTTP filters' outcome counters, by name; guarded by mu
	histograms map[string]metric.Float64Histogram // the HTTP filters' duration histograms, by name; guarded by mu
}

// NewServer creates the instruments on mp. A nil mp returns nil, which
// records nothing. An instrument the provider cannot create is logged and
// left out.
func NewServer(mp metric.MeterProvider) *Server {
	if mp == nil {
		return nil
	}
	m := mp.Meter(MeterName)
	s := &Server{meter: m}
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	s.serving, err = m.Int64UpDownCounter(Serving, metric.WithUnit("{listener}"),
		metric.WithDescription("1 while the listener serves, 0 while it does not (gRFC A36 serving mode)."))
	keep(err)
	s.accepted, err = m.Int64Counter(ConnectionsAccepted, metric.WithUnit("{connection}"),
		metric.WithDescription("Connections accepted by the listener."))
	keep(err)
	s.rejected, err = m.Int64Counter(ConnectionsRejected, metric.WithUnit("{connection}"),
		metric.WithDescription("Accepted connections closed without a byte written: the listener was not serving, no filter chain matched, or the chain asks for TLS and the server cannot tell its credentials."))
	keep(err)
	s.drains, err = m.Int64Counter(Drains, metric.WithUnit("{drain}"),
		metric.WithDescription("Configuration changes that started draining connections of the listener."))
	keep(err)
	s.noTLS, err = m.Int64Counter(TLSNotApplied, metric.WithUnit("{connection}"),
		metric.WithDescription("Connections on a filter chain that asks for TLS, served without it because the server's credentials are not xDS credentials."))
	keep(err)
	s.accessLogDropped = newAccessLogDropped(m, keep)
	s.tls = newTLSInstruments(m, &errs)
	if len(errs) > 0 {
		logger.Errorf("xds: creating metrics: %v", errs)
	}
	return s
}

// Listener returns the recorder of the listener at addr ("ip:port").
func (s *Server) Listener(addr string) *Listener {
	if s == nil {
		return nil
	}
	lis := attribute.String(AttrListener, addr)
	return &Listener{
		s:          s,
		addr:       lis,
		attrs:      addWith(lis),
		notServing: addWith(lis, attribute.String(AttrReason, ReasonNotServing)),
		noChain:    addWith(lis, attribute.String(AttrReason, ReasonNoFilterChain)),
		noCreds:    addWith(lis, attribute.String(AttrReason, ReasonUnknownCredentials)),
	}
}

// Listener records the metrics of one listener. Immutable.
type Listener struct {
	s          *Server
	addr       attribute.KeyValue
	attrs      []metric.AddOption // the listener
	notServing []metric.AddOption // the listener, reason not_serving
	noChain    []metric.AddOption // the listener, reason no_filter_chain
	noCreds    []metric.AddOption // the listener, reason unknown_credentials
}

// ServingChanged records a serving state change: +1 when the listener
// starts serving, -1 when it stops.
func (l *Listener) ServingChanged(delta int64) {
	if l != nil && l.s.serving != nil {
		l.s.serving.Add(context.Background(), delta, l.attrs...)
	}
}

// Accepted counts an accepted connection.
func (l *Listener) Accepted() {
	if l != nil && l.s.accepted != nil {
		l.s.accepted.Add(context.Background(), 1, l.attrs...)
	}
}

// RejectedNotServing counts a connection closed because the listener was
// not serving.
func (l *Listener) RejectedNotServing() {
	if l != nil && l.s.rejected != nil {
		l.s.rejected.Add(context.Background(), 1, l.notServing...)
	}
}

// RejectedNoFilterChain counts a connection closed because no filter chain
// matched it.
func (l *Listener) RejectedNoFilterChain() {
	if l != nil && l.s.rejected != nil {
		l.s.rejected.Add(context.Background(), 1, l.noChain...)
	}
}

// RejectedUnknownCreds counts a connection closed because its filter
// chain asks for TLS and the server cannot tell its credentials.
func (l *Listener) RejectedUnknownCreds() {
	if l != nil && l.s.rejected != nil {
		l.s.rejected.Add(context.Background(), 1, l.noCreds...)
	}
}

// TLSNotApplied counts a connection served without the TLS its filter
// chain asks for.
func (l *Listener) TLSNotApplied() {
	if l != nil && l.s.noTLS != nil {
		l.s.noTLS.Add(context.Background(), 1, l.attrs...)
	}
}

// DrainStarted counts a drain.
func (l *Listener) DrainStarted() {
	if l != nil && l.s.drains != nil {
		l.s.drains.Add(context.Background(), 1, l.attrs...)
	}
}

// FilterError counts an RPC that the HTTP filter instance named filter
// failed because its own code broke (FilterErrors), with reason
// ReasonPanic or ReasonUndeclaredWork. It is called only when that
// happens: it may take a lock and allocate.
func (l *Listener) FilterError(ctx context.Context, filter, reason string) {
	if l == nil {
		return
	}
	c := l.s.counter(FilterErrors, "{call}", "RPCs an HTTP filter failed with INTERNAL because its own code broke: a panic, or work left without declaring it.")
	if c != nil {
		c.Add(ctx, 1, addWith(l.addr, attribute.String(AttrFilter, filter), attribute.String(AttrReason, reason))...)
	}
}

// OutcomeSpec describes the counters of one HTTP filter's RPCs by outcome
// (httpfilter.Outcomes, which the filter declares): one counter with an
// attribute per outcome (Metric), or one counter per outcome with no
// attribute (Metrics).
type OutcomeSpec struct {
	// Metric is the counter's name, with its Unit and Description.
	Metric, Unit, Description string
	// FilterAttr names the filter instance; OutcomeAttr the outcome, one
	// of Values.
	FilterAttr, OutcomeAttr string
	Values                  []string
	// Metrics, when set, names one counter per outcome instead, with
	// Descriptions; they have no attribute.
	Metrics, Descriptions []string
}

// Outcomes returns the recorder of the outcomes of the HTTP filter named
// filter on this listener, in the counter spec describes (created the
// first time a filter asks for it); nil (which records nothing) without
// metrics or a metric name. Create it once per filter chain configuration,
// not per RPC.
func (l *Listener) Outcomes(spec OutcomeSpec, filter string) *Outcomes {
	if l == nil {
		return nil
	}
	if len(spec.Metrics) > 0 {
		o := &Outcomes{c: make([]metric.Int64Counter, len(spec.Metrics))}
		some := false
		for i, name := range spec.Metrics {
			desc := ""
			if i < len(spec.Descriptions) {
				desc = spec.Descriptions[i]
			}
			o.c[i] = l.s.counter(name, spec.Unit, desc)
			some = some || o.c[i] != nil
		}
		if !some {
			return nil
		}
		return o
	}
	if spec.Metric == "" {
		return nil
	}
	c := l.s.counter(spec.Metric, spec.Unit, spec.Description)
	if c == nil {
		return nil
	}
	f := attribute.String(spec.FilterAttr, filter)
	o := &Outcomes{c: make([]metric.Int64Counter, len(spec.Values)), opts: make([][]metric.AddOption, len(spec.Values))}
	for i, v := range spec.Values {
		o.c[i] = c
		o.opts[i] = addWith(l.addr, f, attribute.String(spec.OutcomeAttr, v))
	}
	return o
}

// Outcomes records the RPCs of one HTTP filter by outcome. Immutable.
type Outcomes struct {
	c    []metric.Int64Counter // by outcome; an entry is nil if the provider could not create it
	opts [][]metric.AddOption  // by outcome; nil for counters without attributes
}

// Count counts an RPC with an outcome (the index in the spec's Values). It
// allocates nothing.
func (o *Outcomes) Count(ctx context.Context, outcome int) {
	if o == nil || o.c[outcome] == nil {
		return
	}
	if o.opts == nil {
		o.c[outcome].Add(ctx, 1)
		return
	}
	o.c[outcome].Add(ctx, 1, o.opts[outcome]...)
}

// counter returns the counter named name, creating it on first use; nil
// if the provider cannot create it (logged once).
func (s *Server) counter(name, unit, description string) metric.Int64Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.counters[name]; ok {
		return c
	}
	c, err := s.meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
	if err != nil {
		logger.Errorf("xds: creating metric %s: %v", name, err)
		c = nil
	}
	if s.counters == nil {
		s.counters = make(map[string]metric.Int64Counter)
	}
	s.counters[name] = c
	return c
}

// addWith is the option that records with exactly the attributes kvs.
func addWith(kvs ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

// latencyBuckets are gRPC's bucket boundaries for latency histograms, in
// seconds (gRFC A66).
var latencyBuckets = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}

// Durations returns the recorder of the histograms names (in seconds, no
// attribute, with descriptions descs), created the first time a filter asks
// for them; nil (which records nothing) without metrics. Create it when
// routes are built, not per RPC.
func (l *Listener) Durations(names, descs []string) *Durations {
	if l == nil || len(names) == 0 {
		return nil
	}
	d := &Durations{h: make([]metric.Float64Histogram, len(names))}
	for i, name := range names {
		desc := ""
		if i < len(descs) {
			desc = descs[i]
		}
		d.h[i] = l.s.histogram(name, desc)
	}
	return d
}

// Durations records durations in histograms. Immutable.
type Durations struct {
	h []metric.Float64Histogram // an entry is nil if the provider could not create it
}

// Record records d in the histogram i. It allocates nothing.
func (d *Durations) Record(ctx context.Context, i int, dur time.Duration) {
	if d == nil || d.h[i] == nil {
		return
	}
	d.h[i].Record(ctx, dur.Seconds())
}

// histogram returns the latency histogram named name, creating it on first
// use; nil if the provider cannot create it (logged once).
func (s *Server) histogram(name, description string) metric.Float64Histogram {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.histograms[name]; ok {
		return h
	}
	h, err := s.meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(description), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	if err != nil {
		logger.Errorf("xds: creating metric %s: %v", name, err)
		h = nil
	}
	if s.histograms == nil {
		s.histograms = make(map[string]metric.Float64Histogram)
	}
	s.histograms[name] = h
	return h
}
