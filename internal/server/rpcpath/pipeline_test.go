package rpcpath_test

import (
	"context"
	"errors"
	"strings"
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
// for the tests of the filter sequence; its config is a *seqStep. It
// declares Needs.After unless the step is undeclared.
type seqFilter struct{ undeclared bool }

func (seqFilter) ConfigTypeURLs() []string   { return nil }
func (seqFilter) OverrideTypeURLs() []string { return nil }
func (seqFilter) IsTerminal() bool           { return false }
func (f seqFilter) Needs() httpfilter.Needs  { return httpfilter.Needs{After: !f.undeclared} }
func (seqFilter) ParseConfig(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("not parsed")
}
func (seqFilter) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("not parsed")
}
func (seqFilter) BuildStep(_ string, config, _ httpfilter.Config) (httpfilter.Step, error) {
	return config.(*seqStep), nil
}

// seqStep logs its run and the x-set header it sees. It sets x-set itself
// (a new context, as the local rate limit's shadow headers) when set; it
// returns work (which sets x-set, or refuses with refuse) when deferWork,
// and fails with fail otherwise. panicRun and panicWork make its step or
// its work panic; undeclared builds it into a filter without Needs.After.
type seqStep struct {
	name                string
	log                 *[]string
	set                 bool
	deferWork           bool
	refuse              error
	fail                error
	panicRun, panicWork bool
	undeclared          bool
}

func (s *seqStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	*s.log = append(*s.log, s.name+" saw x-set="+first(rpc.Header.Get("x-set")))
	if s.panicRun {
		panic("step " + s.name)
	}
	if s.set {
		ctx = setHeader(ctx, "x-set", "by "+s.name)
	}
	if s.deferWork {
		return ctx, &seqWork{s}, nil
	}
	return ctx, nil, s.fail
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// setHeader returns ctx whose incoming metadata has key set to value.
func setHeader(ctx context.Context, key, value string) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if md == nil {
		md = metadata.MD{}
	}
	md.Set(key, value)
	return metadata.NewIncomingContext(ctx, md)
}

// seqWork is a step's work: it changes the request headers, as ext_authz's
// Check does, or refuses.
type seqWork struct{ s *seqStep }

func (w *seqWork) RunAfter(ctx context.Context) (context.Context, error) {
	*w.s.log = append(*w.s.log, w.s.name+" work")
	if w.s.panicWork {
		panic("work of " + w.s.name)
	}
	if w.s.refuse != nil {
		return ctx, w.s.refuse
	}
	return setHeader(ctx, "x-set", "by "+w.s.name+"'s work"), nil
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
		hcm.Filters = append(hcm.Filters, httpfilter.Instance{Name: s.name, Filter: seqFilter{undeclared: s.undeclared}, Config: s})
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
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("ran:\n  %q\nwant:\n  %q", got, want)
	}
}

// TestSequence: the steps after one that returns work run after the tap,
// once that work let the RPC through, on the headers it changed; the
// steps before it run in the tap.
func TestSequence(t *testing.T) {
	log, err := runSeq(t, e2e.DefaultRouteConfig("rc"),
		&seqStep{name: "a"}, &seqStep{name: "b", deferWork: true}, &seqStep{name: "c"}, &seqStep{name: "d", deferWork: true}, &seqStep{name: "e"})
	if err != nil {
		t.Fatal(err)
	}
	sameLog(t, log, []string{"a saw x-set=", "b saw x-set=", "tap returned", "b work", "c saw x-set=by b's work", "d saw x-set=by b's work", "d work", "e saw x-set=by d's work", "handler saw x-set=by d's work"})
}

// TestSequenceHeaders: a step that changes the request headers (a new
// context with new incoming metadata) is seen by every step after it, in
// the tap and after it, and by the handler; whether a step that returns
// work sits elsewhere in the chain makes no difference.
func TestSequenceHeaders(t *testing.T) {
	t.Run("in the tap", func(t *testing.T) {
		log, err := runSeq(t, e2e.DefaultRouteConfig("rc"), &seqStep{name: "a", set: true}, &seqStep{name: "b"})
		if err != nil {
			t.Fatal(err)
		}
		sameLog(t, log, []string{"a saw x-set=", "b saw x-set=by a", "tap returned", "handler saw x-set=by a"})
	})
	t.Run("in the tap, with work after", func(t *testing.T) {
		log, err := runSeq(t, e2e.DefaultRouteConfig("rc"), &seqStep{name: "a", set: true}, &seqStep{name: "b"}, &seqStep{name: "c", deferWork: true, refuse: status.Error(codes.Aborted, "no")})
		if status.Code(err) != codes.Aborted {
			t.Fatalf("error %v, want ABORTED", err)
		}
		sameLog(t, log, []string{"a saw x-set=", "b saw x-set=by a", "c saw x-set=by a", "tap returned", "c work"})
	})
	t.Run("after the tap", func(t *testing.T) {
		log, err := runSeq(t, e2e.DefaultRouteConfig("rc"), &seqStep{name: "a", deferWork: true}, &seqStep{name: "b", set: true}, &seqStep{name: "c"})
		if err != nil {
			t.Fatal(err)
		}
		sameLog(t, log, []string{"a saw x-set=", "tap returned", "a work", "b saw x-set=by a's work", "c saw x-set=by b", "handler saw x-set=by b"})
	})
}

