package e2e_test

// End-to-end tests of the fault injection filter
// (envoy.extensions.filters.http.fault.v3.HTTPFault) on the server: a real
// management server, a real xDS server and real grpc-go clients. Delays
// are checked against generous bounds, never as performance figures. None
// of these tests is parallel: max_active_faults counts the faults of the
// whole process (gRFC A33), and parallel tests only run once the
// sequential ones are done.

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// startFault serves a Listener whose chain runs a fault filter named name
// with cfg (before the router) over rc, and returns a connected client and
// the recorder of what reached the user's interceptors.
func startFault(ctx context.Context, t *testing.T, name string, cfg *faultpb.HTTPFault, rc *routepb.RouteConfiguration) (*testClient, *handlerRecorder, *testEnv, net.Addr) {
	t.Helper()
	env := newTestEnv(t)
	rec := &handlerRecorder{}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, name, cfg)}, rc, "")
	}, nil, rec.options()...)
	return connected(ctx, t, addr), rec, env, addr
}

// TestFaultAbort: an abort at 100% fails every RPC, unary and streaming,
// with its status and never reaches the user's code; at 0% (a per-route
// override) nothing is aborted; http_status maps to gRPC's code; status OK
// ends the RPC with OK without running the handler.
func TestFaultAbort(t *testing.T) {
	ctx := testContext(t)
	name := "fault"
	override := func(cfg *faultpb.HTTPFault) map[string]*anypb.Any { return map[string]*anypb.Any{name: anyOf(t, cfg)} }
	rc := caseRoutes("routes",
		caseRoute("zero", override(&faultpb.HTTPFault{Abort: grpcAbort(codes.DataLoss, 0)})),
		caseRoute("http503", override(&faultpb.HTTPFault{Abort: &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_HttpStatus{HttpStatus: 503}, Percentage: percent(100)}})),
		caseRoute("http200", override(&faultpb.HTTPFault{Abort: &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_HttpStatus{HttpStatus: 200}, Percentage: percent(100)}})),
		caseRoute("ok", override(&faultpb.HTTPFault{Abort: grpcAbort(codes.OK, 100)})),
	)
	c, rec, _, _ := startFault(ctx, t, name, &faultpb.HTTPFault{Abort: grpcAbort(codes.DataLoss, 100)}, rc)

	for _, tc := range []struct {
		caseName string
		want     codes.Code
		reached  bool
	}{
		{caseName: "all", want: codes.DataLoss},
		{caseName: "zero", want: codes.OK, reached: true},
		{caseName: "http503", want: codes.Unavailable},
		{caseName: "http200", want: codes.Unknown},
	} {
		for _, method := range []string{"EmptyCall", "FullDuplexCall"} {
			for i := range 5 {
				code, msg := statusOf(rpcResult(withCase(ctx, tc.caseName), c, method))
				if code != tc.want {
					t.Fatalf("%s %s #%d: %v %q, want %v", tc.caseName, method, i+1, code, msg, tc.want)
				}
				if code != codes.OK && msg != "fault filter abort" {
					t.Errorf("%s %s: message %q, want fault filter abort", tc.caseName, method, msg)
				}
			}
		}
		if got, want := len(rec.ofCase(tc.caseName)), map[bool]int{true: 10, false: 0}[tc.reached]; got != want {
			t.Errorf("%s: %d RPCs reached the user's interceptors, want %d", tc.caseName, got, want)
		}
	}

	// grpc_status OK: a unary RPC gets an empty response, a stream ends at
	// once with OK, and the handler does not run.
	resp, err := c.UnaryCall(withCase(ctx, "ok"), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("x")}})
	if err != nil || len(resp.GetPayload().GetBody()) != 0 {
		t.Errorf("UnaryCall aborted with OK: %v, %v; want OK and an empty response", resp, err)
	}
	st, err := c.FullDuplexCall(withCase(ctx, "ok"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("stream aborted with OK: Recv = %v, want io.EOF (status OK, no message)", err)
	}
	if n := len(rec.ofCase("ok")); n != 0 {
		t.Errorf("%d RPCs aborted with OK reached the user's interceptors, want none", n)
	}
}

