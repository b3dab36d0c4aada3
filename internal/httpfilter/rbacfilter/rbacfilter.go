// Package rbacfilter is the RBAC HTTP filter
// (envoy.extensions.filters.http.rbac.v3.RBAC) of gRFC A41, with its
// per-route override RBACPerRoute and audit logging (gRFC A59). The server's
// registry (internal/httpfilter/builtin) holds it; Register adds it to
// another.
//
// Parsing compiles the policies into rbac engines, so a config is compiled
// once per distinct content: identical configs within one resource share
// the Parser's memo, and across resources and updates an engine is reused
// for as long as a configuration still holds it.
package rbacfilter

import (
	"context"
	"errors"
	"fmt"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
	"github.com/proxyless-grpc/xds/rbac"
)

// configName is the message name of ConfigTypeURL.
const configName = "envoy.extensions.filters.http.rbac.v3.RBAC"

// Type URLs of the filter's configs.
const (
	ConfigTypeURL   = "type.googleapis.com/" + configName
	OverrideTypeURL = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute"
)

// Filter is the RBAC HTTP filter.
type Filter struct{}

// Register adds the filter to reg.
func Register(reg *httpfilter.Registry) { reg.Register(Filter{}) }

// Config is a parsed RBAC filter config, top-level or from an RBACPerRoute.
// Immutable.
type Config struct {
	// Rules enforces; nil when the config has no rules (allow all).
	Rules *rbac.Engine
	// Shadow is evaluated and reported to its audit loggers, never
	// enforced; nil when there are no shadow_rules.
	Shadow *rbac.Engine
}

// disabled is the override of an RBACPerRoute without rbac: RBAC is off for
// the route, as in Envoy.
var disabled = &Config{}

// ConfigTypeURLs implements httpfilter.Filter.
func (Filter) ConfigTypeURLs() []string { return []string{ConfigTypeURL} }

// OverrideTypeURLs implements httpfilter.Filter.
func (Filter) OverrideTypeURLs() []string { return []string{OverrideTypeURL} }

// IsTerminal implements httpfilter.Filter.
func (Filter) IsTerminal() bool { return false }

// ParseConfig implements httpfilter.Filter.
func (Filter) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	// A config in binary form is keyed by the bytes received: the same
	// bytes always decode to the same config, so a config compiled before
	// is found without decoding or re-encoding it (a fleet push carries the
	// same RBAC config to every server of the process).
	var key []byte
	if raw.Struct == nil && raw.Any != nil && typedconfig.Name(raw.TypeURL) == configName {
		key = raw.Any.GetValue()
		if key == nil {
			key = []byte{}
		}
		if c := engines.lookup(string(key)); c != nil {
			return c, nil
		}
	}
	m := &rbacpb.RBAC{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("rbacfilter: %w", err)
	}
	return parse(m, key)
}

// ParseOverride implements httpfilter.Filter: an RBACPerRoute whose rbac is
// unset disables RBAC on the route; otherwise its rbac replaces the
// top-level config.
func (Filter) ParseOverride(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	m := &rbacpb.RBACPerRoute{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("rbacfilter: %w", err)
	}
	if m.GetRbac() == nil {
		return disabled, nil
	}
	c, err := parse(m.GetRbac(), nil)
	if err != nil {
		return nil, fieldpath.In("rbac", err)
	}
	return c, nil
}

// parse compiles an RBAC filter config, reusing the engine of an identical
// config compiled before when one is still in use. key is m's encoding as
// received, nil when m was not received in binary form.
func parse(m *rbacpb.RBAC, key []byte) (*Config, error) {
	// gRFC A41 supports only rules; the matcher API would be silently
	// ignored by a reader of rules, which fails open: reject it.
	if m.GetMatcher() != nil {
		return nil, fieldpath.Errorf("matcher", "the matcher API is not supported, use rules")
	}
	if m.GetShadowMatcher() != nil {
		return nil, fieldpath.Errorf("shadow_matcher", "the matcher API is not supported, use shadow_rules")
	}
	// Copies of one config serialized apart (a control plane marshaling it
	// for each chain or each node) differ in the order of their policies
	// map: the deterministic encoding finds the config compiled for any of
	// them, and the received bytes become another key of it.
	canonical, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("rbacfilter: %w", err)
	}
	c, err := engines.get(string(canonical), func() (*Config, error) {
		c := &Config{}
		var err error
		if r := m.GetRules(); r != nil {
			if c.Rules, err = rbac.Compile(r); err != nil {
				return nil, fieldpath.In("rules", errors.Unwrap(err))
			}
		}
		if r := m.GetShadowRules(); r != nil {
			if c.Shadow, err = rbac.Compile(r); err != nil {
				return nil, fieldpath.In("shadow_rules", errors.Unwrap(err))
			}
		}
		return c, nil
	})
	if err == nil && key != nil && string(key) != string(canonical) {
		engines.alias(string(key), c)
	}
	return c, err
}

