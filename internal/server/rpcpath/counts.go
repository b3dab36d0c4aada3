package rpcpath

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/metrics"
)

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

// metrics returns the listener's recorder; nil for a nil o.
func (o *ListenerShared) metrics() *metrics.Listener {
	if o == nil {
		return nil
	}
	return o.Metrics
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

// timed returns s recording its durations, if its filter records some
// (httpfilter.TimingFilter) and o has metrics; otherwise s itself.
func (o *ListenerShared) timed(in httpfilter.Instance, s httpfilter.Step) httpfilter.Step {
	tf, ok := in.Filter.(httpfilter.TimingFilter)
	if o == nil || o.Metrics == nil || !ok {
		return s
	}
	ts, ok := s.(httpfilter.TimingStep)
	if !ok {
		return s
	}
	t := tf.Timings()
	d := o.Metrics.Durations(t.Metrics, t.Descriptions)
	if d == nil {
		return s
	}
	return ts.WithTimer(d)
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
