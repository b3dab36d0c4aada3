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
	var prev []httpfilter.Step
	for _, route := range routes {
		var steps []httpfilter.Step
		for _, in := range hcm.Filters {
			override := route.FilterOverrides[in.Name]
			if !in.Active(override) {
				continue
			}
			if s := buildStep(memo, in, override, route, obs); s != nil {
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
	route            httpfilter.RouteInfo // for a RouteFilter only
}

func buildStep(memo map[stepKey]httpfilter.Step, in httpfilter.Instance, override httpfilter.Config, route *routing.Route, obs *ListenerShared) httpfilter.Step {
	key := stepKey{name: in.Name, config: in.Config, override: override}
	rf, readsRoute := in.Filter.(httpfilter.RouteFilter)
	if readsRoute {
		key.route = httpfilter.RouteInfo{Metadata: route.Metadata, VirtualHostRateLimits: route.VirtualHostRateLimits}
	}
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
	} else if readsRoute {
		s, err = rf.BuildRouteStep(in.Name, in.Config, override, key.route)
	} else {
		s, err = in.Filter.BuildStep(in.Name, in.Config, override)
	}
	if err != nil {
		s = failStep{err: status.Errorf(codes.Unavailable, "xds: HTTP filter %q: %v", in.Name, err)}
	}
	s = obs.counted(in, s)
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
// chains and configuration updates: the counters of the outcomes its HTTP
// filters count, and its filter state. One per listener, given to every
// NewRoutes of its chains.
type ListenerShared struct {
	// Metrics records the counters the filters declare
	// (httpfilter.Outcomes.Metric); nil without a MeterProvider.
	Metrics *metrics.Listener
	// Counts counts them for the status page; nil counts nothing.
	Counts *Counts

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

// counted returns s counting its outcomes, if its filter counts some
// (httpfilter.CountingFilter) and something records them: o's metrics, or
// its status page counts when the filter's Outcomes have a Title.
// Otherwise s itself. The framework names no filter: what is counted, and
// where, is the filter's own declaration.
func (o *ListenerShared) counted(in httpfilter.Instance, s httpfilter.Step) httpfilter.Step {
	cf, ok := in.Filter.(httpfilter.CountingFilter)
	if o == nil || !ok {
		return s
	}
	cs, ok := s.(httpfilter.CountingStep)
	if !ok {
		return s
	}
	out := cf.Outcomes()
	c := &stepCounter{rec: o.Metrics.Outcomes(metrics.OutcomeSpec{
		Metric: out.Metric, Unit: out.Unit, Description: out.Description,
		FilterAttr: out.FilterAttr, OutcomeAttr: out.OutcomeAttr, Values: out.Values,
		Metrics: out.Metrics, Descriptions: out.Descriptions,
	}, in.Name)}
	if out.Title != "" {
		c.n = o.Counts.of(out, in.Name)
	}
	if c.rec == nil && c.n == nil {
		return s
	}
	return cs.WithCounter(c)
}

// stepCounter counts one step's outcomes in a metric (rec not nil) and for
// the status page (n not nil). Count takes no lock and allocates nothing.
type stepCounter struct {
	rec *metrics.Outcomes
	n   *outcomeCount
}

func (c *stepCounter) Count(ctx context.Context, outcome int) {
	if c.n != nil {
		c.n[outcome].Add(1)
	}
	c.rec.Count(ctx, outcome)
}

// Counts counts the outcomes of counting filters (httpfilter.Outcomes with
// a Title) by filter instance name, across configuration changes, for the
// status page. The zero value is ready; a nil *Counts counts nothing. Safe
// for concurrent use; counting takes no lock.
type Counts struct {
	mu     sync.Mutex
	byName map[countKey]*outcomeCount // guarded by mu
}

type countKey struct {
	outcomes *httpfilter.Outcomes
	filter   string
}

// outcomeCount is the count of each outcome.
type outcomeCount [httpfilter.MaxOutcomes]atomic.Uint64

// of returns the counter of the filter instances named name counting
// outcomes, creating it. Called when routes are built, never per RPC.
func (d *Counts) of(outcomes *httpfilter.Outcomes, name string) *outcomeCount {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byName == nil {
		d.byName = make(map[countKey]*outcomeCount)
	}
	k := countKey{outcomes, name}
	c := d.byName[k]
	if c == nil {
		c = &outcomeCount{}
		d.byName[k] = c
	}
	return c
}

// FilterCount is the number of RPCs of each outcome that the filter
// instances of one name counted.
type FilterCount struct {
	// Outcomes is what the filter counts (its Title and Values name the
	// counts).
	Outcomes *httpfilter.Outcomes
	Filter   string
	// Counts has one count per outcome (Outcomes.Values).
	Counts []uint64
}

// Snapshot returns the counts, sorted by Title, then filter name.
func (d *Counts) Snapshot() []FilterCount {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]FilterCount, 0, len(d.byName))
	for k, c := range d.byName {
		counts := make([]uint64, len(k.outcomes.Values))
		for i := range counts {
			counts[i] = c[i].Load()
		}
		out = append(out, FilterCount{Outcomes: k.outcomes, Filter: k.filter, Counts: counts})
	}
	slices.SortFunc(out, func(a, b FilterCount) int {
		if c := strings.Compare(a.Outcomes.Title, b.Outcomes.Title); c != 0 {
			return c
		}
		return strings.Compare(a.Filter, b.Filter)
	})
	return out
}

// failStep fails every RPC of its route with err.
type failStep struct{ err error }

func (s failStep) Run(ctx context.Context, _ httpfilter.RPC) (context.Context, error) {
	return ctx, s.err
}
