package metrics_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

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
	r := l.RBAC("rbac-1")
	r.Allowed(context.Background())
	r.Denied(context.Background())
	r.Denied(context.Background())
	rl := l.LocalRateLimit("rl-1")
	rl.Limited(context.Background())
	rl.Shadowed(context.Background())
	rl.Shadowed(context.Background())
	rl.Shadowed(context.Background())

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
		{metrics.RBACDecisions, []attribute.KeyValue{attribute.String(metrics.AttrRBACFilter, "rbac-1"), attribute.String(metrics.AttrRBACDecision, metrics.DecisionAllowed)}, 1},
		{metrics.RBACDecisions, []attribute.KeyValue{attribute.String(metrics.AttrRBACFilter, "rbac-1"), attribute.String(metrics.AttrRBACDecision, metrics.DecisionDenied)}, 2},
		{metrics.LocalRateLimited, []attribute.KeyValue{attribute.String(metrics.AttrLocalRateLimitFilter, "rl-1"), attribute.String(metrics.AttrLocalRateLimitMode, metrics.ModeEnforced)}, 1},
		{metrics.LocalRateLimited, []attribute.KeyValue{attribute.String(metrics.AttrLocalRateLimitFilter, "rl-1"), attribute.String(metrics.AttrLocalRateLimitMode, metrics.ModeShadow)}, 3},
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
	r := l.RBAC("f")
	r.Allowed(context.Background())
	r.Denied(context.Background())
	rl := l.LocalRateLimit("f")
	if rl != nil {
		t.Errorf("LocalRateLimit without metrics = %v, want nil", rl)
	}
	rl.Limited(context.Background())
	rl.Shadowed(context.Background())
}

// Recording an RBAC decision, the per-RPC path, does not allocate.
func TestRBACNoAllocs(t *testing.T) {
	mr := testutils.NewMetricReader(t)
	r := metrics.NewServer(mr.Provider).Listener("127.0.0.1:1").RBAC("f")
	ctx := context.Background()
	r.Allowed(ctx) // the first recording creates the data point
	if n := testing.AllocsPerRun(100, func() { r.Allowed(ctx) }); n != 0 {
		t.Errorf("RBAC.Allowed allocates %v times, want 0", n)
	}
}

// TestDependencies: the recorders need only the OpenTelemetry API.
func TestDependencies(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/metrics", mod+"/internal/xdsclient", mod+"/internal/filterchain", mod+"/internal/testutils", "testing")
}
