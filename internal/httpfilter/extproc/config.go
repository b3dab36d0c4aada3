package extproc

import (
	"errors"
	"fmt"
	"strings"
	"time"

	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/metadata"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/matcher"
)

// configLogger is the xds component logger (the warnings of a parse).
var configLogger = grpclog.Component("xds")

// DefaultDeferredCloseTimeout is deferred_close_timeout when it is unset
// (gRFC A93).
const DefaultDeferredCloseTimeout = 5 * time.Second

// Mode is a processing_mode as gRPC applies it (gRFC A93): which events
// of an RPC go to the processor. Comparable.
type Mode struct {
	// RequestHeaders, ResponseHeaders, ResponseTrailers: the header
	// mode is SEND (DEFAULT is SEND for the headers, SKIP for the
	// trailers).
	RequestHeaders, ResponseHeaders, ResponseTrailers bool
	// RequestBody, ResponseBody: the body mode is GRPC (true) or NONE
	// (false), the only two gRPC supports.
	RequestBody, ResponseBody bool
}

// String describes m for the status page and logs: "sends request
// headers, response headers" (in the order of an RPC's events), or "sends
// no event".
func (m Mode) String() string {
	var events []string
	for _, e := range []struct {
		on   bool
		name string
	}{
		{m.RequestHeaders, "request headers"},
		{m.RequestBody, "request messages"},
		{m.ResponseHeaders, "response headers"},
		{m.ResponseBody, "response messages"},
		{m.ResponseTrailers, "response trailers"},
	} {
		if e.on {
			events = append(events, e.name)
		}
	}
	if len(events) == 0 {
		return "sends no event"
	}
	return "sends " + strings.Join(events, ", ")
}

// Config is a validated ExternalProcessor. Immutable: what its fields
// refer to must not be modified.
type Config struct {
	// Service is grpc_service, validated as gRFC A102 says under the
	// trust of the server that sent it.
	Service *grpcservice.Service
	// FailureModeAllow is failure_mode_allow.
	FailureModeAllow bool
	// Mode is processing_mode.
	Mode Mode
	// AllowModeOverride is allow_mode_override.
	AllowModeOverride bool
	// AllowedOverrideModes is allowed_override_modes; nil: any override
	// is honored (when AllowModeOverride). Always nil when
	// AllowModeOverride is false (gRFC A93: the list is then ignored).
	AllowedOverrideModes []Mode
	// RequestAttributes and ResponseAttributes are the names of
	// request_attributes and response_attributes that the server
	// supports (SupportedAttribute), in config order, without
	// duplicates; the others are dropped (gRFC A93: ignored).
	RequestAttributes, ResponseAttributes []string
	// Rules is mutation_rules.
	Rules MutationRules
	// Allowed and Disallowed are forward_rules.allowed_headers and
	// disallowed_headers; nil: unset.
	Allowed, Disallowed []matcher.StringMatcher
	// DisableImmediateResponse is disable_immediate_response.
	DisableImmediateResponse bool
	// Observability is observability_mode.
	Observability bool
	// DeferredCloseTimeout is deferred_close_timeout, 5 s when unset.
	DeferredCloseTimeout time.Duration
}

// Override is a validated ExtProcPerRoute's overrides. Immutable.
type Override struct {
	// Mode is overrides.processing_mode; nil: not set.
	Mode *Mode
	// Service is overrides.grpc_service; nil: not set.
	Service *grpcservice.Service
	// InitialMetadata is overrides.grpc_initial_metadata; nil: none.
	InitialMetadata metadata.MD
	// RequestAttributes and ResponseAttributes are the supported names of
	// overrides.request_attributes and response_attributes; they replace
	// the config's when Has... is set (the override's list was not
	// empty, even if no name of it is supported).
	RequestAttributes, ResponseAttributes       []string
	HasRequestAttributes, HasResponseAttributes bool
	// FailureModeAllow is overrides.failure_mode_allow; nil: not set.
	FailureModeAllow *bool
}

