package routing_test

import (
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/routing"
)

// TestActions checks that every action is valid on a server (gRFC A36) and
// reported as it is.
func TestActions(t *testing.T) {
	tests := []struct {
		desc string
		set  func(r *routepb.Route)
		want routing.RouteAction
	}{
		{desc: "non_forwarding_action", set: func(r *routepb.Route) { r.Action = nonForwarding() }, want: routing.ActionNonForwarding},
		{desc: "route with cluster", set: func(r *routepb.Route) {
			r.Action = &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"}}}
		}, want: routing.ActionRoute},
		{desc: "route with weighted_clusters", set: func(r *routepb.Route) {
			r.Action = &routepb.Route_Route{Route: weighted(&routepb.WeightedCluster{TotalWeight: wrapperspb.UInt32(3), Clusters: []*routepb.WeightedCluster_ClusterWeight{clusterWeight("a", 1), clusterWeight("b", 2)}})}
		}, want: routing.ActionRoute},
		{desc: "route with weighted_clusters and total_weight 0", set: func(r *routepb.Route) {
			r.Action = &routepb.Route_Route{Route: weighted(&routepb.WeightedCluster{TotalWeight: wrapperspb.UInt32(0), Clusters: []*routepb.WeightedCluster_ClusterWeight{clusterWeight("a", 1)}})}
		}, want: routing.ActionRoute},
		{desc: "redirect", set: func(r *routepb.Route) { r.Action = &routepb.Route_Redirect{Redirect: &routepb.RedirectAction{}} }, want: routing.ActionRedirect},
		{desc: "direct_response", set: func(r *routepb.Route) {
			r.Action = &routepb.Route_DirectResponse{DirectResponse: &routepb.DirectResponseAction{Status: 200}}
		}, want: routing.ActionDirectResponse},
		{desc: "filter_action", set: func(r *routepb.Route) { r.Action = &routepb.Route_FilterAction{FilterAction: &routepb.FilterAction{}} }, want: routing.ActionFilter},
		{desc: "unset", set: func(r *routepb.Route) { r.Action = nil }, want: routing.ActionUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r := route("r", prefixMatch(""))
			tc.set(r)
			router, err := routing.Compile(routeConfig(vhost("vh", []string{"*"}, r)), nil)
			if err != nil {
				t.Fatalf("Compile() failed: %v", err)
			}
			got, ok := router.Match("a.com", "/s/m", nil)
			if !ok {
				t.Fatalf("Match() found no route")
			}
			want := &routing.Route{VirtualHost: "vh", Name: "r", Index: 0, Action: tc.want}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("Match() returned an unexpected route (-got, +want):\n%s", diff)
			}
		})
	}
}

func TestRouteActionString(t *testing.T) {
	want := map[routing.RouteAction]string{
		routing.ActionUnsupported:    "unsupported",
		routing.ActionNonForwarding:  "non_forwarding_action",
		routing.ActionRoute:          "route",
		routing.ActionRedirect:       "redirect",
		routing.ActionDirectResponse: "direct_response",
		routing.ActionFilter:         "filter_action",
	}
	for a, w := range want {
		if got := a.String(); got != w {
			t.Errorf("RouteAction(%d).String() = %q, want %q", a, got, w)
		}
	}
}

func TestRouteIndex(t *testing.T) {
	q := route("q", prefixMatch(""))
	q.Match.QueryParameters = []*routepb.QueryParameterMatcher{{Name: "x"}}
	r, err := routing.Compile(routeConfig(vhost("vh", []string{"*"}, route("a", pathMatch("/a")), q, route("c", prefixMatch("")))), nil)
	if err != nil {
		t.Fatalf("Compile() failed: %v", err)
	}
	got, ok := r.Match("x", "/b", nil)
	if !ok || got.Index != 2 || got.Name != "c" {
		t.Errorf("Match() = %+v, %v; want route \"c\" at index 2 (the ignored route keeps its place)", got, ok)
	}
}

