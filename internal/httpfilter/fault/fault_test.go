package fault

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

func pct(n uint32) *typepb.FractionalPercent { return &typepb.FractionalPercent{Numerator: n} }

func abortGRPC(code uint32, p uint32) *faultpb.FaultAbort {
	return &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_GrpcStatus{GrpcStatus: code}, Percentage: pct(p)}
}

func abortHTTP(code uint32, p uint32) *faultpb.FaultAbort {
	return &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_HttpStatus{HttpStatus: code}, Percentage: pct(p)}
}

func abortHeader(p uint32) *faultpb.FaultAbort {
	return &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_HeaderAbort_{HeaderAbort: &faultpb.FaultAbort_HeaderAbort{}}, Percentage: pct(p)}
}

func delayFixed(d time.Duration, p uint32) *faultcommonpb.FaultDelay {
	return &faultcommonpb.FaultDelay{FaultDelaySecifier: &faultcommonpb.FaultDelay_FixedDelay{FixedDelay: durationpb.New(d)}, Percentage: pct(p)}
}

func delayHeader(p uint32) *faultcommonpb.FaultDelay {
	return &faultcommonpb.FaultDelay{FaultDelaySecifier: &faultcommonpb.FaultDelay_HeaderDelay_{HeaderDelay: &faultcommonpb.FaultDelay_HeaderDelay{}}, Percentage: pct(p)}
}

func parseOf(t *testing.T, m *faultpb.HTTPFault) (*Config, error) {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Filter{}.ParseConfig(httpfilter.RawConfig{TypeURL: a.GetTypeUrl(), Any: a})
	if err != nil {
		return nil, err
	}
	return c.(*Config), nil
}

func stepOf(t *testing.T, m *faultpb.HTTPFault) *Step {
	t.Helper()
	c, err := parseOf(t, m)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Filter{}.BuildStep("fault", c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		return nil
	}
	return s.(*Step)
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		desc string
		in   *faultpb.HTTPFault
		want string
	}{
		{desc: "http_status below 200", in: &faultpb.HTTPFault{Abort: abortHTTP(199, 100)}, want: "abort.http_status: 199"},
		{desc: "http_status 600", in: &faultpb.HTTPFault{Abort: abortHTTP(600, 100)}, want: "abort.http_status: 600"},
		{desc: "abort without error type", in: &faultpb.HTTPFault{Abort: &faultpb.FaultAbort{}}, want: "abort: none of"},
		{desc: "delay without specifier", in: &faultpb.HTTPFault{Delay: &faultcommonpb.FaultDelay{}}, want: "delay: neither"},
		{desc: "zero delay", in: &faultpb.HTTPFault{Delay: delayFixed(0, 100)}, want: "delay.fixed_delay"},
		{desc: "negative delay", in: &faultpb.HTTPFault{Delay: delayFixed(-time.Second, 100)}, want: "delay.fixed_delay"},
		{desc: "bad delay denominator", in: &faultpb.HTTPFault{Delay: &faultcommonpb.FaultDelay{
			FaultDelaySecifier: &faultcommonpb.FaultDelay_FixedDelay{FixedDelay: durationpb.New(time.Second)},
			Percentage:         &typepb.FractionalPercent{Numerator: 1, Denominator: 5},
		}}, want: "delay.percentage.denominator"},
		{desc: "bad header matcher", in: &faultpb.HTTPFault{Abort: abortGRPC(1, 100), Headers: []*routepb.HeaderMatcher{{Name: ""}}}, want: "headers[0].name"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := parseOf(t, tc.in)
			if err == nil || !strings.HasPrefix(err.Error(), "fault: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parse error %v, want one starting fault: and mentioning %q", err, tc.want)
			}
		})
	}
}

// TestNoStep: configs that can fault nothing have no step.
func TestNoStep(t *testing.T) {
	for _, tc := range []struct {
		desc string
		in   *faultpb.HTTPFault
	}{
		{desc: "empty", in: &faultpb.HTTPFault{}},
		{desc: "0% (percentage unset)", in: &faultpb.HTTPFault{Abort: &faultpb.FaultAbort{ErrorType: &faultpb.FaultAbort_GrpcStatus{GrpcStatus: 3}}, Delay: delayFixed(time.Second, 0)}},
		{desc: "max_active_faults 0", in: &faultpb.HTTPFault{Abort: abortGRPC(3, 100), MaxActiveFaults: wrapperspb.UInt32(0)}},
		{desc: "upstream_cluster", in: &faultpb.HTTPFault{Abort: abortGRPC(3, 100), UpstreamCluster: "c"}},
	} {
		if s := stepOf(t, tc.in); s != nil {
			t.Errorf("%s: step %v, want none", tc.desc, s)
		}
	}
}

