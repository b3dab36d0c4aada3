// Package metrics records the xDS server's OpenTelemetry metrics: serving
// state, connections accepted and rejected, drains, RBAC decisions, the
// RPCs refused by local rate limits, and TLS handshakes and certificate
// expiry per filter chain, per listener, under the "grpc.xds_server." prefix
// (the handshake count follows gRFC A118's "grpc.server.tls.handshakes").
// (The xDS client records its
// own gRFC A78 metrics, in package xdsclient.)
//
// Every recorder is nil-safe: a nil *Server, *Listener or *RBAC records
// nothing, which is what a server without a MeterProvider uses. Recorders
// precompute their attribute sets, so recording is one counter update with
// no allocation, and are safe for concurrent use.
package metrics

import (
	"context"

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
	// RBACDecisions counts the RPCs an RBAC HTTP filter allowed or denied,
	// with the filter in AttrRBACFilter and the outcome in AttrRBACDecision.
	RBACDecisions = "grpc.xds_server.rbac.decisions"
	// LocalRateLimited counts the RPCs a local rate limit HTTP filter found
	// no token for: refused (AttrLocalRateLimitMode ModeEnforced) or, where
	// the filter does not enforce, let through (ModeShadow). The filter is
	// in AttrLocalRateLimitFilter.
	LocalRateLimited = "grpc.xds_server.local_rate_limit.limited"
	// TLSNotApplied counts the connections accepted on a filter chain
	// whose transport_socket asks for TLS and served without it, because
	// the server's transport credentials are not xDS credentials (gRFC
	// A29). Anything but zero means the control plane asked for TLS that
	// the server does not give.
	TLSNotApplied = "grpc.xds_server.connections.tls_not_applied"
)

// Attribute keys and values.
const (
	// AttrListener is the address of the listener passed to Serve, as
	// "ip:port".
	AttrListener = "grpc.xds_server.listener"
	// AttrReason is why a connection was rejected: ReasonNotServing or
	// ReasonNoFilterChain.
	AttrReason          = "grpc.xds_server.reason"
	ReasonNotServing    = "not_serving"
	ReasonNoFilterChain = "no_filter_chain"
	// AttrRBACFilter is the name of the RBAC HTTP filter (its name in the
	// HttpConnectionManager's http_filters).
	AttrRBACFilter = "grpc.xds_server.rbac.filter"
	// AttrRBACDecision is DecisionAllowed or DecisionDenied.
	AttrRBACDecision = "grpc.xds_server.rbac.decision"
	DecisionAllowed  = "allowed"
	DecisionDenied   = "denied"
	// AttrLocalRateLimitFilter is the name of the local rate limit HTTP
	// filter (its name in the HttpConnectionManager's http_filters).
	AttrLocalRateLimitFilter = "grpc.xds_server.local_rate_limit.filter"
	// AttrLocalRateLimitMode is ModeEnforced (the RPC was refused) or
	// ModeShadow (the filter is enabled but not enforced for the RPC, which
	// went through).
	AttrLocalRateLimitMode = "grpc.xds_server.local_rate_limit.mode"
	ModeEnforced           = "enforced"
	ModeShadow             = "shadow"
)

// Server holds the instruments of one xDS server.
type Server struct {
	serving  metric.Int64UpDownCounter
	accepted metric.Int64Counter
	rejected metric.Int64Counter
	drains   metric.Int64Counter
	rbac     metric.Int64Counter
	limited  metric.Int64Counter
	noTLS    metric.Int64Counter
	tls      *tlsInstruments
}

