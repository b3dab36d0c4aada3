package metrics_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/proxyless-grpc/xds/internal/httpfilter/localratelimit"
	"github.com/proxyless-grpc/xds/internal/httpfilter/rbacfilter"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// The counters of the RBAC and local rate limit filters, as they declare
// them (httpfilter.Outcomes).
var (
	rbacSpec = metrics.OutcomeSpec{Metric: rbacfilter.DecisionsMetric, Unit: "{call}", FilterAttr: rbacfilter.AttrFilter,
		OutcomeAttr: rbacfilter.AttrDecision, Values: []string{rbacfilter.DecisionAllowed, rbacfilter.DecisionDenied}}
	rateLimitSpec = metrics.OutcomeSpec{Metric: localratelimit.LimitedMetric, Unit: "{call}", FilterAttr: localratelimit.AttrFilter,
		OutcomeAttr: localratelimit.AttrMode, Values: []string{localratelimit.ModeEnforced, localratelimit.ModeShadow}}
)

// Every recorder records under its listener (and filter) attributes.
func TestRecorders(t *testing.T) {
	mr := testutils.NewMetricReader(t)
	l := metrics.NewServer(mr.Provider).Listener("127.0.0.1:443")
	l.ServingChanged(1)
	l.ServingChanged(-1)
	l.ServingChanged(1)
	l.Accepted()
	l.Accepted()
	l.RejectedNotServing()
	l.RejectedNoFilterChain()
	l.RejectedNoFilterChain()
	l.DrainStarted()
	r := l.Outcomes(rbacSpec, "rbac-1")
	r.Count(context.Background(), 0)
	r.Count(context.Background(), 1)
	r.Count(context.Background(), 1)
	rl := l.Outcomes(rateLimitSpec, "rl-1")
	rl.Count(context.Background(), 0)
	rl.Count(context.Background(), 1)
	rl.Count(context.Background(), 1)
	rl.Count(context.Background(), 1)

	lis := attribute.String(metrics.AttrListener, "127.0.0.1:443")
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{metrics.Serving, nil, 1},
		{metrics.ConnectionsAccepted, nil, 2},
		{metrics.ConnectionsRejected, []attribute.KeyValue{attribute.String(metrics.AttrReason, metrics.ReasonNotServing)}, 1},
		{metrics.ConnectionsRejected, []attribute.KeyValue{attribute.String(metrics.AttrReason, metrics.ReasonNoFilterChain)}, 2},
		{metrics.Drains, nil, 1},
		{rbacfilter.DecisionsMetric, []attribute.KeyValue{attribute.String(rbacfilter.AttrFilter, "rbac-1"), attribute.String(rbacfilter.AttrDecision, rbacfilter.DecisionAllowed)}, 1},
		{rbacfilter.DecisionsMetric, []attribute.KeyValue{attribute.String(rbacfilter.AttrFilter, "rbac-1"), attribute.String(rbacfilter.AttrDecision, rbacfilter.DecisionDenied)}, 2},
		{localratelimit.LimitedMetric, []attribute.KeyValue{attribute.String(localratelimit.AttrFilter, "rl-1"), attribute.String(localratelimit.AttrMode, localratelimit.ModeEnforced)}, 1},
		{localratelimit.LimitedMetric, []attribute.KeyValue{attribute.String(localratelimit.AttrFilter, "rl-1"), attribute.String(localratelimit.AttrMode, localratelimit.ModeShadow)}, 3},
	} {
		got, ok := mr.Value(t, c.name, append(c.attrs, lis)...)
		if !ok || got != c.want {
			t.Errorf("%s%v = %d (recorded: %v), want %d", c.name, c.attrs, got, ok, c.want)
		}
	}
}

// Without a MeterProvider every recorder is nil and records nothing.
func TestNilRecorders(t *testing.T) {
	s := metrics.NewServer(nil)
	if s != nil {
		t.Fatalf("NewServer(nil) = %v, want nil", s)
	}
	l := s.Listener("127.0.0.1:1")
	l.ServingChanged(1)
	l.Accepted()
	l.RejectedNotServing()
	l.RejectedNoFilterChain()
	l.DrainStarted()
	r := l.Outcomes(rbacSpec, "f")
	r.Count(context.Background(), 0)
	r.Count(context.Background(), 1)
	rl := l.Outcomes(rateLimitSpec, "f")
	if rl != nil {
		t.Errorf("Outcomes without metrics = %v, want nil", rl)
	}
	rl.Count(context.Background(), 0)
	rl.Count(context.Background(), 1)
}

// Recording an RBAC decision, the per-RPC path, does not allocate.
func TestRBACNoAllocs(t *testing.T) {
	mr := testutils.NewMetricReader(t)
	r := metrics.NewServer(mr.Provider).Listener("127.0.0.1:1").Outcomes(rbacSpec, "f")
	ctx := context.Background()
	r.Count(ctx, 0) // the first recording creates the data point
	if n := testing.AllocsPerRun(100, func() { r.Count(ctx, 0) }); n != 0 {
		t.Errorf("Outcomes.Count allocates %v times, want 0", n)
	}
}

// TestDependencies: the recorders need only the OpenTelemetry API.
func TestDependencies(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/metrics", mod+"/internal/xdsclient", mod+"/internal/filterchain", mod+"/internal/testutils", "testing")
}

// The access log recorder counts dropped lines by path and reason, without
// allocating; without metrics it is nil and records nothing.
func TestAccessLogDropped(t *testing.T) {
	mr := testutils.NewMetricReader(t)
	a := metrics.NewServer(mr.Provider).AccessLog("/var/log/access.log")
	a.DroppedBufferFull(3)
	a.DroppedWriteError(2)
	a.DroppedBufferFull(1)
	path := attribute.String(metrics.AttrAccessLogPath, "/var/log/access.log")
	for _, c := range []struct {
		reason string
		want   int64
	}{{metrics.ReasonBufferFull, 4}, {metrics.ReasonWriteError, 2}} {
		if got, ok := mr.Value(t, metrics.AccessLogDropped, path, attribute.String(metrics.AttrReason, c.reason)); !ok || got != c.want {
			t.Errorf("%s{%s} = %d (recorded: %v), want %d", metrics.AccessLogDropped, c.reason, got, ok, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { a.DroppedBufferFull(1) }); n != 0 {
		t.Errorf("DroppedBufferFull allocates %v times, want 0", n)
	}
	var none *metrics.Server
	if r := none.AccessLog("/x"); r != nil {
		t.Errorf("AccessLog without metrics = %v, want nil", r)
	}
	none.AccessLog("/x").DroppedBufferFull(1)
	none.AccessLog("/x").DroppedWriteError(1)
}
