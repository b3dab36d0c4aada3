package accesslog_test

import (
	"testing"
	"time"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	accesslogdatapb "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	streampb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
)

// Each filter, with Envoy's meaning for a record of an RPC.
func TestFilters(t *testing.T) {
	ok := &accesslog.Record{ResponseCode: 200, HasGRPCStatus: true, GRPCStatus: 0, Duration: 20 * time.Millisecond,
		FullMethod: "/pkg.Svc/Get", RequestHeaders: map[string][]string{"x-env": {"canary"}, "trace-bin": {"\x01\x02"}}}
	denied := &accesslog.Record{ResponseCode: 200, HasGRPCStatus: true, GRPCStatus: 7, Duration: 2 * time.Millisecond,
		FullMethod: "/grpc.health.v1.Health/Check", ResponseFlags: accesslog.FlagUnauthorizedExternalService}
	reset := &accesslog.Record{Duration: 500 * time.Millisecond, ResponseFlags: accesslog.FlagDownstreamRemoteReset}
	limited := &accesslog.Record{ResponseCode: 200, HasGRPCStatus: true, GRPCStatus: 14, ResponseFlags: accesslog.FlagRateLimited}
	records := []*accesslog.Record{ok, denied, reset, limited}

	notHealthCheck := &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_NotHealthCheckFilter{NotHealthCheckFilter: &accesslogpb.NotHealthCheckFilter{}}}
	traceable := &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_TraceableFilter{TraceableFilter: &accesslogpb.TraceableFilter{}}}
	for _, tc := range []struct {
		desc   string
		filter *accesslogpb.AccessLogFilter
		want   [4]bool // ok, denied, reset, limited
	}{
		{"no filter", nil, [4]bool{true, true, true, true}},
		{"status >= 200", accesslogcfg.StatusCode(accesslogpb.ComparisonFilter_GE, 200), [4]bool{true, true, false, true}},
		{"status == 0 (no response)", accesslogcfg.StatusCode(accesslogpb.ComparisonFilter_EQ, 0), [4]bool{false, false, true, false}},
		{"status <= 199", accesslogcfg.StatusCode(accesslogpb.ComparisonFilter_LE, 199), [4]bool{false, false, true, false}},
		{"status != 200", accesslogcfg.StatusCode(accesslogpb.ComparisonFilter_NE, 200), [4]bool{false, false, true, false}},
		{"duration >= 20ms", accesslogcfg.Duration(accesslogpb.ComparisonFilter_GE, 20), [4]bool{true, false, true, false}},
		{"gRPC status not OK", accesslogcfg.GRPCStatus(true, accesslogpb.GrpcStatusFilter_OK), [4]bool{false, true, true, true}},
		{"gRPC status PERMISSION_DENIED or UNAVAILABLE", accesslogcfg.GRPCStatus(false, accesslogpb.GrpcStatusFilter_PERMISSION_DENIED, accesslogpb.GrpcStatusFilter_UNAVAILABLE), [4]bool{false, true, false, true}},
		{"gRPC status UNKNOWN (none sent)", accesslogcfg.GRPCStatus(false, accesslogpb.GrpcStatusFilter_UNKNOWN), [4]bool{false, false, true, false}},
		{"any response flag", accesslogcfg.Flags(), [4]bool{false, true, true, true}},
		{"flag RL or UAEX", accesslogcfg.Flags("RL", "UAEX"), [4]bool{false, true, false, true}},
		{"header exact", accesslogcfg.Header(&routepb.HeaderMatcher{Name: "X-Env", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{
			StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "canary"}}}}), [4]bool{true, false, false, false}},
		{"header :path prefix", accesslogcfg.Header(&routepb.HeaderMatcher{Name: ":path", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{
			StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: "/grpc.health.v1.Health/"}}}, InvertMatch: true}),
			[4]bool{true, false, false, false}},
		{"binary header in wire form", accesslogcfg.Header(&routepb.HeaderMatcher{Name: "trace-bin", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{
			StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "AQI"}}}}), [4]bool{true, false, false, false}},
		{"not a health check: every RPC", notHealthCheck, [4]bool{true, true, true, true}},
		{"traceable: no RPC", traceable, [4]bool{false, false, false, false}},
		{"or with traceable", accesslogcfg.Or(traceable, accesslogcfg.Flags("RL")), [4]bool{false, false, false, true}},
		{"and", accesslogcfg.And(accesslogcfg.StatusCode(accesslogpb.ComparisonFilter_GE, 200), accesslogcfg.GRPCStatus(true, accesslogpb.GrpcStatusFilter_OK)), [4]bool{false, true, false, true}},
		{"log type DownstreamEnd", accesslogcfg.LogType(false, accesslogdatapb.AccessLogType_DownstreamEnd), [4]bool{true, true, true, true}},
		{"log type excluding DownstreamEnd", accesslogcfg.LogType(true, accesslogdatapb.AccessLogType_DownstreamEnd), [4]bool{false, false, false, false}},
		{"log type DownstreamStart", accesslogcfg.LogType(false, accesslogdatapb.AccessLogType_DownstreamStart), [4]bool{false, false, false, false}},
		{"runtime 100%", accesslogcfg.Runtime(100, typepb.FractionalPercent_HUNDRED, true), [4]bool{true, true, true, true}},
		{"runtime 0%", accesslogcfg.Runtime(0, typepb.FractionalPercent_HUNDRED, false), [4]bool{false, false, false, false}},
		{"runtime unset: 0%", &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_RuntimeFilter{RuntimeFilter: &accesslogpb.RuntimeFilter{RuntimeKey: "k"}}}, [4]bool{false, false, false, false}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			l := compileOne(t, accesslogcfg.TextFormat("x"), tc.filter)
			for i, r := range records {
				if got := l.Match(r); got != tc.want[i] {
					t.Errorf("record %d: Match = %v, want %v", i, got, tc.want[i])
				}
			}
		})
	}
}