// Merge returns the config for a route: c with o's fields applied (o may
// be nil). c is not modified; the result may share what c and o refer to.
//
// A set processing_mode, grpc_service, request_attributes,
// response_attributes or failure_mode_allow replaces the config's. The
// grpc_initial_metadata is merged into the initial_metadata of the
// service the route uses (the override's grpc_service when set, else the
// config's), as Envoy merges it: a key the override names takes the
// override's values, the others keep theirs.
func (c *Config) Merge(o *Override) *Config {
	if o == nil || o.isEmpty() {
		return c
	}
	out := *c
	if o.Mode != nil {
		out.Mode = *o.Mode
	}
	if o.Service != nil {
		out.Service = o.Service
	}
	if len(o.InitialMetadata) > 0 && out.Service != nil {
		s := *out.Service
		md := metadata.MD{}
		for k, v := range s.Metadata {
			md[k] = v
		}
		for k, v := range o.InitialMetadata {
			md[k] = v
		}
		s.Metadata = md
		out.Service = &s
	}
	if o.HasRequestAttributes {
		out.RequestAttributes = o.RequestAttributes
	}
	if o.HasResponseAttributes {
		out.ResponseAttributes = o.ResponseAttributes
	}
	if o.FailureModeAllow != nil {
		out.FailureModeAllow = *o.FailureModeAllow
	}
	return &out
}

func (o *Override) isEmpty() bool {
	return o.Mode == nil && o.Service == nil && len(o.InitialMetadata) == 0 &&
		!o.HasRequestAttributes && !o.HasResponseAttributes && o.FailureModeAllow == nil
}

// OverrideAllowed reports whether c lets the processor's mode_override m
// apply to an RPC (gRFC A93): only with allow_mode_override, and then,
// when allowed_override_modes is set, only if m is one of them,
// request_header_mode aside (the request headers were sent before any
// override can arrive). Modes are compared as gRPC applies them, defaults
// resolved: DEFAULT and SEND are the same header mode.
func (c *Config) OverrideAllowed(m Mode) bool {
	if !c.AllowModeOverride {
		return false
	}
	if c.AllowedOverrideModes == nil {
		return true
	}
	m.RequestHeaders = false
	for _, a := range c.AllowedOverrideModes {
		a.RequestHeaders = false
		if a == m {
			return true
		}
	}
	return false
}

// MutationRules is mutation_rules as gRPC applies it (gRFC A93), the
// same rules as ext_authz's (httpfilter.MutationRules).
type MutationRules = httpfilter.MutationRules

// ParseMode validates a ProcessingMode (a config's processing_mode, an
// entry of allowed_override_modes, or a processor's mode_override) as
// gRFC A93 says: header modes DEFAULT, SEND or SKIP (DEFAULT is SEND for
// request and response headers, SKIP for response trailers), body modes
// NONE or GRPC; request_trailer_mode is ignored (gRPC sends no request
// trailers). Errors name the field relative to m.
func ParseMode(m *extprocpb.ProcessingMode) (Mode, error) {
	var out Mode
	var err error
	if out.RequestHeaders, err = headerMode("request_header_mode", m.GetRequestHeaderMode(), true); err != nil {
		return Mode{}, err
	}
	if out.ResponseHeaders, err = headerMode("response_header_mode", m.GetResponseHeaderMode(), true); err != nil {
		return Mode{}, err
	}
	if out.ResponseTrailers, err = headerMode("response_trailer_mode", m.GetResponseTrailerMode(), false); err != nil {
		return Mode{}, err
	}
	if out.RequestBody, err = bodyMode("request_body_mode", m.GetRequestBodyMode()); err != nil {
		return Mode{}, err
	}
	if out.ResponseBody, err = bodyMode("response_body_mode", m.GetResponseBodyMode()); err != nil {
		return Mode{}, err
	}
	return out, nil
}

func headerMode(field string, v extprocpb.ProcessingMode_HeaderSendMode, byDefault bool) (bool, error) {
	switch v {
	case extprocpb.ProcessingMode_DEFAULT:
		return byDefault, nil
	case extprocpb.ProcessingMode_SEND:
		return true, nil
	case extprocpb.ProcessingMode_SKIP:
		return false, nil
	}
	return false, fieldpath.Errorf(field, "unknown value %d, want DEFAULT, SEND or SKIP", int32(v))
}

func bodyMode(field string, v extprocpb.ProcessingMode_BodySendMode) (bool, error) {
	switch v {
	case extprocpb.ProcessingMode_NONE:
		return false, nil
	case extprocpb.ProcessingMode_GRPC:
		return true, nil
	}
	if name, ok := extprocpb.ProcessingMode_BodySendMode_name[int32(v)]; ok {
		return false, fieldpath.Errorf(field, "%s is not supported (gRFC A93: NONE or GRPC)", name)
	}
	return false, fieldpath.Errorf(field, "unknown value %d is not supported (gRFC A93: NONE or GRPC)", int32(v))
}

