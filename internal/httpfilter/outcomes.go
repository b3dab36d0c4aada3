package httpfilter

import (
	"context"
	"time"
)

// Outcomes describes what the steps of a filter count: RPCs by one of a
// few outcomes (allowed or denied; refused or let through in shadow mode;
// allowed, denied, not checked or failed), per filter instance, in
// OpenTelemetry counters and, with a Title, on the status page. A filter declares it by implementing CountingFilter; the
// server then wires the listener's recorders into each step that
// implements CountingStep. The server knows no filter by name: this is the
// whole contract. Immutable; filters return one value for the process.
type Outcomes struct {
	// Metric is the name of the counter ("grpc.xds_server.rbac.decisions"),
	// with its Unit and Description; empty: no metric (unless Metrics).
	Metric, Unit, Description string
	// FilterAttr is the attribute key naming the filter instance (its name
	// in http_filters); OutcomeAttr the key of the outcome, whose values
	// are Values.
	FilterAttr, OutcomeAttr string
	// Values names the outcomes: 2 to MaxOutcomes of them.
	Values []string
	// Metrics, when set, replaces Metric: one counter per outcome (the
	// names of Values, in order), with no attribute at all, as gRFC A92
	// defines the ext_authz metrics. Descriptions has their descriptions.
	Metrics, Descriptions []string
	// Title heads the status page's table of these counts, one row per
	// filter instance and one column per outcome (Values, capitalized);
	// empty: the status page does not show them. None is what the page
	// says when no instance has counted an RPC yet.
	Title, None string
}

// MaxOutcomes is the most outcomes a filter counts.
const MaxOutcomes = 4

// Counter counts one step's RPCs by outcome (the index in
// Outcomes.Values). The server gives it to the step when it builds the
// routes; Count takes no lock and allocates nothing, so a step calls it
// from Run.
type Counter interface {
	Count(ctx context.Context, outcome int)
}

// CountingFilter is implemented by filters whose steps count outcomes.
type CountingFilter interface {
	Filter
	Outcomes() *Outcomes
}

// CountingStep is implemented by the steps of a CountingFilter: WithCounter
// returns the step counting with c (a copy; the step itself is immutable).
// The server calls it once per step when it builds the routes, and only
// when something records the counts.
type CountingStep interface {
	Step
	WithCounter(c Counter) Step
}

// Timings describes the durations a filter's steps record (gRFC A93's
// grpc.server_ext_proc.*_duration): one OpenTelemetry histogram per name in
// Metrics, in seconds, with no attribute, and gRPC's latency buckets (gRFC
// A66). A filter declares it by implementing TimingFilter; the server then
// gives each step that implements TimingStep a Timer. Immutable; filters
// return one value for the process.
type Timings struct {
	Metrics, Descriptions []string
}

// Timer records one step's durations (the index in Timings.Metrics). It
// takes no lock and allocates nothing.
type Timer interface {
	Record(ctx context.Context, metric int, d time.Duration)
}

// TimingFilter is implemented by filters whose steps record durations.
type TimingFilter interface {
	Filter
	Timings() *Timings
}

// TimingStep is implemented by the steps of a TimingFilter: WithTimer
// returns the step recording with t (a copy). The server calls it once per
// step when it builds the routes, and only when a MeterProvider records.
type TimingStep interface {
	Step
	WithTimer(t Timer) Step
}