// A runtime filter samples by the x-request-id (its first 8 hex digits,
// modulo the denominator) unless told to use independent randomness, so
// that every host of a request decides alike; without a usable id it draws
// at random.
func TestRuntimeFilterSampling(t *testing.T) {
	byID := compileOne(t, accesslogcfg.TextFormat("x"), accesslogcfg.Runtime(50, typepb.FractionalPercent_HUNDRED, false))
	withID := func(id string) *accesslog.Record {
		return &accesslog.Record{RequestHeaders: map[string][]string{"x-request-id": {id}}}
	}
	// 0x00000031 % 100 = 49 < 50; 0x00000032 % 100 = 50.
	for range 50 {
		if !byID.Match(withID("00000031-aaaa-bbbb-cccc-dddddddddddd")) {
			t.Fatal("id 0x31 not sampled at 50%")
		}
		if byID.Match(withID("00000032-aaaa-bbbb-cccc-dddddddddddd")) {
			t.Fatal("id 0x32 sampled at 50%")
		}
	}
	for _, l := range []*accesslog.Logger{
		byID, compileOne(t, accesslogcfg.TextFormat("x"), accesslogcfg.Runtime(50, typepb.FractionalPercent_HUNDRED, true)),
	} {
		r := withID("00000031-aaaa")
		if l == byID {
			r = withID("not-hex!")
		}
		hits := 0
		const n = 4000
		for range n {
			if l.Match(r) {
				hits++
			}
		}
		if hits < n/4 || hits > 3*n/4 {
			t.Errorf("sampled %d of %d at 50%% by independent draws", hits, n)
		}
	}
}

// The stream logger's type decides where lines go; a filter is per logger.
func TestFilterPerLogger(t *testing.T) {
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{
		logOf(t, &streampb.StdoutAccessLog{}, accesslogcfg.StatusCode(accesslogpb.ComparisonFilter_GE, 500)),
		logOf(t, &streampb.StderrAccessLog{}, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &accesslog.Record{ResponseCode: 200}
	if cfg.Loggers()[0].Match(r) || !cfg.Loggers()[1].Match(r) {
		t.Errorf("filters not per logger")
	}
}

// Evaluating the filters of a record (on the RPC's path) allocates nothing.
func TestMatchAllocs(t *testing.T) {
	l := compileOne(t, accesslogcfg.TextFormat("x"), accesslogcfg.And(
		accesslogcfg.StatusCode(accesslogpb.ComparisonFilter_GE, 200),
		accesslogcfg.Or(accesslogcfg.GRPCStatus(true, accesslogpb.GrpcStatusFilter_OK), accesslogcfg.Flags("RL")),
		accesslogcfg.Header(&routepb.HeaderMatcher{Name: "x-env", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}),
		accesslogcfg.Runtime(10, typepb.FractionalPercent_HUNDRED, false),
	))
	r := &accesslog.Record{ResponseCode: 200, HasGRPCStatus: true, GRPCStatus: 5,
		RequestHeaders: map[string][]string{"x-env": {"a"}, "x-request-id": {"00000001-x"}}}
	if n := testing.AllocsPerRun(100, func() { l.Match(r) }); n != 0 {
		t.Errorf("Match allocates %v times, want 0", n)
	}
}