// TestFaultHeaders: with header_abort and header_delay, the RPC's own
// headers ask for the fault (gRFC A33): an HTTP status (which wins over a
// gRPC one) or a gRPC code, a delay in milliseconds, and percentages that
// can lower the configured 100%.
func TestFaultHeaders(t *testing.T) {
	ctx := testContext(t)
	cfg := &faultpb.HTTPFault{
		Abort: &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_HeaderAbort_{HeaderAbort: &faultpb.FaultAbort_HeaderAbort{}}, Percentage: percent(100)},
		Delay: &faultcommonpb.FaultDelay{FaultDelaySecifier: &faultcommonpb.FaultDelay_HeaderDelay_{HeaderDelay: &faultcommonpb.FaultDelay_HeaderDelay{}}, Percentage: percent(100)},
	}
	c, rec, _, _ := startFault(ctx, t, "fault", cfg, allRoutes("routes"))
	for _, tc := range []struct {
		desc string
		kv   []string
		want codes.Code
	}{
		{desc: "no header", want: codes.OK},
		{desc: "grpc", kv: []string{"x-envoy-fault-abort-grpc-request", "5"}, want: codes.NotFound},
		{desc: "http", kv: []string{"x-envoy-fault-abort-request", "403"}, want: codes.PermissionDenied},
		{desc: "http wins", kv: []string{"x-envoy-fault-abort-request", "404", "x-envoy-fault-abort-grpc-request", "5"}, want: codes.Unimplemented},
		{desc: "percentage 0", kv: []string{"x-envoy-fault-abort-grpc-request", "5", "x-envoy-fault-abort-request-percentage", "0"}, want: codes.OK},
		{desc: "malformed", kv: []string{"x-envoy-fault-abort-grpc-request", "five"}, want: codes.OK},
	} {
		for _, method := range []string{"EmptyCall", "FullDuplexCall"} {
			if code, msg := statusOf(rpcResult(withCase(ctx, tc.desc, tc.kv...), c, method)); code != tc.want {
				t.Errorf("%s, %s: %v %q, want %v", tc.desc, method, code, msg, tc.want)
			}
		}
	}

	// A delay asked for by header: the handler runs after it.
	start := time.Now()
	if got := c.emptyCall(withCase(ctx, "delayed", "x-envoy-fault-delay-request", "300")); got != codes.OK {
		t.Fatalf("delayed RPC: %v, want OK", got)
	}
	calls := rec.ofCase("delayed")
	if len(calls) != 1 || calls[0].at.Sub(start) < 300*time.Millisecond {
		t.Errorf("delayed RPC reached the handler %v after it started (%d calls), want at least 300ms", calls, len(calls))
	}
	start = time.Now()
	if got := c.emptyCall(withCase(ctx, "not-delayed", "x-envoy-fault-delay-request", "5000", "x-envoy-fault-delay-request-percentage", "0")); got != codes.OK {
		t.Fatalf("RPC with a 0%% delay: %v, want OK", got)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("RPC with a 0%% delay took %v, want no 5s delay", d)
	}
}

