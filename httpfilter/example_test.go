package httpfilter_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/httpfilter"
)

// connBudget is a filter that gives each connection a budget of RPCs
// (per-connection state), slows down the last RPC within budget (work
// after the tap: it may block) and refuses the rest. Its config is a
// google.protobuf.UInt32Value, the budget.
type connBudget struct{}

func (connBudget) ConfigTypeURLs() []string {
	return []string{"type.googleapis.com/google.protobuf.UInt32Value"}
}
func (connBudget) OverrideTypeURLs() []string { return nil }

func (connBudget) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	m := &wrapperspb.UInt32Value{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, err
	}
	if m.GetValue() == 0 {
		return nil, errors.New("value: 0, want a budget of at least 1 RPC")
	}
	return int64(m.GetValue()), nil
}

func (connBudget) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("connBudget takes no per-route overrides")
}

// Needs asks the server for a ConnState per connection and for running
// the work steps leave for after the tap.
func (connBudget) Needs() httpfilter.Needs { return httpfilter.Needs{After: true, ConnState: true} }

func (connBudget) BuildStep(_ string, config, _ httpfilter.Config) (httpfilter.Step, error) {
	return &budgetStep{budget: config.(int64)}, nil
}

type budgetStep struct{ budget int64 }

// counter is one connection's count of RPCs.
type counter struct{ n int64 }

func (s *budgetStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	c := rpc.Conn.GetOrInit(s, func() any { return &counter{} }).(*counter)
	n := atomic.AddInt64(&c.n, 1)
	switch {
	case n > s.budget:
		return ctx, nil, status.Error(codes.ResourceExhausted, "connection budget spent")
	case n == s.budget:
		return ctx, delay(10 * time.Millisecond), nil
	}
	return ctx, nil, nil
}

// delay holds an RPC back, on its own goroutine, unless it ends first.
type delay time.Duration

func (d delay) RunAfter(ctx context.Context) (context.Context, error) {
	t := time.NewTimer(time.Duration(d))
	defer t.Stop()
	select {
	case <-t.C:
		return ctx, nil
	case <-ctx.Done():
		return ctx, ctx.Err()
	}
}

// Example registers a filter that keeps per-connection state and leaves
// work for after the tap, then runs its step as the server would for three
// RPCs on one connection whose budget is two.
func Example() {
	httpfilter.Register(connBudget{})

	step, _ := connBudget{}.BuildStep("budget", int64(2), nil)
	conn := &httpfilter.ConnState{} // the server makes one per connection
	for i := range 3 {
		rpc := httpfilter.RPC{Request: httpfilter.Request{FullMethod: "/pkg.Service/Method"}, Conn: conn}
		_, work, err := step.Run(context.Background(), rpc)
		fmt.Printf("RPC %d: %v, work that decides later: %v\n", i+1, status.Code(err), work != nil)
	}
	// Output:
	// RPC 1: OK, work that decides later: false
	// RPC 2: OK, work that decides later: true
	// RPC 3: ResourceExhausted, work that decides later: false
}

// timing is a Call that adds a response header saying how long the
// handler took: its RunAfter notes when the request headers passed, and
// its SendHeader, on the response path, adds the header.
type timing struct{ start time.Time }

func (t *timing) RunAfter(ctx context.Context) (context.Context, error) {
	t.start = time.Now()
	return ctx, nil
}

func (*timing) Events() httpfilter.Events { return httpfilter.ServerHeaders }

func (t *timing) SendHeader(_ context.Context, header map[string][]string, _ bool) error {
	header["x-handler-time"] = []string{time.Since(t.start).Round(time.Millisecond).String()}
	return nil
}

func (*timing) End(error) {}

// timingStep returns a new Call per RPC; its filter declares
// Needs{After: true, Events: httpfilter.ServerHeaders}.
type timingStep struct{}

func (timingStep) Run(ctx context.Context, _ httpfilter.RPC) (context.Context, httpfilter.After, error) {
	return ctx, &timing{}, nil
}

// ExampleCall shows a filter that acts on responses: its step returns a
// Call as its work, and the server hands the call the response headers
// (in reverse http_filters order), as it does here by hand.
func ExampleCall() {
	_, work, _ := timingStep{}.Run(context.Background(), httpfilter.RPC{})
	call := work.(httpfilter.Call)
	ctx, _ := call.RunAfter(context.Background())
	header := map[string][]string{}
	if call.Events()&httpfilter.ServerHeaders != 0 {
		_ = call.(httpfilter.HeaderSender).SendHeader(ctx, header, false)
	}
	call.End(nil)
	fmt.Println(len(header["x-handler-time"]))
	// Output: 1
}