// TestSequenceRefusals: work that refuses stops the sequence with its
// error; a step after the tap refuses as it would in the tap (a plain error
// is PERMISSION_DENIED); the route's action is checked before any step
// runs (gRFC A36, as grpc-go): a route that does not serve RPCs makes no
// step run, and so no side call, no token spent.
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
	t.Run("action checked first", func(t *testing.T) {
		log, err := runSeq(t, forwarding, &seqStep{name: "a", deferWork: true, refuse: status.Error(codes.Unauthenticated, "no")}, &seqStep{name: "b"})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("error %v, want UNAVAILABLE (not non_forwarding_action)", err)
		}
		sameLog(t, log, []string{"tap returned"})
	})
}

// TestSequenceBrokenFilter: a filter whose code breaks the contract fails
// the RPC with INTERNAL, naming the filter, and nothing after it runs: a
// panic in its step (in the tap or after it) or in its work, and work
// returned by a filter that does not declare Needs.After (even on a chain
// whose other filters do). The process goes on.
func TestSequenceBrokenFilter(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		steps []*seqStep
		want  []string
	}{
		{desc: "panic in the tap", steps: []*seqStep{{name: "a"}, {name: "bad", panicRun: true}, {name: "c"}},
			want: []string{"a saw x-set=", "bad saw x-set=", "tap returned"}},
		{desc: "panic after the tap", steps: []*seqStep{{name: "a", deferWork: true}, {name: "bad", panicRun: true}, {name: "c"}},
			want: []string{"a saw x-set=", "tap returned", "a work", "bad saw x-set=by a's work"}},
		{desc: "panic in work", steps: []*seqStep{{name: "bad", deferWork: true, panicWork: true}, {name: "c"}},
			want: []string{"bad saw x-set=", "tap returned", "bad work"}},
		{desc: "panic in work of a step after the tap", steps: []*seqStep{{name: "a", deferWork: true}, {name: "bad", deferWork: true, panicWork: true}, {name: "c"}},
			want: []string{"a saw x-set=", "tap returned", "a work", "bad saw x-set=by a's work", "bad work"}},
		{desc: "undeclared work in the tap", steps: []*seqStep{{name: "bad", deferWork: true, undeclared: true}, {name: "c"}},
			want: []string{"bad saw x-set=", "tap returned"}},
		{desc: "undeclared work after the tap", steps: []*seqStep{{name: "a", deferWork: true}, {name: "bad", deferWork: true, undeclared: true}, {name: "c"}},
			want: []string{"a saw x-set=", "tap returned", "a work", "bad saw x-set=by a's work"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			before := logs.Count("E", `HTTP filter "bad"`)
			log, err := runSeq(t, e2e.DefaultRouteConfig("rc"), tc.steps...)
			if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), `"bad"`) {
				t.Errorf("error %v, want INTERNAL naming the filter \"bad\"", err)
			}
			sameLog(t, log, tc.want)
			if n := logs.Count("E", `HTTP filter "bad"`) - before; n != 1 {
				t.Errorf("%d error log lines naming the filter, want 1", n)
			}
		})
	}
}

// callerFilter stands for a filter that copies the request into a side
// call (httpfilter.SideCaller); its step does nothing.
type callerFilter struct{ seqFilter }

func (callerFilter) CallsOut() bool { return true }
func (callerFilter) BuildStep(string, httpfilter.Config, httpfilter.Config) (httpfilter.Step, error) {
	return nil, nil
}

