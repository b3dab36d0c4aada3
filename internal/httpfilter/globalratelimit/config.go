package globalratelimit

import (
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/ratelimitdesc"
)

// DefaultTimeout is Envoy's timeout of a ShouldRateLimit call.
const DefaultTimeout = 20 * time.Millisecond

// Request types of the filter (request_type).
const (
	requestBoth = iota
	requestInternal
	requestExternal
)

// Config is a validated RateLimit. Immutable.
type Config struct {
	service *grpcservice.Service

	domain      string
	stage       uint32
	requestType int
	timeout     time.Duration // 0: none of the filter's own

	failureModeDeny bool
	denyPercent     *httpfilter.Fraction // failure_mode_deny_percent; nil: unset

	limitedCode  codes.Code // rate_limited_status mapped (or RESOURCE_EXHAUSTED)
	errorCode    codes.Code // status_on_error mapped
	xHeaders     bool       // enable_x_ratelimit_headers: DRAFT_VERSION_03
	noRatelimitd bool       // disable_x_envoy_ratelimited_header
	retryAfter   bool       // enable_retry_after_header

	enabled, enforced httpfilter.Fraction
	rateLimits        *ratelimitdesc.Policy // the filter's own rate_limits; nil: none
	localCluster      string                // the bootstrap node's cluster (source_cluster); "": unknown
}

// perRoute is a validated RateLimitPerRoute. Immutable.
type perRoute struct {
	domain     string                // "" keeps the filter's
	rateLimits *ratelimitdesc.Policy // nil: none
	vh         rlpb.RateLimitPerRoute_VhRateLimitsOptions
}

func parseConfig(env *grpcservice.Env, m *rlpb.RateLimit) (*Config, error) {
	if m.GetDomain() == "" {
		return nil, fieldpath.Errorf("domain", "empty")
	}
	c := &Config{
		domain:          m.GetDomain(),
		timeout:         DefaultTimeout,
		failureModeDeny: m.GetFailureModeDeny(),
		noRatelimitd:    m.GetDisableXEnvoyRatelimitedHeader(),
		retryAfter:      m.GetEnableRetryAfterHeader(),
		enabled:         httpfilter.FractionAll,
		enforced:        httpfilter.FractionAll,
	}
	if env != nil {
		c.localCluster = env.LocalCluster
	}
	if c.stage = m.GetStage(); c.stage > ratelimitdesc.MaxStage {
		return nil, fieldpath.Errorf("stage", "%d, want at most %d", c.stage, ratelimitdesc.MaxStage)
	}
	switch m.GetRequestType() {
	case "", "both":
	case "internal":
		c.requestType = requestInternal
	case "external":
		c.requestType = requestExternal
	default:
		return nil, fieldpath.Errorf("request_type", "%q, want internal, external or both", m.GetRequestType())
	}
	if t := m.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return nil, fieldpath.Errorf("timeout", "%v", err)
		}
		if c.timeout = t.AsDuration(); c.timeout < 0 {
			return nil, fieldpath.Errorf("timeout", "%v, want a duration of at least 0", c.timeout)
		}
	}
	switch v := m.GetEnableXRatelimitHeaders(); v {
	case rlpb.RateLimit_OFF:
	case rlpb.RateLimit_DRAFT_VERSION_03:
		c.xHeaders = true
	default:
		return nil, fieldpath.Errorf("enable_x_ratelimit_headers", "unknown value %d", int32(v))
	}
	limited, err := httpStatus("rate_limited_status", m.GetRateLimitedStatus(), 429, true)
	if err != nil {
		return nil, err
	}
	c.limitedCode = codes.Code(httpfilter.GRPCCodeOfHTTP(limited))
	// Envoy sends retry-after with 429s only.
	c.retryAfter = c.retryAfter && limited == 429
	if m.GetRateLimitedAsResourceExhausted() {
		c.limitedCode = codes.ResourceExhausted
	}
	onError, err := httpStatus("status_on_error", m.GetStatusOnError(), 500, false)
	if err != nil {
		return nil, err
	}
	c.errorCode = codes.Code(httpfilter.GRPCCodeOfHTTP(onError))
	if len(m.GetResponseHeadersToAdd()) > 0 {
		return nil, fieldpath.Errorf("response_headers_to_add", "not supported (substitution formats); the rate limit service's own response_headers_to_add are sent")
	}
	if c.enabled, err = httpfilter.ParseRuntimeFraction("filter_enabled", m.GetFilterEnabled(), httpfilter.FractionAll); err != nil {
		return nil, err
	}
	if c.enforced, err = httpfilter.ParseRuntimeFraction("filter_enforced", m.GetFilterEnforced(), httpfilter.FractionAll); err != nil {
		return nil, err
	}
	if dp := m.GetFailureModeDenyPercent(); dp != nil {
		f, err := httpfilter.ParseRuntimeFraction("failure_mode_deny_percent", dp, httpfilter.Fraction{})
		if err != nil {
			return nil, err
		}
		c.denyPercent = &f
	}
	if c.rateLimits, err = ratelimitdesc.Compile(m.GetRateLimits()); err != nil {
		return nil, fieldpath.In("rate_limits", err)
	}
	// stat_prefix names Envoy's stats (the server's are per filter
	// instance); metadata_namespace is where Envoy puts the service's
	// dynamic metadata, which nothing reads on a gRPC server. Both are
	// accepted and change nothing.
	rls := m.GetRateLimitService()
	if rls == nil {
		return nil, fieldpath.Errorf("rate_limit_service", "missing")
	}
	if v := rls.GetTransportApiVersion(); v != corepb.ApiVersion_V3 {
		return nil, fieldpath.Errorf("rate_limit_service.transport_api_version", "%v, want V3 (Envoy refuses AUTO and V2)", v)
	}
	if rls.GetGrpcService() == nil {
		return nil, fieldpath.Errorf("rate_limit_service.grpc_service", "missing")
	}
	// Last, so that a config with several problems reports its own before
	// the trust check's.
	if c.service, err = grpcservice.Parse(env, rls.GetGrpcService()); err != nil {
		return nil, fieldpath.In("rate_limit_service.grpc_service", err)
	}
	return c, nil
}

