package rpcpath

import (
	"context"
	"reflect"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/localratelimit"
	"github.com/proxyless-grpc/xds/internal/httpfilter/rbacfilter"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/routing"
)

// NewRoutes returns the Routes of a filter chain whose HttpConnectionManager
// is hcm and whose RouteConfiguration compiled to router: for every route,
// the steps of hcm's filters, each filter instance's config merged with the
// route's override (gRFC A39: when the routes are applied, not per RPC).
// Filters that are disabled on a route, or have nothing to do there, are
// left out. Identical (instance, config, override) triples share one step,
// and routes with the same steps share one slice. A step that fails to build
// fails its route's RPCs with UNAVAILABLE: fail closed, never open. m, if not
// nil, counts the RBAC filters' decisions and the RPCs the local rate limit
// filters refuse (or, not enforcing, would refuse).
//
// Steps that keep state across updates (token buckets) find it in the
// process-wide filter state (httpfilter.Retain), under their filter
// instance's name and config: routes built again for an unchanged config
// share the state of the routes they replace.
func NewRoutes(router *routing.Router, hcm *filterchain.HTTPConnectionManager, m *metrics.Listener) *Routes {
	rt := &Routes{router: router}
	routes := router.Routes()
	memo := make(map[stepKey]httpfilter.Step)
	var prev []httpfilter.Step
	for _, route := range routes {
		var steps []httpfilter.Step
		for _, in := range hcm.Filters {
			override := route.FilterOverrides[in.Name]
			if !in.Active(override) {
				continue
			}
			if s := buildStep(memo, in, override, m); s != nil {
				steps = append(steps, s)
			}
		}
		if len(steps) == 0 {
			continue
		}
		if rt.steps == nil {
			rt.steps = make([][]httpfilter.Step, len(routes))
		}
		if sameSteps(steps, prev) {
			steps = prev
		}
		rt.steps[route.ID], prev = steps, steps
	}
	return rt
}

// stepKey identifies a step by its inputs, when they are comparable.
type stepKey struct {
	name             string
	config, override httpfilter.Config
}

func buildStep(memo map[stepKey]httpfilter.Step, in httpfilter.Instance, override httpfilter.Config, m *metrics.Listener) httpfilter.Step {
	key := stepKey{name: in.Name, config: in.Config, override: override}
	comparable := isComparable(in.Config) && isComparable(override)
	if comparable {
		if s, ok := memo[key]; ok {
			return s
		}
	}
	s, err := in.Filter.BuildStep(in.Name, in.Config, override)
	if err != nil {
		s = failStep{err: status.Errorf(codes.Unavailable, "xds: HTTP filter %q: %v", in.Name, err)}
	}
	if m != nil {
		switch st := s.(type) {
		case *rbacfilter.Step:
			s = countedRBACStep{step: st, rec: m.RBAC(in.Name)}
		case *localratelimit.Step:
			if rec := m.LocalRateLimit(in.Name); rec != nil {
				s = st.WithCounter(rec)
			}
		}
	}
	if comparable {
		memo[key] = s
	}
	return s
}

func isComparable(c httpfilter.Config) bool {
	return c == nil || reflect.ValueOf(c).Comparable()
}

func sameSteps(a, b []httpfilter.Step) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// countedRBACStep is an RBAC step whose decisions are counted in the
// grpc.xds_server.rbac.decisions metric. It is used only when the server has
// a MeterProvider, so a server without metrics pays nothing for it.
type countedRBACStep struct {
	step *rbacfilter.Step
	rec  *metrics.RBAC
}

func (s countedRBACStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, error) {
	ctx, err := s.step.Run(ctx, rpc)
	switch {
	case err == nil:
		s.rec.Allowed(ctx)
	case status.Code(err) == codes.PermissionDenied:
		s.rec.Denied(ctx)
	}
	return ctx, err
}

// failStep fails every RPC of its route with err.
type failStep struct{ err error }

func (s failStep) Run(ctx context.Context, _ httpfilter.RPC) (context.Context, error) {
	return ctx, s.err
}
