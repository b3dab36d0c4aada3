package rpcpath_test

import (
	"context"
	"errors"
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// seqFilter is a throw-away filter whose step does what its config says,
// for the tests of the filter sequence; its config is a *seqStep.
type seqFilter struct{}

func (seqFilter) ConfigTypeURLs() []string   { return nil }
func (seqFilter) OverrideTypeURLs() []string { return nil }
func (seqFilter) IsTerminal() bool           { return false }
func (seqFilter) Needs() httpfilter.Needs    { return httpfilter.Needs{After: true} }
func (seqFilter) ParseConfig(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("not parsed")
}
func (seqFilter) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("not parsed")
}
func (seqFilter) BuildStep(_ string, config, _ httpfilter.Config) (httpfilter.Step, error) {
	return config.(*seqStep), nil
}

// seqStep logs its run and the x-set header it sees; it leaves work
// (which sets x-set, or refuses with refuse) when deferWork, and fails
// with fail otherwise.
type seqStep struct {
	name      string
	log       *[]string
	deferWork bool
	refuse    error
	fail      error
}

func (s *seqStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, error) {
	*s.log = append(*s.log, s.name+" saw x-set="+first(rpc.Header.Get("x-set")))
	if s.deferWork {
		return httpfilter.WithAfter(ctx, &seqWork{s}), nil
	}
	return ctx, s.fail
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// seqWork is a step's work: it changes the request headers
// (httpfilter.ContextAfter), as ext_authz's Check does, or refuses.
type seqWork struct{ s *seqStep }

func (w *seqWork) RunAfter(ctx context.Context) error {
	_, err := w.RunAfterContext(ctx)
	return err
}

func (w *seqWork) RunAfterContext(ctx context.Context) (context.Context, error) {
	*w.s.log = append(*w.s.log, w.s.name+" work")
	if w.s.refuse != nil {
		return ctx, w.s.refuse
	}
	md, _ := metadata.FromIncomingContext(ctx)
	md.Set("x-set", "by "+w.s.name)
	return metadata.NewIncomingContext(ctx, md), nil
}

// runSeq routes one RPC through a chain whose filters are steps, over rc,
// as gRPC would: the tap handle, then the first interceptor, then the
// handler. It returns the log and the RPC's error.
func runSeq(t *testing.T, rc *routepb.RouteConfiguration, steps ...*seqStep) ([]string, error) {
	t.Helper()
	var log []string
	hcm := &filterchain.HTTPConnectionManager{}
	for _, s := range steps {
		s.log = &log
		hcm.Filters = append(hcm.Filters, httpfilter.Instance{Name: s.name, Filter: seqFilter{}, Config: s})
	}
	hcm.Filters = append(hcm.Filters, routerOnly.Filters...)
	r, err := routing.Compile(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := rpcpath.ConnTap(rpcpath.NewChain("fc", hcm, rpcpath.NewSource(rpcpath.NewRoutes(r, hcm, nil))))
	info := tapInfo("svc", "/pkg.S/M")
	ctx, err := h(metadata.NewIncomingContext(peerContext(), info.Header), info)
	log = append(log, "tap returned")
	if err != nil {
		return log, err
	}
	_, err = rpcpath.UnaryAfter(ctx, nil, &grpc.UnaryServerInfo{FullMethod: info.FullMethodName}, func(ctx context.Context, _ any) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		log = append(log, "handler saw x-set="+first(md.Get("x-set")))
		return nil, nil
	})
	return log, err
}

func sameLog(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("ran %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("ran %q, want %q", got, want)
		}
	}
}

// TestSequence: the steps after one that leaves work run after the tap,
// once that work let the RPC through, on the headers it changed; the
// steps before it run in the tap.
func TestSequence(t *testing.T) {
	log, err := runSeq(t, e2e.DefaultRouteConfig("rc"),
		&seqStep{name: "a"}, &seqStep{name: "b", deferWork: true}, &seqStep{name: "c"}, &seqStep{name: "d", deferWork: true}, &seqStep{name: "e"})
	if err != nil {
		t.Fatal(err)
	}
	sameLog(t, log, []string{"a saw x-set=", "b saw x-set=", "tap returned", "b work", "c saw x-set=by b", "d saw x-set=by b", "d work", "e saw x-set=by d", "handler saw x-set=by d"})
}

// TestSequenceRefusals: work that refuses stops the sequence with its
// error; a step after the tap refuses as it would in the tap (a plain error
// is PERMISSION_DENIED); the route's action is checked only at the end,
// so an earlier refusal keeps its own code.
func TestSequenceRefusals(t *testing.T) {
	t.Run("work refuses", func(t *testing.T) {
		log, err := runSeq(t, e2e.DefaultRouteConfig("rc"),
			&seqStep{name: "a", deferWork: true, refuse: status.Error(codes.Unauthenticated, "no")}, &seqStep{name: "b"})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("error %v, want UNAUTHENTICATED", err)
		}
		sameLog(t, log, []string{"a saw x-set=", "tap returned", "a work"})
	})
	t.Run("plain error after the tap", func(t *testing.T) {
		_, err := runSeq(t, e2e.DefaultRouteConfig("rc"),
			&seqStep{name: "a", deferWork: true}, &seqStep{name: "b", fail: errors.New("plain")})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("error %v, want PERMISSION_DENIED, as gRPC makes of a plain error in the tap", err)
		}
	})
	forwarding := e2e.DefaultRouteConfig("rc")
	forwarding.VirtualHosts[0].Routes = []*routepb.Route{{
		Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"}}},
	}}
	t.Run("action checked at the end", func(t *testing.T) {
		log, err := runSeq(t, forwarding, &seqStep{name: "a", deferWork: true}, &seqStep{name: "b"})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("error %v, want UNAVAILABLE (not non_forwarding_action)", err)
		}
		sameLog(t, log, []string{"a saw x-set=", "tap returned", "a work", "b saw x-set=by a"})
	})
	t.Run("refusal before the action check", func(t *testing.T) {
		_, err := runSeq(t, forwarding, &seqStep{name: "a", deferWork: true, refuse: status.Error(codes.Unauthenticated, "no")})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("error %v, want the work's UNAUTHENTICATED, not the route's UNAVAILABLE", err)
		}
	})
}
