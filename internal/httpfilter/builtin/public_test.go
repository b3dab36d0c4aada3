package builtin_test

import (
	"context"
	"testing"

	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	publicfilter "github.com/proxyless-grpc/xds/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
)

// needy is a filter written against the public API alone that needs
// per-connection state and work after the tap.
type needy struct{}

const needyURL = "type.googleapis.com/google.protobuf.BoolValue"

func (needy) ConfigTypeURLs() []string   { return []string{needyURL} }
func (needy) OverrideTypeURLs() []string { return nil }
func (needy) Needs() publicfilter.Needs  { return publicfilter.Needs{After: true, ConnState: true} }
func (needy) ParseConfig(raw publicfilter.RawConfig) (publicfilter.Config, error) {
	m := &wrapperspb.BoolValue{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, err
	}
	return m.GetValue(), nil
}
func (needy) ParseOverride(publicfilter.RawConfig) (publicfilter.Config, error) { return nil, nil }
func (needy) BuildStep(string, publicfilter.Config, publicfilter.Config) (publicfilter.Step, error) {
	return needyStep{}, nil
}

type needyStep struct{}

func (needyStep) Run(ctx context.Context, rpc publicfilter.RPC) (context.Context, publicfilter.After, error) {
	rpc.Conn.GetOrInit(needyStep{}, func() any { return 1 })
	return ctx, skip{}, nil
}

type skip struct{}

func (skip) RunAfter(ctx context.Context) (context.Context, error) {
	return ctx, publicfilter.ErrSkipHandler
}

// TestPublicFilter: a filter registered through the public package is
// found by the server's registry, its Needs reach the framework, its step
// reads the connection's state, and the work it returns reaches the
// framework as it is.
func TestPublicFilter(t *testing.T) {
	publicfilter.Register(needy{})
	a, err := anypb.New(wrapperspb.Bool(true))
	if err != nil {
		t.Fatal(err)
	}
	filters, err := httpfilter.NewParser(builtin.Registry).HTTPFilters([]*hcmpb.HttpFilter{
		{Name: "needy", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: a}},
		{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: routerAny(t)}},
	})
	if err != nil {
		t.Fatalf("HTTPFilters(needy, router): %v", err)
	}
	if got, want := httpfilter.NeedsOf(filters), (httpfilter.Needs{After: true, ConnState: true}); got != want {
		t.Errorf("NeedsOf = %+v, want %+v", got, want)
	}
	step, err := filters[0].Filter.BuildStep("needy", filters[0].Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := &httpfilter.ConnState{}
	ctx, w, err := step.Run(context.Background(), httpfilter.RPC{Conn: conn})
	if err != nil || conn.Get(needyStep{}) != 1 {
		t.Fatalf("Run = %v, conn state %v; want OK and 1", err, conn.Get(needyStep{}))
	}
	if w == nil {
		t.Fatalf("Run returned no work, want the step's")
	}
	if _, err := w.RunAfter(ctx); err != httpfilter.ErrSkipHandler {
		t.Errorf("the step's work ends the RPC with %v, want ErrSkipHandler", err)
	}
}

func routerAny(t *testing.T) *anypb.Any {
	t.Helper()
	a, err := anypb.New(&routerpb.Router{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}
