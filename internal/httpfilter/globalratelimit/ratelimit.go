// Package globalratelimit is Envoy's global rate limit HTTP filter on the
// server (envoy.extensions.filters.http.ratelimit.v3.RateLimit): for each
// RPC on a route with rate_limits, one
// envoy.service.ratelimit.v3.RateLimitService ShouldRateLimit call to a
// Rate Limit Service (such as envoyproxy/ratelimit, whose counters are in
// Redis) decides whether the RPC reaches its handler, so that a fleet of
// servers shares one limit.
//
// The descriptors are built in the tap handle (package ratelimitdesc); the
// call is the work the step returns (httpfilter.After), run after the tap
// on the RPC's own goroutine, bounded by the filter's timeout and the RPC's
// deadline. The side channel
// is internal/grpcservice's (gRFC A102, as ext_authz's): one per target
// and credentials. A route where no rate limit applies gets no step.
package globalratelimit

import (
	"fmt"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"google.golang.org/grpc/grpclog"

	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/ratelimitdesc"
)

var logger = grpclog.Component("xds")

// Type URLs of the filter's configs.
const (
	ConfigTypeURL   = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
	OverrideTypeURL = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute"
)

// The outcomes the filter counts, in the order of Outcomes.Values: Envoy's
// ratelimit.ok, over_limit, error and failure_mode_allowed stats. An error
// that is let through counts as error and as failure_mode_allowed, as in
// Envoy.
const (
	outcomeOK = iota
	outcomeOverLimit
	outcomeError
	outcomeFailureModeAllowed
)

// The filter's metric and its attributes.
const (
	// CallsMetric counts the RPCs the filter asked the rate limit service
	// about, by AttrOutcome.
	CallsMetric = "grpc.xds_server.ratelimit.rpcs"
	// AttrFilter is the filter instance's name in http_filters.
	AttrFilter = "grpc.xds_server.ratelimit.filter"
	// AttrOutcome is ok, over_limit, error or failure_mode_allowed.
	AttrOutcome = "grpc.xds_server.ratelimit.outcome"
)

var outcomes = &httpfilter.Outcomes{
	Metric:      CallsMetric,
	Unit:        "{call}",
	Description: "RPCs a global rate limit HTTP filter asked its rate limit service about, by outcome (Envoy's ratelimit.ok, over_limit, error, failure_mode_allowed).",
	FilterAttr:  AttrFilter,
	OutcomeAttr: AttrOutcome,
	Values:      []string{"ok", "over_limit", "error", "failure_mode_allowed"},
	Title:       "Global rate limit (ratelimit)",
	None:        "No RPC has met a global rate limit filter yet.",
}

// Filter is the global rate limit HTTP filter.
type Filter struct{}

// ConfigTypeURLs implements httpfilter.Filter.
func (Filter) ConfigTypeURLs() []string { return []string{ConfigTypeURL} }

// OverrideTypeURLs implements httpfilter.Filter.
func (Filter) OverrideTypeURLs() []string { return []string{OverrideTypeURL} }

// IsTerminal implements httpfilter.Filter.
func (Filter) IsTerminal() bool { return false }

// Needs implements httpfilter.NeedsReporter: the call runs after the tap.
func (Filter) Needs() httpfilter.Needs {
	return httpfilter.Needs{After: true, Events: httpfilter.ServerHeaders}
}

// CallsOut implements httpfilter.SideCaller: descriptors built from the
// request go to the rate limit service.
func (Filter) CallsOut() bool { return true }

// Outcomes implements httpfilter.CountingFilter.
func (Filter) Outcomes() *httpfilter.Outcomes { return outcomes }

// ParseConfig implements httpfilter.Filter, for a config whose origin is
// unknown (see ParseConfigEnv).
func (f Filter) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return f.ParseConfigEnv(nil, raw)
}

// ParseConfigEnv implements httpfilter.EnvFilter: env is the
// *grpcservice.Env of the management server that sent the config, which
// judges rate_limit_service.grpc_service (gRFC A102).
func (Filter) ParseConfigEnv(env any, raw httpfilter.RawConfig) (httpfilter.Config, error) {
	m := &rlpb.RateLimit{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("malformed RateLimit: %w", err)
	}
	e, _ := env.(*grpcservice.Env)
	return parseConfig(e, m)
}

