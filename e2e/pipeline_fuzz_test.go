package e2e_test

// The pipeline property test: random cases of the reference model
// (internal/testutils/pipelinemodel) run against the real server
// (pipeline_harness_test.go), each RPC's observations compared with what
// the model predicts. A difference is reported with the case, shrunk to
// the smallest one that still shows it.
//
//	go test -race -run TestPipelineModel ./e2e            # the fixed seeds (CI)
//	PIPELINE_SEEDS=2000 go test -run TestPipelineModel ./e2e  # more of them
//	PIPELINE_FIRST_SEED=20000 PIPELINE_SEEDS=2000 go test -run TestPipelineModel ./e2e  # others
//	go test -run '^$' -fuzz FuzzPipeline -fuzztime 10m ./e2e
//	PIPELINE_CASE=/tmp/case.json go test -run TestPipelineCase ./e2e   # one case, as printed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/testutils"
	pm "github.com/proxyless-grpc/xds/internal/testutils/pipelinemodel"
)

// pfKnown are the deviations of the server from the model that were
// reported and await a decision (see docs/testing.md): the model predicts
// them as the server behaves, so that the fuzzer finds the others. Each
// has its minimal case in pfKnownCases (pipeline_regressions_test.go).
var pfKnown = map[string]bool{}

// pfSeeds are the seeds TestPipelineModel runs: about 25 s under the race
// detector on a 2-core machine, ext_proc's processor included.
const pfSeeds = 600

// pfTimeout bounds one RPC of a case (a hang the model does not expect
// shows as DEADLINE_EXCEEDED), and pfShrinkTime the shrinking of a failing
// case.
const (
	pfTimeout    = 10 * time.Second
	pfShrinkTime = 2 * time.Minute
	// pfFuzzShrinkTime is FuzzPipeline's: the fuzzing engine kills a worker
	// whose input runs for 10 s ("deadlocked!", its output discarded), so
	// a difference must be shrunk and reported within that.
	pfFuzzShrinkTime = 5 * time.Second
)

func TestPipelineModel(t *testing.T) {
	seeds, first := uint64(pfSeeds), uint64(0)
	if n, err := strconv.ParseUint(os.Getenv("PIPELINE_SEEDS"), 10, 64); err == nil {
		seeds = n
	}
	if n, err := strconv.ParseUint(os.Getenv("PIPELINE_FIRST_SEED"), 10, 64); err == nil {
		first = n
	}
	// About 40 ms a case without the race detector, 5 times that with it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(seeds)*200*time.Millisecond)
	defer cancel()
	f := startPFFixture(ctx, t)
	start := time.Now()
	rpcs := 0
	tally := map[string]int{}
	for i := range seeds {
		seed := first + i
		c := pm.GenerateSeed(seed, f.env)
		rpcs += len(c.RPCs)
		pfTally(tally, c)
		if diff := f.run(ctx, t, c); diff != "" {
			t.Logf("a difference after %d cases (%d RPCs) in %v", i+1, rpcs, time.Since(start).Round(time.Millisecond))
			f.fail(ctx, t, fmt.Sprintf("seed %d", seed), c, diff)
			return
		}
	}
	t.Logf("%d cases, %d RPCs in %v; outcomes predicted: %v", seeds, rpcs, time.Since(start).Round(time.Millisecond), tally)
}

