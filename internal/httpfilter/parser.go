package httpfilter

import (
	"fmt"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

// Instance is one validated entry of an HttpConnectionManager's http_filters.
type Instance struct {
	// Name is the filter instance name; overrides are keyed by it.
	Name string
	// Filter is the implementation chosen by the config's type.
	Filter Filter
	// Config is the parsed top-level config.
	Config Config
	// DisabledByDefault is the entry's disabled field (Envoy): the filter
	// runs only on routes whose typed_per_filter_config has an entry for it
	// that does not disable it.
	DisabledByDefault bool
}

// Disabled is the override of a typed_per_filter_config entry that is a
// FilterConfig with disabled set (Envoy): the filter instance does nothing
// on that virtual host or route. Its config, if any, is not parsed.
var Disabled Config = disabledOverride{}

type disabledOverride struct{}

// Active reports whether instance in has work on a route whose override for
// it is override (nil: none): not when the override disables it, nor when
// it is disabled by default and the route has no override enabling it. The
// terminal filter (the router) is always active: routing cannot be turned
// off.
func (in Instance) Active(override Config) bool {
	if in.Filter.IsTerminal() {
		return true
	}
	if override == Disabled {
		return false
	}
	return !in.DisabledByDefault || override != nil
}

// clientOnlyOverrides are the override config types of gRPC's client-side
// HTTP filters (fault injection, gRFC A33; stateful session affinity, gRFC
// A55). gRFC A39: a RouteConfiguration may be shared by clients and servers,
// so an entry of a filter that runs only on the other side is not a
// validation failure: a registry without a filter for the type ignores it.
// (The server's registry has its own fault injection filter, which parses
// and validates HTTPFault overrides.)
var clientOnlyOverrides = map[string]bool{
	"envoy.extensions.filters.http.fault.v3.HTTPFault":                          true,
	"envoy.extensions.filters.http.stateful_session.v3.StatefulSessionPerRoute": true,
}

// Parser validates filter lists and overrides against a registry. It
// memoizes parsed configs by type and bytes, so identical configs in one
// resource (or in every resource a long-lived Parser sees) are parsed once
// and share one Config value. A Parser is not safe for concurrent use; make
// one per decode.
type Parser struct {
	reg     *Registry
	env     any    // given to EnvFilters and EnvOverrideFilters; see WithEnv
	envKey  string // identifies env; see WithEnv
	usedEnv bool   // see UsedEnv
	memo    map[memoKey]Config
}

type memoKey struct {
	override bool
	isStruct bool   // value is a TypedStruct's Struct, deterministically serialized
	typeURL  string // the type name, without its prefix
	value    string // serialized Any value or Struct
}

// NewParser returns a Parser over reg; a nil reg means a registry of the
// router alone (the server's registry is builtin.Registry).
func NewParser(reg *Registry) *Parser {
	if reg == nil {
		reg = NewRegistry(Router{})
	}
	return &Parser{reg: reg, memo: map[memoKey]Config{}}
}

// HTTPFilters validates an HttpConnectionManager's http_filters (gRFC A39):
// the list is non-empty, names are unique and non-empty, every config type is
// registered (an unknown type is skipped when the entry is optional, and is
// an error otherwise), every config passes its filter's validation, and the
// terminal filter (the router) is last and only last. It returns the filters
// to run, in order, without the skipped ones.
func (p *Parser) HTTPFilters(filters []*hcmpb.HttpFilter) ([]Instance, error) {
	if len(filters) == 0 {
		return nil, fmt.Errorf("http_filters: empty, want at least the router")
	}
	seen := make(map[string]bool, len(filters))
	out := make([]Instance, 0, len(filters))
	for i, hf := range filters {
		name := hf.GetName()
		if name == "" {
			return nil, fmt.Errorf("http_filters[%d]: empty name", i)
		}
		if seen[name] {
			return nil, fmt.Errorf("http_filters[%d]: duplicate filter name %q", i, name)
		}
		seen[name] = true
		if hf.GetConfigType() == nil {
			if hf.GetIsOptional() {
				continue
			}
			return nil, fmt.Errorf("http_filters[%d] (%q): typed_config is missing", i, name)
		}
		if hf.GetConfigDiscovery() != nil {
			return nil, fmt.Errorf("http_filters[%d] (%q): config_discovery is not supported", i, name)
		}
		raw, err := unwrap(hf.GetTypedConfig())
		if err != nil {
			return nil, fmt.Errorf("http_filters[%d] (%q): %w", i, name, err)
		}
		f := p.reg.lookup(raw.TypeURL, false)
		if f == nil {
			if hf.GetIsOptional() {
				continue
			}
			return nil, fmt.Errorf("http_filters[%d] (%q): unsupported filter config type %q", i, name, raw.TypeURL)
		}
		cfg, err := p.parse(f, raw, false)
		if err != nil {
			return nil, fmt.Errorf("http_filters[%d] (%q): %w", i, name, err)
		}
		out = append(out, Instance{Name: name, Filter: f, Config: cfg, DisabledByDefault: hf.GetDisabled()})
	}
	for i, in := range out {
		last := i == len(out)-1
		if in.Filter.IsTerminal() && !last {
			return nil, fmt.Errorf("http_filters: terminal filter %q is not last", in.Name)
		}
		if !in.Filter.IsTerminal() && last {
			return nil, fmt.Errorf("http_filters: last filter %q is not a terminal filter (the router)", in.Name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("http_filters: every filter is optional and unsupported, want at least the router")
	}
	return out, nil
}

// Overrides validates a typed_per_filter_config map (gRFC A39): each value,
// after looking through FilterConfig and TypedStruct, must be an override
// config of a registered filter, unless it is wrapped in a FilterConfig with
// is_optional set, in which case an unknown type is skipped. Keys naming no
// filter instance are not an error. The result is keyed by instance name; it
// is nil when m has no usable entry.
func (p *Parser) Overrides(m map[string]*anypb.Any) (map[string]Config, error) {
	var out map[string]Config
	for name, a := range m {
		cfg, ok, err := p.override(a)
		if err != nil {
			// The filter's own path starts at its config, another
			// message: keep it after the ": ".
			return nil, &fieldpath.Error{Path: fmt.Sprintf("typed_per_filter_config[%q]", name), Err: err}
		}
		if !ok {
			continue
		}
		if out == nil {
			out = make(map[string]Config, len(m))
		}
		out[name] = cfg
	}
	return out, nil
}

func (p *Parser) override(a *anypb.Any) (Config, bool, error) {
	optional := false
	if a != nil && typedconfig.Name(a.GetTypeUrl()) == typedconfig.Name(filterConfigURL) {
		fc := &routepb.FilterConfig{}
		if err := proto.Unmarshal(a.GetValue(), fc); err != nil {
			return nil, false, fmt.Errorf("malformed FilterConfig: %w", err)
		}
		if fc.GetDisabled() {
			// Envoy: the filter is disabled here and the config is
			// ignored (it may be absent).
			return Disabled, true, nil
		}
		optional = fc.GetIsOptional()
		a = fc.GetConfig()
	}
	raw, err := unwrap(a)
	if err != nil {
		return nil, false, err
	}
	f := p.reg.lookup(raw.TypeURL, true)
	if f == nil {
		if optional || clientOnlyOverrides[typedconfig.Name(raw.TypeURL)] {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("unsupported filter override config type %q", raw.TypeURL)
	}
	cfg, err := p.parse(f, raw, true)
	if err != nil {
		return nil, false, err
	}
	return cfg, true, nil
}

func (p *Parser) parse(f Filter, raw RawConfig, override bool) (Config, error) {
	var value []byte
	if raw.Struct != nil {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(raw.Struct)
		if err != nil {
			return nil, err
		}
		value = b
	} else {
		value = raw.Any.GetValue()
	}
	// The lookup converts value without copying it; only a miss stores a
	// copy. (Most lookups hit: a large Listener repeats a few configs.)
	if cfg, ok := p.memo[memoKey{override, raw.Struct != nil, typedconfig.Name(raw.TypeURL), string(value)}]; ok {
		return cfg, nil
	}
	var cfg Config
	var err error
	eo, envOverride := f.(EnvOverrideFilter)
	ec, envConfig := f.(EnvFilter)
	switch {
	case override && envOverride:
		p.usedEnv = true
		cfg, err = eo.ParseOverrideEnv(p.env, raw)
	case override:
		cfg, err = f.ParseOverride(raw)
	case envConfig:
		p.usedEnv = true
		cfg, err = ec.ParseConfigEnv(p.env, raw)
	default:
		cfg, err = f.ParseConfig(raw)
	}
	if err != nil {
		return nil, err
	}
	p.memo[memoKey{override, raw.Struct != nil, typedconfig.Name(raw.TypeURL), string(value)}] = cfg
	return cfg, nil
}