// TestFaultDelay: a fixed delay runs before the handler without blocking
// the connection (another RPC on it goes through meanwhile), is cut short
// by the RPC's deadline (DEADLINE_EXCEEDED) or cancellation (CANCELED), and
// is followed by the abort when both are configured.
func TestFaultDelay(t *testing.T) {
	ctx := testContext(t)
	name := "fault"
	rc := caseRoutes("routes",
		caseRoute("none", map[string]*anypb.Any{name: anyOf(t, &routepb.FilterConfig{Disabled: true})}),
		caseRoute("short", map[string]*anypb.Any{name: anyOf(t, &faultpb.HTTPFault{Delay: fixedDelay(300*time.Millisecond, 100)})}),
		caseRoute("then-abort", map[string]*anypb.Any{name: anyOf(t, &faultpb.HTTPFault{Delay: fixedDelay(200*time.Millisecond, 100), Abort: grpcAbort(codes.Aborted, 100)})}),
	)
	env := newTestEnv(t)
	rec := &handlerRecorder{}
	hours := &caseArrivals{name: "hour"}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, name, &faultpb.HTTPFault{Delay: fixedDelay(time.Hour, 100)})}, rc, "")
	}, nil, append(rec.options(), grpc.StatsHandler(hours))...)
	c := connected(ctx, t, addr)

	start := time.Now()
	if got := c.emptyCall(withCase(ctx, "short")); got != codes.OK {
		t.Fatalf("RPC delayed 300ms: %v, want OK", got)
	}
	if calls := rec.ofCase("short"); len(calls) != 1 || calls[0].at.Sub(start) < 300*time.Millisecond {
		t.Errorf("RPC delayed 300ms reached the handler too early (%d calls)", len(calls))
	}
	start = time.Now()
	if got := c.emptyCall(withCase(ctx, "then-abort")); got != codes.Aborted || time.Since(start) < 200*time.Millisecond {
		t.Errorf("delay then abort: %v after %v, want ABORTED after at least 200ms", got, time.Since(start))
	}

	// An hour's delay: the deadline ends it; meanwhile the connection
	// serves other RPCs.
	dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	done := make(chan codes.Code, 1)
	start = time.Now()
	go func() { done <- c.emptyCall(withCase(dctx, "hour")) }()
	for i := range 3 {
		if got := c.emptyCall(withCase(ctx, "none")); got != codes.OK {
			t.Errorf("RPC %d on the same connection during the delay: %v, want OK", i+1, got)
		}
	}
	if got := <-done; got != codes.DeadlineExceeded {
		t.Errorf("delayed RPC with a 500ms deadline: %v, want DEADLINE_EXCEEDED", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("delayed RPC with a 500ms deadline returned after %v", d)
	}
	// Cancellation.
	cctx, ccancel := context.WithCancel(ctx)
	arrived := hours.n.Load()
	go func() { done <- c.emptyCall(withCase(cctx, "hour")) }()
	// Cancel once the server has the RPC's headers: its delay is then
	// starting or running.
	testutils.WaitFor(ctx, t, "the server to receive the RPC to cancel", func() error {
		if hours.n.Load() == arrived {
			return errors.New("not received")
		}
		return nil
	})
	ccancel()
	if got := <-done; got != codes.Canceled {
		t.Errorf("delayed RPC cancelled: %v, want CANCELED", got)
	}
	if n := len(rec.ofCase("hour")); n != 0 {
		t.Errorf("%d RPCs whose delay did not end reached the handler, want none", n)
	}
}