func rpcWith(kv ...string) httpfilter.RPC {
	return httpfilter.RPC{Request: httpfilter.Request{FullMethod: "/s.S/M", Header: metadata.Pairs(kv...)}}
}

// TestAbort: aborts without a delay fail the RPC in the tap with the
// mapped code; with status OK they are left for after the tap.
func TestAbort(t *testing.T) {
	tests := []struct {
		desc     string
		in       *faultpb.HTTPFault
		rpc      httpfilter.RPC
		wantCode codes.Code
		wantMsg  string
		deferred bool
	}{
		{desc: "grpc_status", in: &faultpb.HTTPFault{Abort: abortGRPC(uint32(codes.DataLoss), 100)}, rpc: rpcWith(), wantCode: codes.DataLoss, wantMsg: "fault filter abort"},
		{desc: "grpc_status unknown to gRPC", in: &faultpb.HTTPFault{Abort: abortGRPC(99, 100)}, rpc: rpcWith(), wantCode: codes.Unknown},
		{desc: "http_status 503", in: &faultpb.HTTPFault{Abort: abortHTTP(503, 100)}, rpc: rpcWith(), wantCode: codes.Unavailable},
		{desc: "http_status 200 is UNKNOWN", in: &faultpb.HTTPFault{Abort: abortHTTP(200, 100)}, rpc: rpcWith(), wantCode: codes.Unknown},
		{desc: "response_body", in: &faultpb.HTTPFault{Abort: &faultpb.FaultAbort{
			ErrorType: &faultpb.FaultAbort_GrpcStatus{GrpcStatus: 8}, Percentage: pct(100), ResponseBody: "busy",
		}}, rpc: rpcWith(), wantCode: codes.ResourceExhausted, wantMsg: "busy"},
		{desc: "0%", in: &faultpb.HTTPFault{Abort: abortGRPC(3, 0), Delay: delayFixed(time.Hour, 0)}, rpc: rpcWith(), wantCode: codes.OK},
		{desc: "grpc_status OK", in: &faultpb.HTTPFault{Abort: abortGRPC(0, 100)}, rpc: rpcWith(), deferred: true},
		{desc: "header: grpc", in: &faultpb.HTTPFault{Abort: abortHeader(100)}, rpc: rpcWith(headerAbortGRPC, "5"), wantCode: codes.NotFound},
		{desc: "header: http wins over grpc", in: &faultpb.HTTPFault{Abort: abortHeader(100)}, rpc: rpcWith(headerAbortGRPC, "5", headerAbortHTTP, "401"), wantCode: codes.Unauthenticated},
		{desc: "header: bad http ignored", in: &faultpb.HTTPFault{Abort: abortHeader(100)}, rpc: rpcWith(headerAbortHTTP, "700", headerAbortGRPC, "5"), wantCode: codes.NotFound},
		{desc: "header: malformed", in: &faultpb.HTTPFault{Abort: abortHeader(100)}, rpc: rpcWith(headerAbortGRPC, "five"), wantCode: codes.OK},
		{desc: "header: absent", in: &faultpb.HTTPFault{Abort: abortHeader(100)}, rpc: rpcWith(), wantCode: codes.OK},
		{desc: "header: percentage 0", in: &faultpb.HTTPFault{Abort: abortHeader(100)}, rpc: rpcWith(headerAbortGRPC, "5", headerAbortPercent, "0"), wantCode: codes.OK},
		{desc: "header: percentage cannot raise", in: &faultpb.HTTPFault{Abort: abortHeader(0)}, rpc: rpcWith(headerAbortGRPC, "5", headerAbortPercent, "100"), wantCode: codes.OK},
		{desc: "headers match", in: &faultpb.HTTPFault{Abort: abortGRPC(3, 100), Headers: []*routepb.HeaderMatcher{
			{Name: "x-test", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}},
		}}, rpc: rpcWith("x-test", "1"), wantCode: codes.InvalidArgument},
		{desc: "headers do not match", in: &faultpb.HTTPFault{Abort: abortGRPC(3, 100), Headers: []*routepb.HeaderMatcher{
			{Name: "x-test", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}},
		}}, rpc: rpcWith(), wantCode: codes.OK},
		{desc: "downstream node listed", in: &faultpb.HTTPFault{Abort: abortGRPC(3, 100), DownstreamNodes: []string{"a", "b"}}, rpc: rpcWith(headerNode, "b"), wantCode: codes.InvalidArgument},
		{desc: "downstream node not listed", in: &faultpb.HTTPFault{Abort: abortGRPC(3, 100), DownstreamNodes: []string{"a"}}, rpc: rpcWith(headerNode, "c"), wantCode: codes.OK},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s := stepOf(t, tc.in)
			if s == nil {
				if tc.wantCode != codes.OK {
					t.Fatalf("no step, want %v", tc.wantCode)
				}
				return
			}
			ctx, a, err := s.Run(context.Background(), tc.rpc)
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("Run: %v, want %v", err, tc.wantCode)
			}
			if tc.wantMsg != "" && status.Convert(err).Message() != tc.wantMsg {
				t.Errorf("message %q, want %q", status.Convert(err).Message(), tc.wantMsg)
			}
			if (a != nil) != tc.deferred {
				t.Fatalf("work after the tap: %v, want some: %v", a, tc.deferred)
			}
			if a != nil {
				if _, err := a.RunAfter(ctx); !errors.Is(err, httpfilter.ErrSkipHandler) {
					t.Errorf("RunAfter = %v, want ErrSkipHandler (end with OK)", err)
				}
			}
		})
	}
}

