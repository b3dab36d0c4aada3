package rpcpath

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/routing"
)

// NewRoutes returns the Routes of a filter chain whose HttpConnectionManager
// is hcm and whose RouteConfiguration compiled to router: for every route,
// the steps of hcm's filters, each filter instance's config merged with the
// route's override (gRFC A39: when the routes are applied, not per RPC).
// Filters that are disabled on a route, or have nothing to do there, are
// left out. Identical (instance, config, override) triples share one step,
// and routes with the same steps share one slice. A step that fails to build
// fails its route's RPCs with UNAVAILABLE: fail closed, never open. obs, if
// not nil, counts the outcomes of the steps of filters that count them
// (httpfilter.CountingFilter: RBAC decisions, RPCs a local rate limit
// refuses), in the listener's metrics and for the status page, as each
// filter's httpfilter.Outcomes says.
//
// Steps that keep state across updates (token buckets) find it in obs's
// filter state, the Listener's (the process-wide one without obs), under
// their filter instance's name and config: routes built again for an
// unchanged config, for a Listener or an RDS update, share the state of the
// routes they replace.
func NewRoutes(router *routing.Router, hcm *filterchain.HTTPConnectionManager, obs *ListenerShared) *Routes {
	rt := &Routes{router: router}
	routes := router.Routes()
	memo := make(map[stepKey]httpfilter.Step)
	infos := make([]*filterInfo, len(hcm.Filters))
	for i, in := range hcm.Filters {
		n := in.Needs()
		infos[i] = &filterInfo{name: in.Name, mayWait: n.After, events: n.Events, metrics: obs.metrics()}
	}
	var prev []stage
	for _, route := range routes {
		var stages []stage
		for i, in := range hcm.Filters {
			override := route.FilterOverrides[in.Name]
			if !in.Active(override) {
				continue
			}
			if s := buildStep(memo, in, override, route, obs); s != nil {
				stages = append(stages, stage{step: s, filter: infos[i]})
			}
		}
		if len(stages) == 0 {
			continue
		}
		if rt.stages == nil {
			rt.stages = make([][]stage, len(routes))
		}
		if slices.Equal(stages, prev) {
			stages = prev
		}
		rt.stages[route.ID], prev = stages, stages
	}
	return rt
}

// stepKey identifies a step by its inputs, when they are comparable.
type stepKey struct {
	name             string
	config, override httpfilter.Config
	route            httpfilter.RouteInfo // for a RouteFilter only
}

func buildStep(memo map[stepKey]httpfilter.Step, in httpfilter.Instance, override httpfilter.Config, route *routing.Route, obs *ListenerShared) httpfilter.Step {
	key := stepKey{name: in.Name, config: in.Config, override: override}
	if _, ok := in.Filter.(httpfilter.RouteFilter); ok {
		key.route = httpfilter.RouteInfo{Metadata: route.Metadata, VirtualHostRateLimits: route.VirtualHostRateLimits}
	}
	comparable := isComparable(in.Config) && isComparable(override)
	if comparable {
		if s, ok := memo[key]; ok {
			return s
		}
	}
	s, err := newStep(in, override, key.route, obs)
	if err != nil {
		s = failStep{err: status.Errorf(codes.Unavailable, "xds: HTTP filter %q: %v", in.Name, err)}
	}
	s = obs.timed(in, obs.counted(in, s))
	if comparable {
		memo[key] = s
	}
	return s
}

// newStep asks the filter for its step, as it asks to be asked; a panic in
// the filter's code is an error, which fails the route's RPCs, not the
// process.
func newStep(in httpfilter.Instance, override httpfilter.Config, route httpfilter.RouteInfo, obs *ListenerShared) (s httpfilter.Step, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("building its step panicked: %v", r)
		}
	}()
	switch f := in.Filter.(type) {
	case httpfilter.StatefulFilter:
		return f.BuildStatefulStep(obs.filterState(), in.Name, in.Config, override)
	case httpfilter.RouteFilter:
		return f.BuildRouteStep(in.Name, in.Config, override, route)
	}
	return in.Filter.BuildStep(in.Name, in.Config, override)
}

func isComparable(c httpfilter.Config) bool {
	return c == nil || reflect.ValueOf(c).Comparable()
}

// failStep fails every RPC of its route with err.
type failStep struct{ err error }

func (s failStep) Run(ctx context.Context, _ httpfilter.RPC) (context.Context, httpfilter.After, error) {
	return ctx, nil, s.err
}