// ParseConfig validates an ExternalProcessor (gRFC A93) sent by the
// management server env describes (nil: unknown, as when a Listener is
// checked offline; see grpcservice.Parse). Errors name the field.
func ParseConfig(env *grpcservice.Env, m *extprocpb.ExternalProcessor) (*Config, error) {
	if m.GetGrpcService() == nil {
		if m.GetHttpService() != nil {
			return nil, errors.New("grpc_service: missing; http_service is not supported (gRFC A93: gRPC calls the processor over gRPC only)")
		}
		return nil, errors.New("grpc_service: missing (gRFC A93 requires it)")
	}
	if m.GetProcessingMode() == nil {
		return nil, errors.New("processing_mode: missing (gRFC A93 requires it)")
	}
	c := &Config{
		FailureModeAllow:         m.GetFailureModeAllow(),
		AllowModeOverride:        m.GetAllowModeOverride(),
		DisableImmediateResponse: m.GetDisableImmediateResponse(),
		Observability:            m.GetObservabilityMode(),
		DeferredCloseTimeout:     DefaultDeferredCloseTimeout,
	}
	var err error
	if c.Mode, err = ParseMode(m.GetProcessingMode()); err != nil {
		return nil, fieldpath.In("processing_mode", err)
	}
	if c.AllowModeOverride {
		// gRFC A93: ignored unless allow_mode_override is set.
		for i, pm := range m.GetAllowedOverrideModes() {
			mode, err := ParseMode(pm)
			if err != nil {
				return nil, fieldpath.In(fmt.Sprintf("allowed_override_modes[%d]", i), err)
			}
			c.AllowedOverrideModes = append(c.AllowedOverrideModes, mode)
		}
	}
	c.RequestAttributes = supportedAttributes(m.GetRequestAttributes())
	c.ResponseAttributes = supportedAttributes(m.GetResponseAttributes())
	if c.Rules, err = parseRules(m.GetMutationRules()); err != nil {
		return nil, fieldpath.In("mutation_rules", err)
	}
	if fr := m.GetForwardRules(); fr != nil {
		if c.Allowed, err = stringMatchers("forward_rules.allowed_headers", fr.GetAllowedHeaders()); err != nil {
			return nil, err
		}
		if c.Disallowed, err = stringMatchers("forward_rules.disallowed_headers", fr.GetDisallowedHeaders()); err != nil {
			return nil, err
		}
	}
	if d := m.GetDeferredCloseTimeout(); d != nil {
		if err := d.CheckValid(); err != nil {
			return nil, fieldpath.Errorf("deferred_close_timeout", "%v", err)
		}
		if c.DeferredCloseTimeout = d.AsDuration(); c.DeferredCloseTimeout <= 0 {
			return nil, fieldpath.Errorf("deferred_close_timeout", "%v, want a positive duration (gRFC A93)", c.DeferredCloseTimeout)
		}
	}
	if m.GetProcessingRequestModifier() != nil {
		return nil, errProcessingRequestModifier("processing_request_modifier")
	}
	// Ignored without a word, as gRFC A93 says: message_timeout,
	// max_message_timeout, http_service (with grpc_service), stat_prefix,
	// filter_metadata, metadata_options, on_processing_response,
	// disable_clear_route_cache, route_cache_action,
	// send_body_without_waiting_for_header_response. Ignored too, A93
	// being silent: allow_content_length_header (gRPC frames its own
	// messages, and no mutation of content-length changes that) and
	// emit_client_span (no tracing of its own).
	//
	// Last, so that a config with several problems reports its own before
	// the trust check's.
	if c.Service, err = grpcservice.Parse(env, m.GetGrpcService()); err != nil {
		return nil, fieldpath.In("grpc_service", err)
	}
	if m.GetStatusOnError() != nil {
		// Ignored, with a word: the control plane may expect it to apply.
		// Ignoring it lets no RPC through that it would refuse: a failure
		// fails the RPC, with A93's UNAVAILABLE instead.
		configLogger.Warningf("xds: ext_proc: ExternalProcessor: status_on_error ignored (gRFC A93 fails the RPC with UNAVAILABLE)")
	}
	return c, nil
}