func parseOverride(m *rlpb.RateLimitPerRoute) (*perRoute, error) {
	p := &perRoute{domain: m.GetDomain(), vh: m.GetVhRateLimits()}
	if _, ok := rlpb.RateLimitPerRoute_VhRateLimitsOptions_name[int32(p.vh)]; !ok {
		return nil, fieldpath.Errorf("vh_rate_limits", "unknown value %d", int32(p.vh))
	}
	// override_option is about limit overrides from dynamic metadata, which
	// a gRPC server has none of.
	if o := m.GetOverrideOption(); o != rlpb.RateLimitPerRoute_DEFAULT {
		if _, ok := rlpb.RateLimitPerRoute_OverrideOptions_name[int32(o)]; !ok {
			return nil, fieldpath.Errorf("override_option", "unknown value %d", int32(o))
		}
	}
	var err error
	if p.rateLimits, err = ratelimitdesc.Compile(m.GetRateLimits()); err != nil {
		return nil, fieldpath.In("rate_limits", err)
	}
	return p, nil
}

// httpStatus returns the code of an HttpStatus: def when unset (or, with
// below400Default, below 400, as Envoy does for rate_limited_status).
func httpStatus(field string, s *typepb.HttpStatus, def int, below400Default bool) (int, error) {
	if s == nil {
		return def, nil
	}
	code := s.GetCode()
	if code == typepb.StatusCode_Empty {
		return def, nil
	}
	if _, ok := typepb.StatusCode_name[int32(code)]; !ok {
		return 0, fieldpath.Errorf(field+".code", "unknown HTTP status %d", int32(code))
	}
	if below400Default && code < 400 {
		return def, nil
	}
	return int(code), nil
}