// NewServer creates the instruments on mp. A nil mp returns nil, which
// records nothing. An instrument the provider cannot create is logged and
// left out.
func NewServer(mp metric.MeterProvider) *Server {
	if mp == nil {
		return nil
	}
	m := mp.Meter(MeterName)
	s := &Server{}
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
		metric.WithDescription("Accepted connections closed without a byte written: the listener was not serving, or no filter chain matched."))
	keep(err)
	s.drains, err = m.Int64Counter(Drains, metric.WithUnit("{drain}"),
		metric.WithDescription("Configuration changes that started draining connections of the listener."))
	keep(err)
	s.rbac, err = m.Int64Counter(RBACDecisions, metric.WithUnit("{call}"),
		metric.WithDescription("RPCs allowed or denied by an RBAC HTTP filter."))
	keep(err)
	s.limited, err = m.Int64Counter(LocalRateLimited, metric.WithUnit("{call}"),
		metric.WithDescription("RPCs a local rate limit HTTP filter found no token for: refused (enforced), or let through where it does not enforce (shadow)."))
	keep(err)
	s.noTLS, err = m.Int64Counter(TLSNotApplied, metric.WithUnit("{connection}"),
		metric.WithDescription("Connections on a filter chain that asks for TLS, served without it because the server's credentials are not xDS credentials."))
	keep(err)
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
	}
}

// Listener records the metrics of one listener. Immutable.
type Listener struct {
	s          *Server
	addr       attribute.KeyValue
	attrs      []metric.AddOption // the listener
	notServing []metric.AddOption // the listener, reason not_serving
	noChain    []metric.AddOption // the listener, reason no_filter_chain
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

// RBAC returns the recorder of the RBAC HTTP filter named filter on this
// listener. Create it once per filter chain configuration (not per RPC);
// its Allowed and Denied methods are cheap enough for every RPC.
func (l *Listener) RBAC(filter string) *RBAC {
	if l == nil || l.s.rbac == nil {
		return nil
	}
	return &RBAC{l.filterOutcomes(l.s.rbac, AttrRBACFilter, filter, AttrRBACDecision, DecisionAllowed, DecisionDenied)}
}

// RBAC records the decisions of one RBAC HTTP filter. Immutable.
type RBAC struct{ o filterOutcomes }

// Allowed counts an RPC the filter let through.
func (r *RBAC) Allowed(ctx context.Context) {
	if r != nil {
		r.o.add(ctx, r.o.first)
	}
}

// Denied counts an RPC the filter refused.
func (r *RBAC) Denied(ctx context.Context) {
	if r != nil {
		r.o.add(ctx, r.o.second)
	}
}

// LocalRateLimit returns the recorder of the local rate limit HTTP filter
// named filter on this listener; nil (which records nothing) without
// metrics. Create it once per filter chain configuration, not per RPC.
func (l *Listener) LocalRateLimit(filter string) *LocalRateLimit {
	if l == nil || l.s.limited == nil {
		return nil
	}
	return &LocalRateLimit{l.filterOutcomes(l.s.limited, AttrLocalRateLimitFilter, filter, AttrLocalRateLimitMode, ModeEnforced, ModeShadow)}
}

// LocalRateLimit records the RPCs one local rate limit filter found no
// token for. Immutable.
type LocalRateLimit struct{ o filterOutcomes }

// Limited counts an RPC the filter refused.
func (r *LocalRateLimit) Limited(ctx context.Context) {
	if r != nil {
		r.o.add(ctx, r.o.first)
	}
}

// Shadowed counts an RPC the filter would have refused had it enforced.
func (r *LocalRateLimit) Shadowed(ctx context.Context) {
	if r != nil {
		r.o.add(ctx, r.o.second)
	}
}

// filterOutcomes is a counter of one HTTP filter's RPCs by one of two
// outcomes, with the attribute sets of both made once. Immutable.
type filterOutcomes struct {
	c             metric.Int64Counter
	first, second []metric.AddOption
}

// filterOutcomes returns the outcomes of the filter named filter (attribute
// filterKey) on this listener, counted in c under attribute outcomeKey with
// value first or second.
func (l *Listener) filterOutcomes(c metric.Int64Counter, filterKey, filter, outcomeKey, first, second string) filterOutcomes {
	f := attribute.String(filterKey, filter)
	return filterOutcomes{
		c:      c,
		first:  addWith(l.addr, f, attribute.String(outcomeKey, first)),
		second: addWith(l.addr, f, attribute.String(outcomeKey, second)),
	}
}

func (o filterOutcomes) add(ctx context.Context, opts []metric.AddOption) { o.c.Add(ctx, 1, opts...) }

// addWith is the option that records with exactly the attributes kvs.
func addWith(kvs ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}