// ParseOverride validates an ExtProcPerRoute (gRFC A93) sent by the
// management server env describes. Its disabled field is ignored (A93: a
// FilterConfig's disabled turns the filter off), and so is an
// ExtProcPerRoute without overrides: both give an empty Override.
func ParseOverride(env *grpcservice.Env, m *extprocpb.ExtProcPerRoute) (*Override, error) {
	out := &Override{}
	o := m.GetOverrides()
	if o == nil {
		if m.GetDisabled() {
			configLogger.Warningf("xds: ext_proc: ExtProcPerRoute: disabled ignored (gRFC A93: a FilterConfig's disabled turns the filter off)")
		}
		return out, nil
	}
	if o.GetAsyncMode() {
		return nil, errors.New("overrides.async_mode: true is not supported: the filter would not wait for the processor, so a mutation or an immediate_response meant to apply would be skipped")
	}
	if o.GetProcessingRequestModifier() != nil {
		return nil, errProcessingRequestModifier("overrides.processing_request_modifier")
	}
	if pm := o.GetProcessingMode(); pm != nil {
		mode, err := ParseMode(pm)
		if err != nil {
			return nil, fieldpath.In("overrides.processing_mode", err)
		}
		out.Mode = &mode
	}
	if l := o.GetRequestAttributes(); len(l) > 0 {
		out.RequestAttributes, out.HasRequestAttributes = supportedAttributes(l), true
	}
	if l := o.GetResponseAttributes(); len(l) > 0 {
		out.ResponseAttributes, out.HasResponseAttributes = supportedAttributes(l), true
	}
	for i, hv := range o.GetGrpcInitialMetadata() {
		key, value, err := grpcservice.HeaderValue(hv)
		if err != nil {
			return nil, fieldpath.In(fmt.Sprintf("overrides.grpc_initial_metadata[%d]", i), err)
		}
		if out.InitialMetadata == nil {
			out.InitialMetadata = metadata.MD{}
		}
		out.InitialMetadata.Append(key, value)
	}
	if f := o.GetFailureModeAllow(); f != nil {
		v := f.GetValue()
		out.FailureModeAllow = &v
	}
	// Ignored: metadata_options (gRFC A93), emit_client_span (as in the
	// top-level config).
	if gs := o.GetGrpcService(); gs != nil {
		s, err := grpcservice.Parse(env, gs)
		if err != nil {
			return nil, fieldpath.In("overrides.grpc_service", err)
		}
		out.Service = s
	}
	return out, nil
}

func errProcessingRequestModifier(field string) error {
	return fieldpath.Errorf(field, "not supported: an extension that changes what is sent to the processor cannot be run by gRPC, and ignoring it would send what the configuration does not mean to")
}

// parseConfigRaw unmarshals and validates a top-level config; env is the
// *grpcservice.Env the parser was given (httpfilter.EnvFilter), or nil.
func parseConfigRaw(env any, raw httpfilter.RawConfig) (*Config, error) {
	m := &extprocpb.ExternalProcessor{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("malformed ExternalProcessor: %w", err)
	}
	e, _ := env.(*grpcservice.Env)
	return ParseConfig(e, m)
}

// parseOverrideRaw unmarshals and validates an override; env is the
// *grpcservice.Env the parser was given (httpfilter.EnvOverrideFilter), or
// nil.
func parseOverrideRaw(env any, raw httpfilter.RawConfig) (*Override, error) {
	m := &extprocpb.ExtProcPerRoute{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("malformed ExtProcPerRoute: %w", err)
	}
	e, _ := env.(*grpcservice.Env)
	return ParseOverride(e, m)
}

// stringMatchers compiles a forward_rules list. An unset list is nil; a
// set one must have patterns (Envoy's min_items: 1): an empty
// allowed_headers could mean "forward nothing" or "forward everything".
func stringMatchers(field string, l *matcherpb.ListStringMatcher) ([]matcher.StringMatcher, error) {
	if l == nil {
		return nil, nil
	}
	if len(l.GetPatterns()) == 0 {
		return nil, fieldpath.Errorf(field+".patterns", "empty, want at least one pattern (Envoy's min_items: 1)")
	}
	out := make([]matcher.StringMatcher, len(l.GetPatterns()))
	for i, p := range l.GetPatterns() {
		m, err := matcher.NewStringMatcher(p)
		if err != nil {
			return nil, fieldpath.In(fmt.Sprintf("%s.patterns[%d]", field, i), err)
		}
		out[i] = m
	}
	return out, nil
}

func parseRules(r *mutationpb.HeaderMutationRules) (MutationRules, error) {
	return httpfilter.ParseMutationRules(r)
}
