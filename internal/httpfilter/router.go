package httpfilter

import (
	"errors"

	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

// RouterTypeURL is the config type of the router filter.
const RouterTypeURL = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"

// Router is the router filter (gRFC A39): the terminal filter, which on a
// server means "route the RPC with the matched route". It has no settings
// gRPC honours; its config is only checked to be a Router message.
type Router struct{}

// RouterConfig is the parsed router config; it carries nothing.
type RouterConfig struct{}

// ConfigTypeURLs implements Filter.
func (Router) ConfigTypeURLs() []string { return []string{RouterTypeURL} }

// OverrideTypeURLs implements Filter: the router takes no overrides.
func (Router) OverrideTypeURLs() []string { return nil }

// ParseConfig implements Filter.
func (Router) ParseConfig(raw RawConfig) (Config, error) {
	if err := raw.UnmarshalTo(&routerpb.Router{}); err != nil {
		return nil, err
	}
	return RouterConfig{}, nil
}

// ParseOverride implements Filter.
func (Router) ParseOverride(RawConfig) (Config, error) {
	return nil, errors.New("the router filter does not take per-route overrides")
}

// IsTerminal implements Filter.
func (Router) IsTerminal() bool { return true }

// BuildStep implements Filter: the router's work (the route match and the
// action check, which come before every other filter's step) is built into
// the server, so it has no step.
func (Router) BuildStep(string, Config, Config) (Step, error) { return nil, nil }