// TestHeaderLimits: a chain bounds its request headers by the
// HttpConnectionManager's max_request_headers_kb and max_headers_count when
// set, by Envoy's 60 KiB by default when a filter calls out, and not at all
// otherwise; a request over a bound is INTERNAL, as Envoy's reset is to a
// gRPC client, before routing.
func TestHeaderLimits(t *testing.T) {
	caller := httpfilter.Instance{Name: "caller", Filter: callerFilter{}}
	withCaller := &filterchain.HTTPConnectionManager{Filters: append([]httpfilter.Instance{caller}, routerOnly.Filters...)}
	for _, tc := range []struct {
		desc string
		hcm  *filterchain.HTTPConnectionManager
		want int
	}{
		{desc: "plain", hcm: routerOnly, want: 0},
		{desc: "a filter that calls out", hcm: withCaller, want: rpcpath.DefaultMaxRequestHeaderBytes},
		{desc: "set", hcm: &filterchain.HTTPConnectionManager{Filters: withCaller.Filters, MaxRequestHeaderBytes: 1 << 20}, want: 1 << 20},
	} {
		if got := rpcpath.NewChain("fc", tc.hcm, nil).MaxRequestHeaderBytes(); got != tc.want {
			t.Errorf("%s: MaxRequestHeaderBytes() = %d, want %d", tc.desc, got, tc.want)
		}
	}
	r, err := routing.Compile(e2e.DefaultRouteConfig("rc"), nil)
	if err != nil {
		t.Fatal(err)
	}
	hcm := &filterchain.HTTPConnectionManager{Filters: routerOnly.Filters, MaxRequestHeaderBytes: 100, MaxRequestHeaders: 5}
	h := rpcpath.ConnTap(rpcpath.NewChain("fc", hcm, rpcpath.NewSource(rpcpath.NewRoutes(r, hcm, nil))))
	for _, tc := range []struct {
		desc  string
		md    metadata.MD
		bound string // the bound the refusal names; "" for none
	}{
		// :method POST, :scheme http, te trailers, :path /pkg.S/M and
		// :authority svc are 5 headers of 58 bytes.
		{desc: "within", md: metadata.MD{":authority": {"svc"}}},
		{desc: "one header too many", md: metadata.MD{":authority": {"svc"}, "x": {""}}, bound: "max_headers_count"},
		{desc: "43 bytes more", md: metadata.MD{":authority": {"svc"}, "x-a": {strings.Repeat("a", 40)}}, bound: "max_request_headers_kb"},
		// A binary value counts as its base64 form: 30 bytes are 40, and
		// 61 + 5 + 40 is over 100 where 61 + 5 + 30 would not be.
		{desc: "binary", md: metadata.MD{":authority": {"svcaaa"}, "x-bin": {strings.Repeat("b", 30)}}, bound: "max_request_headers_kb"},
	} {
		info := tapInfo("svc", "/pkg.S/M")
		info.Header = tc.md
		_, err := h(peerContext(), info)
		switch {
		case tc.bound == "" && err != nil:
			t.Errorf("%s: %v, want OK", tc.desc, err)
		case tc.bound != "" && (status.Code(err) != codes.Internal || !strings.Contains(err.Error(), tc.bound)):
			t.Errorf("%s: %v, want INTERNAL naming %s", tc.desc, err, tc.bound)
		}
	}
}

// TestBlocked: when the user's options cannot be read, a chain whose
// filters may return work refuses every RPC, with UNAVAILABLE saying why; a
// chain whose filters never do serves.
func TestBlocked(t *testing.T) {
	unknown := rpcpath.UserOptions{Unknown: errors.New("unreadable option")}
	waits := &filterchain.HTTPConnectionManager{Filters: append([]httpfilter.Instance{{Name: "a", Filter: seqFilter{}, Config: &seqStep{name: "a"}}}, routerOnly.Filters...)}
	r, err := routing.Compile(e2e.DefaultRouteConfig("rc"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := rpcpath.NewChain("fc", waits, rpcpath.NewSource(rpcpath.NewRoutes(r, waits, nil)))
	c.ServerOptions(nil, unknown)
	if c.Blocked() == nil {
		t.Fatalf("Blocked() = nil for a chain whose filters may return work")
	}
	info := tapInfo("svc", "/pkg.S/M")
	if _, err := rpcpath.ConnTap(c)(peerContext(), info); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "unreadable option") {
		t.Errorf("tap: %v, want UNAVAILABLE saying why", err)
	}
	plain := rpcpath.NewChain("fc", routerOnly, rpcpath.NewSource(rpcpath.NewRoutes(r, routerOnly, nil)))
	plain.ServerOptions(nil, unknown)
	if plain.Blocked() != nil {
		t.Errorf("Blocked() = %v for a chain whose filters never return work, want nil", plain.Blocked())
	}
}
