// Package httpfilter is the registry of server-side HTTP filters (gRFC A39):
// it validates an HttpConnectionManager's http_filters list and the
// typed_per_filter_config overrides of virtual hosts and routes, handing each
// config to the parser of the filter registered for its type URL.
//
// Parsed configs are immutable and may be shared between filter chains and
// listeners. A Parser memoizes identical configs, so a Listener whose 1 000
// filter chains carry the same filter config parses it once.
//
// When a configuration is applied, each filter builds a Step per (filter
// instance, route) from its config and the route's override; the server runs
// the steps of the matched route, in order, for each RPC (gRFC A39). This
// package does not depend on gRPC: steps see an RPC as an RPC value.
package httpfilter

import (
	"errors"
	"sync"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/httpfilter/handoff"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

// filterConfigURL is the type of the per-route wrapper this package looks
// through.
const filterConfigURL = "type.googleapis.com/envoy.config.route.v3.FilterConfig"

// Filter is one server-side HTTP filter implementation.
type Filter interface {
	// ConfigTypeURLs lists the type URLs of the top-level configs this filter
	// parses. The registry routes a config to the filter by its type URL.
	ConfigTypeURLs() []string
	// OverrideTypeURLs lists the type URLs of the per-route override configs
	// this filter parses; nil when it takes no overrides.
	OverrideTypeURLs() []string
	// ParseConfig validates a top-level config (from http_filters).
	ParseConfig(RawConfig) (Config, error)
	// ParseOverride validates an override config (from
	// typed_per_filter_config).
	ParseOverride(RawConfig) (Config, error)
	// IsTerminal reports whether the filter must be last in the list (only
	// the router is).
	IsTerminal() bool
	// BuildStep returns the per-RPC step of the filter instance named
	// instance, whose top-level config is config on a route whose most specific override for
	// the instance is override (nil when it has none), as gRFC A39 asks:
	// configs are merged when a configuration is applied, never per RPC. Both
	// come from this filter's ParseConfig and ParseOverride. A nil Step means
	// the instance has nothing to do on that route. An error fails the
	// route's RPCs with UNAVAILABLE (the configuration was already accepted,
	// so validation belongs in the Parse methods). It is called on the
	// server's configuration path, once per (instance, route) of a route
	// table, and identical inputs may share one Step.
	BuildStep(instance string, config, override Config) (Step, error)
}

// RawConfig is a filter config as found in an xDS resource, with the
// FilterConfig and TypedStruct wrappers looked through; UnmarshalTo decodes
// it (a TypedStruct through its JSON form, as Envoy does).
type RawConfig = typedconfig.Config

// unwrap looks through a TypedStruct wrapper; a missing config is an error.
func unwrap(a *anypb.Any) (RawConfig, error) {
	if a == nil {
		return RawConfig{}, errors.New("config is missing")
	}
	return typedconfig.Unwrap(a)
}

// Registry maps config type URLs to filters. The zero value is empty; use
// NewRegistry. A Registry is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	configs   map[string]Filter // by type name (URL without prefix); guarded by mu
	overrides map[string]Filter // by type name; guarded by mu
	// users: the filters registered through the public package httpfilter
	// take over the types of r's own (the server's registry only).
	users bool
}

// NewRegistry returns a registry holding the given filters.
func NewRegistry(filters ...Filter) *Registry {
	r := &Registry{configs: map[string]Filter{}, overrides: map[string]Filter{}}
	for _, f := range filters {
		r.Register(f)
	}
	return r
}

// WithRegistered makes r look up the filters users register through the
// public package httpfilter before its own, and returns r. Call it before
// r is used.
func (r *Registry) WithRegistered() *Registry {
	r.users = true
	return r
}

// registered returns the filters users registered, the latest first; nil
// unless r includes them.
func (r *Registry) registered() []Filter {
	if !r.users {
		return nil
	}
	var out []Filter
	for _, a := range handoff.Filters() {
		if f, ok := a.(Filter); ok {
			out = append(out, f)
		}
	}
	return out
}

// Register adds f under each of its type URLs, replacing any filter
// registered before for the same type.
func (r *Registry) Register(f Filter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range f.ConfigTypeURLs() {
		r.configs[typedconfig.Name(u)] = f
	}
	for _, u := range f.OverrideTypeURLs() {
		r.overrides[typedconfig.Name(u)] = f
	}
}

// Filters returns the filters r holds, each once, in no particular order.
func (r *Registry) Filters() []Filter {
	out := r.registered()
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := make(map[Filter]bool)
	for _, m := range []map[string]Filter{r.configs, r.overrides} {
		for _, f := range m {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// Switchable is implemented by filters a process may turn off (gRFC A92's
// and A93's environment variables): while Enabled is false, the registry
// does not know their types, so a config of one is an unknown type (an
// optional filter is skipped, any other NACKed), as in a gRPC without the
// filter.
type Switchable interface {
	Enabled() bool
}

// lookup returns the filter for a top-level config type or, if override is
// true, for an override config type; nil for a type no filter that is on
// parses.
func (r *Registry) lookup(typeURL string, override bool) Filter {
	f := r.find(typeURL, override)
	if s, ok := f.(Switchable); ok && !s.Enabled() {
		return nil
	}
	return f
}

func (r *Registry) find(typeURL string, override bool) Filter {
	name := typedconfig.Name(typeURL)
	for _, f := range r.registered() {
		urls := f.ConfigTypeURLs()
		if override {
			// As for r's own: an override type first, then a filter
			// that may accept its top-level type as an override.
			urls = append(f.OverrideTypeURLs(), urls...)
		}
		for _, u := range urls {
			if typedconfig.Name(u) == name {
				return f
			}
		}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if override {
		if f, ok := r.overrides[typedconfig.Name(typeURL)]; ok {
			return f
		}
		// A filter may accept its top-level type as an override; its
		// ParseOverride decides (gRFC A39).
	}
	return r.configs[typedconfig.Name(typeURL)]
}