// TestDelay: a delay is left for after the tap, where it waits, then
// aborts if asked; the RPC's deadline cuts it short.
func TestDelay(t *testing.T) {
	s := stepOf(t, &faultpb.HTTPFault{Delay: delayFixed(50*time.Millisecond, 100), Abort: abortGRPC(uint32(codes.Aborted), 100)})
	ctx, a, err := s.Run(context.Background(), rpcWith())
	if err != nil || a == nil {
		t.Fatalf("Run: %v, %v; want the fault left for after the tap", a, err)
	}
	start := time.Now()
	_, err = a.RunAfter(ctx)
	if status.Code(err) != codes.Aborted {
		t.Errorf("RunAfter = %v, want ABORTED", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("RunAfter returned after %v, want at least the 50ms delay", d)
	}

	long := stepOf(t, &faultpb.HTTPFault{Delay: delayFixed(time.Hour, 100)})
	dctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	dctx, a, err = long.Run(dctx, rpcWith())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunAfter(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("RunAfter of a 1h delay with a 50ms deadline = %v, want DeadlineExceeded", err)
	}

	hdr := stepOf(t, &faultpb.HTTPFault{Delay: delayHeader(100)})
	for _, tc := range []struct {
		rpc  httpfilter.RPC
		want time.Duration
	}{
		{rpcWith(headerDelay, "20"), 20 * time.Millisecond},
		{rpcWith(headerDelay, "20", headerDelayPercent, "0"), 0},
		{rpcWith(headerDelay, "x"), 0},
		{rpcWith(), 0},
		{rpcWith(headerDelay, "99999999999999999"), maxDelay},
	} {
		_, a, err := hdr.Run(context.Background(), tc.rpc)
		if err != nil {
			t.Fatal(err)
		}
		var got time.Duration
		if p, ok := a.(*pending); ok {
			got = p.delay
		}
		if got != tc.want {
			t.Errorf("delay for %v = %v, want %v", tc.rpc.Header, got, tc.want)
		}
	}
}

// TestMaxActiveFaults: while max_active_faults RPCs are being delayed,
// another gets no fault at all.
func TestMaxActiveFaults(t *testing.T) {
	s := stepOf(t, &faultpb.HTTPFault{Delay: delayFixed(time.Hour, 100), Abort: abortGRPC(uint32(codes.Aborted), 100), MaxActiveFaults: wrapperspb.UInt32(1)})
	held, cancel := context.WithCancel(context.Background())
	hctx, held1, err := s.Run(held, rpcWith())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := held1.RunAfter(hctx)
		done <- err
	}()
	// Wait until the first fault is active.
	testutils.WaitFor(testutils.Context(t), t, "the first fault to be active", func() error {
		if active.Load() == 0 {
			return errors.New("no active fault")
		}
		return nil
	})
	ctx, a, err := s.Run(context.Background(), rpcWith())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunAfter(ctx); err != nil {
		t.Errorf("second fault while one is active: %v, want none (no delay, no abort)", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("first fault after cancellation: %v, want Canceled", err)
	}
	if n := active.Load(); n != 0 {
		t.Errorf("%d active faults after both ended, want 0", n)
	}
	abortOnly := stepOf(t, &faultpb.HTTPFault{Abort: abortGRPC(uint32(codes.Aborted), 100), MaxActiveFaults: wrapperspb.UInt32(1)})
	if _, _, err := abortOnly.Run(context.Background(), rpcWith()); status.Code(err) != codes.Aborted {
		t.Errorf("abort with no fault active: %v, want ABORTED", err)
	}
}

// TestNoFaultAllocs: an RPC the filter does not fault costs no allocation.
func TestNoFaultAllocs(t *testing.T) {
	s := stepOf(t, &faultpb.HTTPFault{Abort: abortHeader(100), Delay: delayHeader(100)})
	r := rpcWith("other", "1")
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { s.Run(ctx, r) }); n != 0 {
		t.Errorf("an RPC without fault headers allocates %v times, want 0", n)
	}
}