// BuildStep implements httpfilter.Filter: the override, when there is one,
// replaces the top-level config.
func (Filter) BuildStep(instance string, config, override httpfilter.Config) (httpfilter.Step, error) {
	c, ok := config.(*Config)
	if override != nil {
		c, ok = override.(*Config)
	}
	if !ok {
		return nil, fmt.Errorf("rbacfilter: config of type %T, want *rbacfilter.Config", config)
	}
	rules, shadow := c.Rules, c.Shadow
	if rules != nil && !rules.Enforces() && !rules.Audits() {
		rules = nil // action LOG without audit loggers: nothing to do
	}
	if shadow != nil && !shadow.Audits() {
		shadow = nil // never enforced, and nobody to tell
	}
	if rules == nil && shadow == nil {
		return nil, nil
	}
	return &Step{name: instance, rules: rules, shadow: shadow}, nil
}

// Step is the filter's per-RPC work on one route. Immutable.
type Step struct {
	name    string
	rules   *rbac.Engine
	shadow  *rbac.Engine
	counter httpfilter.Counter // nil: nothing counts
}

// The filter's metric, its attributes and their values.
const (
	// DecisionsMetric counts the RPCs an RBAC HTTP filter allowed or
	// denied, with the filter in AttrFilter and the outcome in
	// AttrDecision.
	DecisionsMetric = "grpc.xds_server.rbac.decisions"
	// AttrFilter is the name of the RBAC HTTP filter (its name in the
	// HttpConnectionManager's http_filters).
	AttrFilter = "grpc.xds_server.rbac.filter"
	// AttrDecision is DecisionAllowed or DecisionDenied.
	AttrDecision    = "grpc.xds_server.rbac.decision"
	DecisionAllowed = "allowed"
	DecisionDenied  = "denied"
)

// Outcomes of an RPC, as counted (httpfilter.Counter).
const (
	outcomeAllowed = 0
	outcomeDenied  = 1
)

// outcomes is what the filter counts: its decisions, in a metric and on
// the status page.
var outcomes = &httpfilter.Outcomes{
	Metric:      DecisionsMetric,
	Unit:        "{call}",
	Description: "RPCs allowed or denied by an RBAC HTTP filter.",
	FilterAttr:  AttrFilter,
	OutcomeAttr: AttrDecision,
	Values:      []string{DecisionAllowed, DecisionDenied},
	Title:       "RBAC decisions",
	None:        "No RBAC filter has decided an RPC.",
}

// Outcomes implements httpfilter.CountingFilter.
func (Filter) Outcomes() *httpfilter.Outcomes { return outcomes }

// WithCounter implements httpfilter.CountingStep: a copy of s whose
// decisions c counts (the enforced ones; shadow_rules are not counted).
func (s *Step) WithCounter(c httpfilter.Counter) httpfilter.Step {
	cp := *s
	cp.counter = c
	return &cp
}

// errDenied is the status of a denied RPC; it names no policy.
var errDenied = status.Error(codes.PermissionDenied, "RBAC: access denied")

// Run implements httpfilter.Step.
func (s *Step) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	ri := rpc.Request
	if s.shadow != nil {
		s.shadow.Audit(ri, s.shadow.Evaluate(ri), s.name, true)
	}
	if s.rules != nil {
		d := s.rules.Evaluate(ri)
		s.rules.Audit(ri, d, s.name, false)
		if !d.Allow {
			if s.counter != nil {
				s.counter.Count(ctx, outcomeDenied)
			}
			// The access log names the policy; the client is told none.
			return ctx, nil, responseinfo.Refused(errDenied, 0, accesslog.RBACDenied(d.MatchedPolicy))
		}
	}
	if s.counter != nil {
		s.counter.Count(ctx, outcomeAllowed)
	}
	return ctx, nil, nil
}
