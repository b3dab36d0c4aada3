package xdsclient

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// DefaultScope is the Scope of a client whose Options leave it empty: the
// value gRFC A71 gives to the client of xDS-enabled servers.
const DefaultScope = "#server"

// meterName is the instrumentation scope of the client's metrics.
const meterName = "github.com/proxyless-grpc/xds/internal/xdsclient"

// Metric names and attribute keys of gRFC A78.
const (
	metricUpdatesValid   = "grpc.xds_client.resource_updates_valid"
	metricUpdatesInvalid = "grpc.xds_client.resource_updates_invalid"
	metricServerFailure  = "grpc.xds_client.server_failure"
	metricConnected      = "grpc.xds_client.connected"
	metricResources      = "grpc.xds_client.resources"

	attrTarget       = "grpc.target"
	attrServer       = "grpc.xds.server"
	attrResourceType = "grpc.xds.resource_type"
	attrAuthority    = "grpc.xds.authority"
	attrCacheState   = "grpc.xds.cache_state"
)

// clientMetrics records the gRFC A78 metrics of one client. A nil
// *clientMetrics (no MeterProvider) records nothing. The counters are safe
// for concurrent use; the observable gauges are read by a callback that
// takes a snapshot on the serializer.
type clientMetrics struct {
	target   attribute.KeyValue // immutable
	valid    metric.Int64Counter
	invalid  metric.Int64Counter
	failures metric.Int64Counter
	reg      metric.Registration // unregistered by close
}

// newClientMetrics creates the instruments of c on mp; nil mp means no
// metrics. An instrument that cannot be created is logged and left out.
func newClientMetrics(c *Client, mp metric.MeterProvider, scope string) *clientMetrics {
	if mp == nil {
		return nil
	}
	meter := mp.Meter(meterName)
	m := &clientMetrics{target: attribute.String(attrTarget, scope)}
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	m.valid, err = meter.Int64Counter(metricUpdatesValid, metric.WithUnit("{resource}"),
		metric.WithDescription("Resources received that were considered valid, also when unchanged."))
	keep(err)
	m.invalid, err = meter.Int64Counter(metricUpdatesInvalid, metric.WithUnit("{resource}"),
		metric.WithDescription("Resources received that were considered invalid."))
	keep(err)
	m.failures, err = meter.Int64Counter(metricServerFailure, metric.WithUnit("{failure}"),
		metric.WithDescription("xDS servers going from healthy to unhealthy (gRFC A57)."))
	keep(err)
	connected, err := meter.Int64ObservableGauge(metricConnected, metric.WithUnit("{bool}"),
		metric.WithDescription("Whether the xDS client has a working ADS stream to the xDS server."))
	keep(err)
	resources, err := meter.Int64ObservableGauge(metricResources, metric.WithUnit("{resource}"),
		metric.WithDescription("Number of xDS resources."))
	keep(err)
	if connected != nil && resources != nil {
		m.reg, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
			return c.observe(ctx, o, m, connected, resources)
		}, connected, resources)
		keep(err)
	}
	if len(errs) > 0 {
		logger.Errorf("xdsclient: creating metrics: %v", errs)
	}
	return m
}

// updates counts the resources of one response.
func (m *clientMetrics) updates(server, resourceType string, valid, invalid int64) {
	if m == nil {
		return
	}
	attrs := metric.WithAttributes(m.target, attribute.String(attrServer, server), attribute.String(attrResourceType, resourceType))
	if valid > 0 && m.valid != nil {
		m.valid.Add(context.Background(), valid, attrs)
	}
	if invalid > 0 && m.invalid != nil {
		m.invalid.Add(context.Background(), invalid, attrs)
	}
}

// serverFailure counts a server going unhealthy.
func (m *clientMetrics) serverFailure(server string) {
	if m == nil || m.failures == nil {
		return
	}
	m.failures.Add(context.Background(), 1, metric.WithAttributes(m.target, attribute.String(attrServer, server)))
}

// close stops the gauges' callback.
func (m *clientMetrics) close() {
	if m != nil && m.reg != nil {
		if err := m.reg.Unregister(); err != nil {
			logger.Warningf("xdsclient: unregistering metrics: %v", err)
		}
	}
}

// gaugeKey is one point of grpc.xds_client.resources.
type gaugeKey struct{ authority, state, typ string }

// observe reports the gauges. It takes a snapshot on the serializer (so it
// waits for a running watcher callback) and gives up when ctx ends or the
// client is closing.
func (c *Client) observe(ctx context.Context, o metric.Observer, m *clientMetrics, connected, resources metric.Int64Observable) error {
	type chanPoint struct {
		server    string
		connected bool
	}
	var chans []chanPoint
	counts := make(map[gaugeKey]int64)
	snapshot := func(context.Context) {
		if c.closed.HasFired() {
			return
		}
		for _, ch := range c.channels {
			chans = append(chans, chanPoint{ch.server.ServerURI, ch.connected})
		}
		for _, a := range c.allAuthorities() {
			auth := a.name
			if auth == "" {
				auth = "#old"
			}
			for _, states := range a.resources {
				for _, s := range states {
					counts[gaugeKey{auth, cacheState(s), s.rt.typeSuffix()}]++
				}
			}
		}
	}
	done := make(chan struct{})
	if !c.serializer.TrySchedule(func(ctx context.Context) { snapshot(ctx); close(done) }) {
		return nil
	}
	select {
	case <-done:
	case <-c.closed.Done():
		// Close waits in Unregister for this collection to end.
		return nil
	case <-ctx.Done():
		return fmt.Errorf("xdsclient: collecting metrics: %w", ctx.Err())
	}
	for _, p := range chans {
		v := int64(0)
		if p.connected {
			v = 1
		}
		o.ObserveInt64(connected, v, metric.WithAttributes(m.target, attribute.String(attrServer, p.server)))
	}
	for k, n := range counts {
		o.ObserveInt64(resources, n, metric.WithAttributes(m.target, attribute.String(attrAuthority, k.authority),
			attribute.String(attrCacheState, k.state), attribute.String(attrResourceType, k.typ)))
	}
	return nil
}

// cacheState is the grpc.xds.cache_state of s (gRFC A78, A88). Only called
// from serializer callbacks.
func cacheState(s *resourceState) string {
	switch s.status {
	case StatusRequested:
		return "requested"
	case StatusDoesNotExist:
		return "does_not_exist"
	case StatusACKed:
		return "acked"
	case StatusNACKed:
		if s.data != nil {
			return "nacked_but_cached"
		}
		return "nacked"
	case StatusReceivedError:
		if s.data != nil {
			return "received_error_but_cached"
		}
		return "received_error"
	case StatusTimeout:
		return "timeout"
	default:
		return "unknown"
	}
}