// pfTally counts what the model predicts of c's RPCs, to show what the
// seeds cover.
func pfTally(tally map[string]int, c pm.Case) {
	for _, o := range pm.Predict(c) {
		tally[o.Code.String()]++
		if o.Handler {
			tally["handler"]++
		}
		if len(o.Calls) > 0 {
			tally["side calls"] += len(o.Calls)
		}
		for _, e := range o.Proc {
			tally["proc "+e.Event]++
		}
		if len(o.Header) > 0 {
			tally["response headers"]++
		}
		if len(o.Trailer) > 0 {
			tally["trailers"]++
		}
	}
	for _, r := range c.RPCs {
		for _, a := range r.Authz {
			tally["authz "+a.Kind]++
		}
		for _, a := range r.RLS {
			tally["rls "+a.Kind]++
		}
		for _, p := range r.Proc {
			for _, ev := range []string{pm.EventRequestHeaders, pm.EventResponseHeaders, pm.EventResponseTrailers} {
				if k := p.Answer(ev).Kind; k != "" {
					tally["proc answer "+k]++
				}
			}
		}
	}
}

// TestPipelineCase runs the case in the file PIPELINE_CASE (JSON, as a
// failure prints it), to replay a difference.
func TestPipelineCase(t *testing.T) {
	file := os.Getenv("PIPELINE_CASE")
	if file == "" {
		t.Skip("PIPELINE_CASE is not set")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pm.ParseCase(string(b))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := startPFFixture(ctx, t)
	c.Env = f.env
	if diff := f.run(ctx, t, c); diff != "" {
		f.fail(ctx, t, file, c, diff)
	}
}

func FuzzPipeline(ff *testing.F) {
	// Seeds other than TestPipelineModel's: the normal test run replays
	// them too.
	for seed := range uint64(10) {
		ff.Add(1<<40 + seed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ff.Cleanup(cancel)
	f := startPFFixture(ctx, ff)
	ff.Fuzz(func(t *testing.T, seed uint64) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		c := pm.GenerateSeed(seed, f.env)
		if diff := f.run(rctx, t, c); diff != "" {
			f.failWithin(rctx, t, pfFuzzShrinkTime, fmt.Sprintf("seed %d", seed), c, diff)
		}
	})
}

// fail shrinks c while it still differs and fails t with the smallest case.
func (f *pfFixture) fail(ctx context.Context, t testing.TB, what string, c pm.Case, diff string) {
	t.Helper()
	f.failWithin(ctx, t, pfShrinkTime, what, c, diff)
}

// failWithin is fail, shrinking for at most budget.
func (f *pfFixture) failWithin(ctx context.Context, t testing.TB, budget time.Duration, what string, c pm.Case, diff string) {
	t.Helper()
	orig := c
	deadline := time.Now().Add(budget)
	tries := 0
shrinking:
	for time.Now().Before(deadline) {
		for _, s := range pm.Shrink(c) {
			if time.Now().After(deadline) {
				break shrinking
			}
			tries++
			if d := f.run(ctx, t, s); d != "" {
				c, diff = s, d
				continue shrinking
			}
		}
		break
	}
	t.Fatalf("the server differs from the model (%s; shrunk in %d runs from %d RPCs and %d filters):\n%s\nthe case (JSON; replay it with PIPELINE_CASE=<file> go test -run TestPipelineCase ./e2e):\n%s",
		what, tries, len(orig.RPCs), len(orig.Chain.Filters), diff, c.JSON())
}

// run runs c against the server and returns the first difference between
// what the RPCs gave and what the model predicts, the known deviations
// accepted; "" when there is none.
func (f *pfFixture) run(ctx context.Context, t testing.TB, c pm.Case) string {
	t.Helper()
	return f.runWith(ctx, t, c, pfKnown)
}

// runWith is run with the deviations accept accepted.
func (f *pfFixture) runWith(ctx context.Context, t testing.TB, c pm.Case, accept map[string]bool) string {
	t.Helper()
	c.Env = f.env
	script := map[string]*pm.RPC{}
	for i := range c.RPCs {
		c.RPCs[i].ID = f.newID()
		script[c.RPCs[i].ID] = &c.RPCs[i]
	}
	want := pm.PredictWith(c, pm.Options{Accept: accept})
	cancels := map[string]context.CancelFunc{}
	f.rec.mu.Lock()
	f.rec.script = script
	f.rec.hung = func(id string) {
		f.rec.mu.Lock()
		cancel := cancels[id]
		f.rec.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}
	f.rec.mu.Unlock()

	gen := f.push(ctx, t, c)
	cc, err := f.applied(ctx, t, gen)
	if err != nil {
		return fmt.Sprintf("the case's configuration was not applied: %v", err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	hasProc := slices.ContainsFunc(c.Chain.Filters, func(f pm.Filter) bool { return f.ExtProc != nil })
	for i := range c.RPCs {
		r := &c.RPCs[i]
		deadline := time.Now().Add(pfTimeout)
		switch r.Deadline {
		case "short":
			deadline = time.Now().Add(pm.DeadlineMillis * time.Millisecond)
		case "passed":
			deadline = time.Now().Add(-time.Second)
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		if r.CancelAtHang {
			f.rec.mu.Lock()
			cancels[r.ID] = cancel
			f.rec.mu.Unlock()
		}
		kv := []string{pm.IDHeader, r.ID}
		for _, h := range r.Headers {
			kv = append(kv, h.Key, h.V())
		}
		rctx = metadata.AppendToOutgoingContext(rctx, kv...)
		f.rec.mu.Lock()
		f.rec.current = r.ID
		f.rec.mu.Unlock()
		got := pfCall(rctx, cc, client, r)
		cancel()
		if hasProc && (got.Code == codes.DeadlineExceeded || got.Code == codes.Canceled) {
			f.rec.procQuiet(ctx)
		}
		// The server may still run an RPC the client gave up on.
		testutils.WaitFor(ctx, t, "the server to end the case's RPCs", func() error {
			if b := f.rec.busy(); len(b) > 0 {
				return fmt.Errorf("still running: %v", b)
			}
			return nil
		})
		if d := f.observe(r.ID, &got); d != "" {
			return fmt.Sprintf("RPC %d (%s %s): %s", i, r.Method, r.ID, d)
		}
		if d := pfDiff(want[i], got); d != "" {
			return fmt.Sprintf("RPC %d (%s, ID %s):\n%s", i, r.Method, r.ID, d)
		}
	}
	return ""
}

// observe completes got with what the server's user code and the side
// services saw of the RPC id; it returns a difference between the
// interceptors' and the handler's views, which must agree.
func (f *pfFixture) observe(id string, got *pm.Outcome) string {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	got.Calls = f.rec.calls[id]
	got.Proc = f.rec.proc[id]
	s := f.rec.seen[id]
	if s == nil {
		return ""
	}
	got.Single, got.Chained, got.Handler = s.single, s.chained, s.handler
	views := map[string]map[string][]string{}
	if s.single {
		views["the single interceptor"] = pm.Observe(s.singleMD)
	}
	if s.chained {
		views["the chained interceptor"] = pm.Observe(s.chainedMD)
	}
	if s.handler {
		views["the handler"] = pm.Observe(s.handlerMD)
	}
	var first string
	for _, who := range []string{"the single interceptor", "the chained interceptor", "the handler"} {
		v, ok := views[who]
		if !ok {
			continue
		}
		if first == "" {
			first, got.Request = who, v
			continue
		}
		if !reflect.DeepEqual(v, got.Request) {
			return fmt.Sprintf("%s saw request headers %v, %s %v", first, pfJSON(got.Request), who, pfJSON(v))
		}
	}
	return ""
}

func pfJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// pfDiff compares an outcome with the model's.
func pfDiff(want, got pm.Outcome) string {
	var d []string
	add := func(what string, w, g any) {
		d = append(d, fmt.Sprintf("  %s: got %s, want %s", what, pfJSON(g), pfJSON(w)))
	}
	if got.Code != want.Code {
		add("code", want.Code.String(), fmt.Sprintf("%s %q", got.Code, got.Message))
	} else if want.Message != "" && !strings.Contains(got.Message, want.Message) {
		add("message", "containing "+want.Message, got.Message)
	}
	if got.Single != want.Single || got.Chained != want.Chained || got.Handler != want.Handler {
		add("ran (single interceptor, chained interceptor, handler)", []bool{want.Single, want.Chained, want.Handler}, []bool{got.Single, got.Chained, got.Handler})
	}
	if !pfSame(want.Request, got.Request) {
		add("request headers the program saw", want.Request, got.Request)
	}
	if !want.Ended && !pfSame(want.Header, got.Header) {
		add("response headers", want.Header, got.Header)
	}
	if !pfSame(want.Trailer, got.Trailer) {
		add("trailers", want.Trailer, got.Trailer)
	}
	if len(want.Calls)+len(got.Calls) > 0 && !reflect.DeepEqual(want.Calls, got.Calls) {
		add("side calls", want.Calls, got.Calls)
	}
	if proc := got.Proc; want.Ended && len(proc) > len(want.Proc) {
		// After a hang, the events racing with the RPC's end.
		proc = proc[:len(want.Proc)]
		if len(want.Proc)+len(proc) > 0 && !reflect.DeepEqual(want.Proc, proc) {
			add("processor events (before the hang)", want.Proc, got.Proc)
		}
	} else if len(want.Proc)+len(proc) > 0 && !reflect.DeepEqual(want.Proc, proc) {
		add("processor events", want.Proc, got.Proc)
	}
	return strings.Join(d, "\n")
}

func pfSame(a, b map[string][]string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// pfCall makes the RPC r on cc with ctx and returns what the client got.
func pfCall(ctx context.Context, cc *grpc.ClientConn, c testgrpc.TestServiceClient, r *pm.RPC) pm.Outcome {
	var hdr, tr metadata.MD
	opts := []grpc.CallOption{grpc.CallAuthority(r.Authority)}
	var err error
	switch {
	case !pm.WellFormed(r.Method) || r.Method == pm.MethodUnary || pm.ShapeOf(r.Method) == "unary":
		err = cc.Invoke(ctx, r.Method, &testpb.SimpleRequest{}, &testpb.SimpleResponse{}, append(opts, grpc.Header(&hdr), grpc.Trailer(&tr))...)
	case r.Method == pm.MethodClientStream:
		var s testgrpc.TestService_StreamingInputCallClient
		if s, err = c.StreamingInputCall(ctx, opts...); err == nil {
			for range 2 {
				if s.Send(&testpb.StreamingInputCallRequest{}) != nil {
					break
				}
			}
			_, err = s.CloseAndRecv()
			hdr, _ = s.Header()
			tr = s.Trailer()
		}
	case r.Method == pm.MethodServerStream:
		var s testgrpc.TestService_StreamingOutputCallClient
		if s, err = c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}, opts...); err == nil {
			for err == nil {
				_, err = s.Recv()
			}
			if errors.Is(err, io.EOF) {
				err = nil
			}
			hdr, _ = s.Header()
			tr = s.Trailer()
		}
	case r.Method == pm.MethodBidi:
		var s testgrpc.TestService_FullDuplexCallClient
		if s, err = c.FullDuplexCall(ctx, opts...); err == nil {
			if s.Send(&testpb.StreamingOutputCallRequest{}) == nil {
				if _, rerr := s.Recv(); rerr == nil {
					s.CloseSend()
				}
			}
			for err == nil {
				_, err = s.Recv()
			}
			if errors.Is(err, io.EOF) {
				err = nil
			}
			hdr, _ = s.Header()
			tr = s.Trailer()
		}
	}
	st := status.Convert(err)
	if ctx.Err() != nil && st.Code() == codes.OK {
		st = status.New(codes.Unknown, "the client's context ended but the RPC succeeded")
	}
	return pm.Outcome{Code: st.Code(), Message: st.Message(), Header: pm.Observe(hdr), Trailer: pm.Observe(tr)}
}
