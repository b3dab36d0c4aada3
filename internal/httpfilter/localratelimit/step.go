package localratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// Outcomes of the RPCs a step finds no token for, as counted
// (httpfilter.Counter): refused, or let through where the filter does not
// enforce.
const (
	outcomeLimited  = 0
	outcomeShadowed = 1
)

// outcomes is what the filter counts: the grpc.xds_server.local_rate_limit.limited
// metric (not on the status page).
var outcomes = &httpfilter.Outcomes{
	Metric:      LimitedMetric,
	Unit:        "{call}",
	Description: "RPCs a local rate limit HTTP filter found no token for: refused (enforced), or let through where it does not enforce (shadow).",
	FilterAttr:  AttrFilter,
	OutcomeAttr: AttrMode,
	Values:      []string{ModeEnforced, ModeShadow},
}

// The filter's metric, its attributes and their values.
const (
	// LimitedMetric counts the RPCs a local rate limit HTTP filter found
	// no token for: refused (AttrMode ModeEnforced) or, where the filter
	// does not enforce, let through (ModeShadow). The filter is in
	// AttrFilter.
	LimitedMetric = "grpc.xds_server.local_rate_limit.limited"
	// AttrFilter is the name of the filter instance (its name in the
	// HttpConnectionManager's http_filters).
	AttrFilter = "grpc.xds_server.local_rate_limit.filter"
	// AttrMode is ModeEnforced (the RPC was refused) or ModeShadow (the
	// filter is enabled but not enforced for the RPC, which went through).
	AttrMode     = "grpc.xds_server.local_rate_limit.mode"
	ModeEnforced = "enforced"
	ModeShadow   = "shadow"
)

// Outcomes implements httpfilter.CountingFilter.
func (Filter) Outcomes() *httpfilter.Outcomes { return outcomes }

// limiter is the state of one bucket config of one filter instance, kept
// across configuration updates in the Listener's httpfilter.State: the
// bucket, or for per-connection limits the key of each connection's
// bucket.
type limiter struct {
	// shared is the bucket of every RPC; with per-connection buckets, of
	// the RPCs of a connection without a ConnState (the server always gives
	// one, so never in practice).
	shared  *bucket
	perConn bool
	// newConnBucket makes a connection's bucket; a field, so that passing
	// it to ConnState.GetOrInit allocates nothing.
	newConnBucket func() any
}

func newLimiter(c *Config) *limiter {
	spec := c.spec
	return &limiter{
		shared:        newBucket(spec),
		perConn:       c.perConn,
		newConnBucket: func() any { return newBucket(spec) },
	}
}

// BuildStep implements httpfilter.Filter, with the process-wide State; the
// server calls BuildStatefulStep.
func (f Filter) BuildStep(instance string, config, override httpfilter.Config) (httpfilter.Step, error) {
	return f.BuildStatefulStep(nil, instance, config, override)
}

// BuildStatefulStep implements httpfilter.StatefulFilter: a per-route config
// replaces the filter's config. A config without a bucket, or enabled for
// no RPC, has no step. The bucket is kept in state (the Listener's) under
// the filter instance's name and the config's bucket key, so the steps
// built for an update that leaves those unchanged share it.
func (Filter) BuildStatefulStep(state *httpfilter.State, instance string, config, override httpfilter.Config) (httpfilter.Step, error) {
	c, ok := config.(*Config)
	if override != nil {
		c, ok = override.(*Config)
	}
	if !ok {
		return nil, fmt.Errorf("localratelimit: config of type %T, want *localratelimit.Config", config)
	}
	if !c.hasBucket || c.enabled.Never() {
		return nil, nil
	}
	s := &Step{
		cfg: c,
		lim: httpfilter.Retain(state, instance+"|"+c.key, func() *limiter { return newLimiter(c) }),
	}
	if c.trailers != nil || c.retryAfter {
		s.refuse = &refusal{err: c.err, trailers: c.trailers}
	}
	return s, nil
}

// Step is the filter's per-RPC work on one route. Immutable.
type Step struct {
	cfg     *Config
	lim     *limiter
	refuse  *refusal           // nil: refuse in the tap, with no trailers
	counter httpfilter.Counter // nil: nothing counts
}

// WithCounter implements httpfilter.CountingStep: a copy of s whose
// refusals (and shadowed refusals) c counts.
func (s *Step) WithCounter(c httpfilter.Counter) httpfilter.Step {
	cp := *s
	cp.counter = c
	return &cp
}

// Run implements httpfilter.Step. An RPC the filter is enabled for takes a
// token; one that finds none is refused if the filter enforces for it, with
// the config's status (in the tap, or after it when trailing metadata must
// be added), and is let through otherwise (shadow mode), with
// request_headers_to_add_when_not_enforced added to its metadata.
func (s *Step) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	c := s.cfg
	if !c.enabled.Hit() {
		return ctx, nil, nil
	}
	b := s.lim.shared
	if s.lim.perConn && rpc.Conn != nil {
		b = rpc.Conn.GetOrInit(s.lim, s.lim.newConnBucket).(*bucket)
	}
	now := clock()
	if b.take(now) {
		return ctx, nil, nil
	}
	if !c.enforced.Hit() {
		if s.counter != nil {
			s.counter.Count(ctx, outcomeShadowed)
		}
		if len(c.shadowHeaders) > 0 {
			// The steps after this one see the headers too: the pipeline
			// reads them again from the new context.
			ctx = c.shadowHeaders.addToIncoming(ctx)
		}
		return ctx, nil, nil
	}
	if s.counter != nil {
		s.counter.Count(ctx, outcomeLimited)
	}
	switch {
	case s.refuse == nil:
		return ctx, nil, c.err
	case c.retryAfter:
		return ctx, s.refuse.withRetryAfter(b.wait(now)), nil
	default:
		return ctx, s.refuse, nil
	}
}

// refusal fails an RPC with err after the tap, with trailers as its
// trailing metadata.
type refusal struct {
	err      error
	trailers metadata.MD // not modified
}

// RunAfter implements httpfilter.After.
func (r *refusal) RunAfter(ctx context.Context) (context.Context, error) {
	if r.trailers != nil {
		// The error only says that ctx has no stream, which it has.
		grpc.SetTrailer(ctx, r.trailers)
	}
	return ctx, r.err
}

// withRetryAfter returns r with a retry-after trailer of wait in whole
// seconds, at least 1, unless the trailers already have one or no token
// will ever come (max_tokens 0).
func (r *refusal) withRetryAfter(wait time.Duration) *refusal {
	if len(r.trailers.Get("retry-after")) > 0 || wait >= maxSpan {
		return r
	}
	secs := max(int64((wait+time.Second-1)/time.Second), 1)
	md := metadata.Join(r.trailers, metadata.Pairs("retry-after", strconv.FormatInt(secs, 10)))
	return &refusal{err: r.err, trailers: md}
}