func TestRuntimeFraction(t *testing.T) {
	tests := []struct {
		desc string
		f    *typepb.FractionalPercent
		roll uint64 // what the random source returns, out of a million
		want bool
	}{
		{desc: "25% of HUNDRED, roll just under", f: &typepb.FractionalPercent{Numerator: 25}, roll: 249_999, want: true},
		{desc: "25% of HUNDRED, roll at the edge", f: &typepb.FractionalPercent{Numerator: 25}, roll: 250_000},
		{desc: "TEN_THOUSAND", f: &typepb.FractionalPercent{Numerator: 1, Denominator: typepb.FractionalPercent_TEN_THOUSAND}, roll: 99, want: true},
		{desc: "TEN_THOUSAND no", f: &typepb.FractionalPercent{Numerator: 1, Denominator: typepb.FractionalPercent_TEN_THOUSAND}, roll: 100},
		{desc: "MILLION", f: &typepb.FractionalPercent{Numerator: 1, Denominator: typepb.FractionalPercent_MILLION}, roll: 0, want: true},
		{desc: "zero never matches", f: &typepb.FractionalPercent{}, roll: 0},
		{desc: "numerator above the denominator always matches", f: &typepb.FractionalPercent{Numerator: 101}, roll: 999_999, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			m := prefixMatch("")
			m.RuntimeFraction = fraction(tc.f.GetNumerator(), tc.f.GetDenominator())
			r, err := routing.Compile(routeConfig(vhost("vh", []string{"*"}, route("r", m))), nil)
			if err != nil {
				t.Fatalf("Compile() failed: %v", err)
			}
			routing.SetRand(r, func(n uint64) uint64 {
				if n != 1_000_000 {
					t.Errorf("random source asked for [0, %d), want [0, 1000000)", n)
				}
				return tc.roll
			})
			if _, got := r.Match("a", "/s/m", nil); got != tc.want {
				t.Errorf("Match() ok = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRuntimeFractionDefaultSource(t *testing.T) {
	m := prefixMatch("")
	m.RuntimeFraction = fraction(50, typepb.FractionalPercent_HUNDRED)
	r, err := routing.Compile(routeConfig(vhost("vh", []string{"*"}, route("r", m))), nil)
	if err != nil {
		t.Fatalf("Compile() failed: %v", err)
	}
	hits := 0
	for range 1000 {
		if _, ok := r.Match("a", "/", nil); ok {
			hits++
		}
	}
	if hits < 350 || hits > 650 {
		t.Errorf("a 50%% route matched %d times in 1000, want about 500", hits)
	}
}

// TestFilterOverrides checks gRFC A39's precedence: a route's override of a
// filter instance wins over its virtual host's.
func TestFilterOverrides(t *testing.T) {
	tests := []struct {
		desc    string
		vh, rt  map[string]string
		wantOut map[string]httpfilter.Config
	}{
		{desc: "none", wantOut: nil},
		{desc: "virtual host only", vh: map[string]string{"f1": "vh1"}, wantOut: map[string]httpfilter.Config{"f1": "vh1"}},
		{desc: "route only", rt: map[string]string{"f1": "r1"}, wantOut: map[string]httpfilter.Config{"f1": "r1"}},
		{
			desc:    "route wins, others merged",
			vh:      map[string]string{"f1": "vh1", "f2": "vh2"},
			rt:      map[string]string{"f2": "r2", "f3": "r3"},
			wantOut: map[string]httpfilter.Config{"f1": "vh1", "f2": "r2", "f3": "r3"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r := route("r", prefixMatch(""))
			if tc.rt != nil {
				r.TypedPerFilterConfig = overrides(t, tc.rt)
			}
			vh := vhost("vh", []string{"*"}, r, route("plain", prefixMatch("")))
			if tc.vh != nil {
				vh.TypedPerFilterConfig = overrides(t, tc.vh)
			}
			router, err := routing.Compile(routeConfig(vh), newParser())
			if err != nil {
				t.Fatalf("Compile() failed: %v", err)
			}
			got, ok := router.Match("a", "/", nil)
			if !ok {
				t.Fatalf("Match() found no route")
			}
			if diff := cmp.Diff(got.FilterOverrides, tc.wantOut); diff != "" {
				t.Errorf("FilterOverrides (-got, +want):\n%s", diff)
			}
		})
	}
}

func TestMatchNoAllocs(t *testing.T) {
	m := withHeaders(prefixMatch("/svc/"), headerExact("k", "v"))
	rc := routeConfig(
		vhost("exact", []string{"a.example.com"}, route("r", m)),
		vhost("suffix", []string{"*.example.com"}, route("r", regexMatch("/svc/[a-z]+"))),
		vhost("prefix", []string{"example.*"}, route("r", caseInsensitive(pathMatch("/Svc/M")))),
	)
	r, err := routing.Compile(rc, nil)
	if err != nil {
		t.Fatalf("Compile() failed: %v", err)
	}
	h := md{"k": {"v"}}
	for _, authority := range []string{"a.example.com", "B.Example.com", "example.org", "nothing"} {
		if n := testing.AllocsPerRun(200, func() { r.Match(authority, "/svc/m", h) }); n != 0 {
			t.Errorf("Match(%q) allocates %v times per call, want 0", authority, n)
		}
	}
}

func TestFailingRoutes(t *testing.T) {
	redirect := &routepb.Route{Name: "redirect", Match: prefixMatch("/r"), Action: &routepb.Route_Redirect{Redirect: &routepb.RedirectAction{}}}
	ignored := &routepb.Route{Name: "ignored", Match: prefixMatch(""), Action: &routepb.Route_Route{Route: &routepb.RouteAction{}}}
	unset := &routepb.Route{Name: "unset", Match: prefixMatch("")}
	r, err := routing.Compile(routeConfig(
		vhost("a", []string{"a"}, route("ok", prefixMatch("/ok")), redirect, ignored),
		vhost("b", []string{"b"}, unset),
	), nil)
	if err != nil {
		t.Fatalf("Compile() failed: %v", err)
	}
	want := []*routing.Route{
		{VirtualHost: "a", Name: "redirect", Index: 1, ID: 1, Action: routing.ActionRedirect},
		{VirtualHost: "b", Name: "unset", Index: 0, ID: 2, Action: routing.ActionUnsupported},
	}
	if diff := cmp.Diff(r.FailingRoutes(), want); diff != "" {
		t.Errorf("FailingRoutes() (-got, +want):\n%s", diff)
	}
	// Routes lists the routes that can match, by ID ("ignored" is left out).
	var names []string
	for i, rt := range r.Routes() {
		if rt.ID != i {
			t.Errorf("Routes()[%d].ID = %d, want %d", i, rt.ID, i)
		}
		names = append(names, rt.Name)
	}
	if diff := cmp.Diff(names, []string{"ok", "redirect", "unset"}); diff != "" {
		t.Errorf("Routes() names (-got, +want):\n%s", diff)
	}
}