// ParseOverride implements httpfilter.Filter.
func (Filter) ParseOverride(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	m := &rlpb.RateLimitPerRoute{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("malformed RateLimitPerRoute: %w", err)
	}
	return parseOverride(m)
}

// BuildStep implements httpfilter.Filter, for a route of which nothing
// else is known (BuildRouteStep is what the server calls).
func (f Filter) BuildStep(instance string, config, override httpfilter.Config) (httpfilter.Step, error) {
	return f.BuildRouteStep(instance, config, override, httpfilter.RouteInfo{})
}

// policy is one list of rate limits a step evaluates.
type policy struct {
	p        *ratelimitdesc.Policy
	anyStage bool // the filter's or a RateLimitPerRoute's: stage does not apply
}

// BuildRouteStep implements httpfilter.RouteFilter. The rate limits of a
// route are, in Envoy's precedence: its RateLimitPerRoute's (the route's,
// else its virtual host's), else the filter's own, else the virtual host's
// rate_limits of the filter's stage; RateLimitPerRoute.vh_rate_limits may
// add the virtual host's to the route's (INCLUDE) or leave them out
// (IGNORE). A route where none applies, or where the filter never applies
// (request_type internal: a gRPC server sees no request as internal), gets
// no step, and so costs nothing.
func (Filter) BuildRouteStep(_ string, config, override httpfilter.Config, route httpfilter.RouteInfo) (httpfilter.Step, error) {
	c, ok := config.(*Config)
	if !ok {
		return nil, fmt.Errorf("ratelimit: config of type %T", config)
	}
	if c.requestType == requestInternal {
		return nil, nil
	}
	s := &step{cfg: c, domain: c.domain}
	vh := route.VirtualHostRateLimits
	if !vh.HasStage(c.stage) && vh.Unsupported() == nil {
		vh = nil
	}
	pr, _ := override.(*perRoute)
	switch {
	case pr != nil && pr.rateLimits != nil:
		s.policies = append(s.policies, policy{p: pr.rateLimits, anyStage: true})
		if pr.vh == rlpb.RateLimitPerRoute_INCLUDE && vh != nil {
			s.policies = append(s.policies, policy{p: vh})
		}
	case c.rateLimits != nil:
		s.policies = append(s.policies, policy{p: c.rateLimits, anyStage: true})
	case vh != nil && (pr == nil || pr.vh != rlpb.RateLimitPerRoute_IGNORE):
		s.policies = append(s.policies, policy{p: vh})
	}
	if len(s.policies) == 0 {
		return nil, nil
	}
	for _, p := range s.policies {
		if err := p.p.Unsupported(); err != nil {
			// Accepted with the RouteConfiguration (Envoy accepts it);
			// refusing the route's RPCs is safer than limiting fewer of
			// them than asked.
			return nil, fmt.Errorf("the virtual host's rate_limits%v", err)
		}
	}
	if pr != nil && pr.domain != "" {
		s.domain = pr.domain
	}
	s.route = route
	return s, nil
}

// Acquire implements httpfilter.Acquirer: the side channel is open while a
// filter chain serves with the config.
func (Filter) Acquire(config httpfilter.Config) func() {
	c, ok := config.(*Config)
	if !ok {
		return func() {}
	}
	return c.service.Hold("ratelimit")
}

// Describe implements httpfilter.Describer.
func (Filter) Describe(config httpfilter.Config) string {
	c, ok := config.(*Config)
	if !ok {
		return ""
	}
	fail := "failure allows"
	if c.failureModeDeny {
		fail = "failure denies with " + c.errorCode.String()
	}
	return fmt.Sprintf("rate limit service %q, domain %q (credentials: %s; timeout %v; over limit: %s; %s)",
		c.service.Target, c.domain, c.service.CredsSource, c.timeout, c.limitedCode, fail)
}

var (
	_ httpfilter.EnvFilter      = Filter{}
	_ httpfilter.Acquirer       = Filter{}
	_ httpfilter.CountingFilter = Filter{}
	_ httpfilter.Describer      = Filter{}
	_ httpfilter.RouteFilter    = Filter{}
)
