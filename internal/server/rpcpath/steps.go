package rpcpath

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/filterchain"
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
// fails its route's RPCs with UNAVAILABLE: fail closed, never open. obs, if
// not nil, counts the RBAC filters' decisions and the RPCs the local rate
// limit filters refuse (or, not enforcing, would refuse).
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
	var prev []httpfilter.Step
	for _, route := range routes {
		var steps []httpfilter.Step
		for _, in := range hcm.Filters {
			override := route.FilterOverrides[in.Name]
			if !in.Active(override) {
				continue
			}
			if s := buildStep(memo, in, override, obs); s != nil {
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

func buildStep(memo map[stepKey]httpfilter.Step, in httpfilter.Instance, override httpfilter.Config, obs *ListenerShared) httpfilter.Step {
	key := stepKey{name: in.Name, config: in.Config, override: override}
	comparable := isComparable(in.Config) && isComparable(override)
	if comparable {
		if s, ok := memo[key]; ok {
			return s
		}
	}
	var s httpfilter.Step
	var err error
	if sf, ok := in.Filter.(httpfilter.StatefulFilter); ok {
		s, err = sf.BuildStatefulStep(obs.filterState(), in.Name, in.Config, override)
	} else {
		s, err = in.Filter.BuildStep(in.Name, in.Config, override)
	}
	if err != nil {
		s = failStep{err: status.Errorf(codes.Unavailable, "xds: HTTP filter %q: %v", in.Name, err)}
	}
	if obs != nil {
		switch st := s.(type) {
		case *rbacfilter.Step:
			s = countedRBACStep{step: st, rec: obs.Metrics.RBAC(in.Name), n: obs.Decisions.of(in.Name)}
		case *localratelimit.Step:
			if rec := obs.Metrics.LocalRateLimit(in.Name); rec != nil {
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

// ListenerShared is what the routes of one listener share, across its filter
// chains and configuration updates: the counters of its RBAC filters'
// decisions and of the RPCs its local rate limit filters refuse, and its
// filter state. One per listener, given to every NewRoutes of its chains.
type ListenerShared struct {
	// Metrics records the grpc.xds_server.rbac.decisions and
	// grpc.xds_server.local_rate_limit.limited metrics; nil without a
	// MeterProvider.
	Metrics *metrics.Listener
	// Decisions counts them for the status page; nil counts nothing.
	Decisions *Decisions

	// state is the listener's filter state (gRFC A83): token buckets kept
	// across updates. The zero value is ready.
	state httpfilter.State
}

// filterState returns the listener's filter state; nil (the process-wide
// one) for a nil o.
func (o *ListenerShared) filterState() *httpfilter.State {
	if o == nil {
		return nil
	}
	return &o.state
}

// Decisions counts the decisions of RBAC filters by filter instance name,
// across configuration changes. The zero value is ready; a nil *Decisions
// counts nothing. Safe for concurrent use; counting takes no lock.
type Decisions struct {
	mu     sync.Mutex
	byName map[string]*decisionCount // guarded by mu
}

type decisionCount struct {
	allowed, denied atomic.Uint64
}

// of returns the counter of the filter instances named name, creating it.
// Called when routes are built, never per RPC.
func (d *Decisions) of(name string) *decisionCount {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byName == nil {
		d.byName = make(map[string]*decisionCount)
	}
	c := d.byName[name]
	if c == nil {
		c = &decisionCount{}
		d.byName[name] = c
	}
	return c
}

// RBACCount is the number of RPCs the RBAC filter instances of one name
// allowed and denied.
type RBACCount struct {
	Filter          string
	Allowed, Denied uint64
}

// Counts returns the counts by filter name, sorted by name.
func (d *Decisions) Counts() []RBACCount {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]RBACCount, 0, len(d.byName))
	for name, c := range d.byName {
		out = append(out, RBACCount{Filter: name, Allowed: c.allowed.Load(), Denied: c.denied.Load()})
	}
	slices.SortFunc(out, func(a, b RBACCount) int { return strings.Compare(a.Filter, b.Filter) })
	return out
}

// countedRBACStep is an RBAC step whose decisions are counted: in the
// grpc.xds_server.rbac.decisions metric when the server has a MeterProvider
// (rec not nil), and for the status page (n not nil).
type countedRBACStep struct {
	step *rbacfilter.Step
	rec  *metrics.RBAC
	n    *decisionCount
}

func (s countedRBACStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, error) {
	ctx, err := s.step.Run(ctx, rpc)
	switch {
	case err == nil:
		if s.n != nil {
			s.n.allowed.Add(1)
		}
		s.rec.Allowed(ctx)
	case status.Code(err) == codes.PermissionDenied:
		if s.n != nil {
			s.n.denied.Add(1)
		}
		s.rec.Denied(ctx)
	}
	return ctx, err
}

// failStep fails every RPC of its route with err.
type failStep struct{ err error }

func (s failStep) Run(ctx context.Context, _ httpfilter.RPC) (context.Context, error) {
	return ctx, s.err
}
