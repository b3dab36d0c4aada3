package rpcpath_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// tallyFilter is a throw-away filter, not a built-in: its config is a
// StringValue, a method prefix; its steps refuse the RPCs whose method
// does not start with it, and count both outcomes. It knows nothing of the
// server but the httpfilter interfaces.
type tallyFilter struct{}

const tallyURL = "type.googleapis.com/google.protobuf.StringValue"

var tallyOutcomes = &httpfilter.Outcomes{
	Metric: "test.tally", Unit: "{call}", Description: "RPCs the tally filter let through or refused.",
	FilterAttr: "test.tally.filter", OutcomeAttr: "test.tally.outcome", Values: []string{"passed", "refused"},
	Title: "Tally", None: "No tally yet.",
}

func (tallyFilter) ConfigTypeURLs() []string       { return []string{tallyURL} }
func (tallyFilter) OverrideTypeURLs() []string     { return nil }
func (tallyFilter) IsTerminal() bool               { return false }
func (tallyFilter) Outcomes() *httpfilter.Outcomes { return tallyOutcomes }
func (tallyFilter) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, nil
}
func (tallyFilter) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	m := &wrapperspb.StringValue{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, err
	}
	return m.GetValue(), nil
}
func (tallyFilter) BuildStep(_ string, config, _ httpfilter.Config) (httpfilter.Step, error) {
	return &tallyStep{prefix: config.(string)}, nil
}

type tallyStep struct {
	prefix string
	c      httpfilter.Counter
}

func (s *tallyStep) WithCounter(c httpfilter.Counter) httpfilter.Step {
	return &tallyStep{prefix: s.prefix, c: c}
}

func (s *tallyStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	if strings.HasPrefix(rpc.FullMethod, s.prefix) {
		s.c.Count(ctx, 0)
		return ctx, nil, nil
	}
	s.c.Count(ctx, 1)
	return ctx, nil, status.Error(codes.PermissionDenied, "tally: refused")
}

// TestPluginFilterCounted: a filter that is not built in registers with one
// line and has its outcomes counted in the listener's metrics and for the
// status page, through the interfaces it implements; nothing in the server
// names it. Counting allocates nothing.
func TestPluginFilterCounted(t *testing.T) {
	builtin.Registry.Register(tallyFilter{}) // the one line

	mr := testutils.NewMetricReader(t)
	obs := &rpcpath.ListenerShared{Metrics: metrics.NewServer(mr.Provider).Listener("127.0.0.1:443"), Counts: &rpcpath.Counts{}}
	hcm, p := hcmWith(t, "tally-1", wrapperspb.String("/pkg.S/"))
	h := rpcpath.ConnTap(rpcpath.NewChain("fc", hcm, rpcpath.NewSource(routesOf(t, e2e.DefaultRouteConfig("rc"), hcm, p, obs))))
	if got := codesOf(h, 2, "/pkg.S/M"); countOK(got) != 2 {
		t.Fatalf("RPCs the filter passes: %v, want OK", got)
	}
	if got := codesOf(h, 3, "/other.S/M"); got[0] != codes.PermissionDenied {
		t.Fatalf("RPCs the filter refuses: %v, want PERMISSION_DENIED", got)
	}

	lis := attribute.String(metrics.AttrListener, "127.0.0.1:443")
	for outcome, want := range map[string]int64{"passed": 2, "refused": 3} {
		got, _ := mr.Value(t, "test.tally", lis, attribute.String("test.tally.filter", "tally-1"), attribute.String("test.tally.outcome", outcome))
		if got != want {
			t.Errorf("test.tally{outcome=%s} = %d, want %d", outcome, got, want)
		}
	}
	counts := obs.Counts.Snapshot()
	if len(counts) != 1 || counts[0].Outcomes != tallyOutcomes || counts[0].Filter != "tally-1" || !slices.Equal(counts[0].Counts, []uint64{2, 3}) {
		t.Errorf("status page counts = %+v, want tally-1 with 2 passed, 3 refused", counts)
	}
	if n := allowedAllocs(t, h, peerContext()); n != 0 {
		t.Errorf("a counted RPC allocates %v times, want 0", n)
	}
}