// TestFaultMaxActiveFaults: with max_active_faults 2, while two RPCs are
// being delayed, others get no fault at all; once one ends, faults apply
// again. The two held RPCs (route "held": an hour's delay) and the probes
// (route "probe": an abort alone, which is active only for an instant) are
// on routes of their own, so a probe that goes through proves that both
// held RPCs are being delayed.
func TestFaultMaxActiveFaults(t *testing.T) {
	ctx := testContext(t)
	name := "fault"
	limited := func(f *faultpb.HTTPFault) map[string]*anypb.Any {
		f.MaxActiveFaults = wrapperspb.UInt32(2)
		return map[string]*anypb.Any{name: anyOf(t, f)}
	}
	rc := caseRoutes("routes",
		caseRoute("held", limited(&faultpb.HTTPFault{Delay: fixedDelay(time.Hour, 100)})),
		caseRoute("probe", limited(&faultpb.HTTPFault{Abort: grpcAbort(codes.Aborted, 100)})),
	)
	c, _, _, _ := startFault(ctx, t, name, &faultpb.HTTPFault{}, rc)

	// Each held RPC is made again if it got no fault (it arrived while a
	// probe was active), until it is cancelled.
	held := make([]context.CancelFunc, 2)
	results := make(chan codes.Code, 2)
	for i := range held {
		hctx, cancel := context.WithCancel(ctx)
		held[i] = cancel
		go func() {
			for {
				code := c.emptyCall(withCase(hctx, "held"))
				if code != codes.OK || hctx.Err() != nil {
					results <- code
					return
				}
			}
		}()
	}
	probe := func(ctx context.Context) codes.Code { return c.emptyCall(withCase(ctx, "probe")) }
	waitForCode(ctx, t, "probe while two faults are active", codes.OK, probe)
	for i := range 5 {
		if got := probe(ctx); got != codes.OK {
			t.Errorf("probe %d while two faults are active: %v, want OK (no fault)", i+1, got)
		}
	}
	// One ends: faults apply again.
	held[0]()
	if got := <-results; got != codes.Canceled {
		t.Errorf("cancelled held RPC: %v, want CANCELED", got)
	}
	waitForCode(ctx, t, "probe once a fault slot is free", codes.Aborted, probe)
	held[1]()
	if got := <-results; got != codes.Canceled {
		t.Errorf("cancelled held RPC: %v, want CANCELED", got)
	}
}

// TestFaultNACK: invalid fault configs are NACKed naming the field; the
// last good config keeps serving.
func TestFaultNACK(t *testing.T) {
	ctx := testContext(t)
	name := "fault"
	good := &faultpb.HTTPFault{Abort: grpcAbort(codes.DataLoss, 100)}
	c, _, env, addr := startFault(ctx, t, name, good, allRoutes("routes"))
	for _, tc := range []struct {
		desc string
		cfg  *faultpb.HTTPFault
		want string
	}{
		{desc: "http_status 600", cfg: &faultpb.HTTPFault{Abort: &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_HttpStatus{HttpStatus: 600}}}, want: "abort.http_status"},
		{desc: "delay without a kind", cfg: &faultpb.HTTPFault{Delay: &faultcommonpb.FaultDelay{Percentage: percent(100)}}, want: "delay"},
		{desc: "zero delay", cfg: &faultpb.HTTPFault{Delay: fixedDelay(0, 100)}, want: "delay.fixed_delay"},
	} {
		t.Run(strings.ReplaceAll(tc.desc, " ", "_"), func(t *testing.T) {
			seen := len(env.ms.Requests())
			rc := allRoutes("routes")
			rc.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{name: anyOf(t, tc.cfg)}
			env.update(ctx, t, []*listenerpb.Listener{filtersListener(addr, []*hcmpb.HttpFilter{httpFilter(t, name, good)}, rc, "")}, nil)
			nack, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(listenerTypeURL)))
			if err != nil {
				t.Fatalf("no NACK: %v", err)
			}
			if d := nack.GetErrorDetail().GetMessage(); !strings.Contains(d, "fault: ") || !strings.Contains(d, tc.want) {
				t.Errorf("NACK %q does not name fault and %q", d, tc.want)
			}
			if got := c.emptyCall(ctx); got != codes.DataLoss {
				t.Errorf("after the NACK: %v, want DATA_LOSS (the last good config)", got)
			}
		})
	}
}

// caseArrivals is a stats.Handler counting the RPCs whose x-case is name
// when the server receives their headers.
type caseArrivals struct {
	name string
	n    atomic.Int32
}

func (h *caseArrivals) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (h *caseArrivals) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InHeader); ok {
		if v := in.Header.Get(caseHeader); len(v) > 0 && v[0] == h.name {
			h.n.Add(1)
		}
	}
}

func (h *caseArrivals) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (h *caseArrivals) HandleConn(context.Context, stats.ConnStats) {}
