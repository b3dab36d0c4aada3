// Package localratelimit is Envoy's local rate limit HTTP filter
// (envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit) run by
// an xDS server: a token bucket per filter instance (or per route, or per
// connection) refuses the RPCs that find it empty, before any interceptor
// and before the method is looked up. The server's registry
// (internal/httpfilter/builtin) holds it.
//
// The per-RPC path takes one clock reading and one compare-and-swap on the
// bucket, with no lock and no allocation for an RPC it lets through. A
// bucket lives in its Listener's filter state (httpfilter.State), keyed by
// the filter instance and the bucket's config, so configuration updates
// that leave those unchanged keep its tokens.
package localratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	localratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
)

// TypeURL is the type of the filter's config and of its per-route
// override, which is a whole config of its own.
const TypeURL = "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"

// minFillInterval is the shortest fill_interval Envoy accepts.
const minFillInterval = 50 * time.Millisecond

// limitedMessage is the status message of a refused RPC, Envoy's local
// reply body.
const limitedMessage = "local_rate_limited"

// Filter is the local rate limit filter.
type Filter struct{}

// Config is a parsed LocalRateLimit, top-level or per-route. Immutable.
type Config struct {
	// spec is the token bucket; hasBucket is false when the config has
	// none (allowed at the top level only: the filter then limits nothing
	// but the routes that override it).
	spec      bucketSpec
	hasBucket bool
	perConn   bool
	// key identifies the bucket: a step of the same filter instance with
	// the same key shares its tokens (see bucketKey).
	key string
	// enabled and enforced are filter_enabled and filter_enforced (their
	// default values; 0% when unset).
	enabled, enforced httpfilter.Fraction
	// err is the status of a refused RPC.
	err error
	// trailers are response_headers_to_add applied to no metadata: the
	// trailing metadata of a refused RPC; nil when none.
	trailers metadata.MD
	// retryAfter: a refused RPC with HTTP status 429 gets a retry-after
	// trailer (enable_retry_after_header).
	retryAfter bool
	// shadowHeaders are request_headers_to_add_when_not_enforced.
	shadowHeaders headerOps
}

// ConfigTypeURLs implements httpfilter.Filter.
func (Filter) ConfigTypeURLs() []string { return []string{TypeURL} }

// OverrideTypeURLs implements httpfilter.Filter: the per-route override is
// a LocalRateLimit too.
func (Filter) OverrideTypeURLs() []string { return []string{TypeURL} }

// IsTerminal implements httpfilter.Filter.
func (Filter) IsTerminal() bool { return false }

// Needs implements httpfilter.NeedsReporter: a refused RPC whose config
// adds trailing metadata is failed after the tap, and per-connection
// buckets live in the connection's state.
func (Filter) Needs() httpfilter.Needs { return httpfilter.Needs{After: true, ConnState: true} }

// ParseConfig implements httpfilter.Filter.
func (Filter) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return parseRaw(raw, false)
}

// ParseOverride implements httpfilter.Filter: a per-route config replaces
// the filter's config on its virtual host or route, and must have a bucket.
func (Filter) ParseOverride(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return parseRaw(raw, true)
}

func parseRaw(raw httpfilter.RawConfig, perRoute bool) (*Config, error) {
	m := &localratelimitpb.LocalRateLimit{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("localratelimit: %w", err)
	}
	c, err := parse(m, perRoute)
	if err != nil {
		return nil, fmt.Errorf("localratelimit: %w", err)
	}
	return c, nil
}

// parse validates m as Envoy does (its proto constraints and the filter's
// own checks) and rejects what this filter does not implement, so that no
// field is silently ignored but those documented as having no effect
// without descriptors.
func parse(m *localratelimitpb.LocalRateLimit, perRoute bool) (*Config, error) {
	if err := unsupported(m); err != nil {
		return nil, err
	}
	if m.GetStatPrefix() == "" {
		return nil, errors.New("stat_prefix: empty, want a name")
	}
	if m.GetStage() > 10 {
		return nil, fmt.Errorf("stage: %d, want at most 10", m.GetStage())
	}
	if v := m.GetMaxDynamicDescriptors(); v != nil && v.GetValue() < 1 {
		return nil, errors.New("max_dynamic_descriptors: 0, want at least 1")
	}
	if _, ok := ratelimitpb.VhRateLimitsOptions_name[int32(m.GetVhRateLimits())]; !ok {
		return nil, fmt.Errorf("vh_rate_limits: unknown value %d", m.GetVhRateLimits())
	}
	c := &Config{perConn: m.GetLocalRateLimitPerDownstreamConnection(), retryAfter: m.GetEnableRetryAfterHeader()}
	if err := parseBucket(m.GetTokenBucket(), perRoute, c); err != nil {
		return nil, err
	}
	var err error
	if c.enabled, err = httpfilter.ParseRuntimeFraction("filter_enabled", m.GetFilterEnabled(), httpfilter.Fraction{}); err != nil {
		return nil, err
	}
	if c.enforced, err = httpfilter.ParseRuntimeFraction("filter_enforced", m.GetFilterEnforced(), httpfilter.Fraction{}); err != nil {
		return nil, err
	}
	httpStatus, err := parseStatus(m.GetStatus())
	if err != nil {
		return nil, err
	}
	code := codes.Code(httpfilter.GRPCCodeOfHTTP(httpStatus))
	if m.GetRateLimitedAsResourceExhausted() {
		code = codes.ResourceExhausted
	}
	c.err = responseinfo.Refused(status.Error(code, limitedMessage), accesslog.FlagRateLimited, accesslog.DetailsLocalRateLimited)
	c.retryAfter = c.retryAfter && httpStatus == 429
	ops, err := parseHeaders("response_headers_to_add", m.GetResponseHeadersToAdd())
	if err != nil {
		return nil, err
	}
	c.trailers = ops.metadata()
	if c.shadowHeaders, err = parseHeaders("request_headers_to_add_when_not_enforced", m.GetRequestHeadersToAddWhenNotEnforced()); err != nil {
		return nil, err
	}
	c.key = bucketKey(m, perRoute)
	return c, nil
}

// unsupported rejects the fields this filter does not implement and whose
// absence of effect would change what the control plane asked for.
func unsupported(m *localratelimitpb.LocalRateLimit) error {
	switch {
	case len(m.GetDescriptors()) > 0:
		return errors.New("descriptors: not supported")
	case len(m.GetRateLimits()) > 0:
		return errors.New("rate_limits: not supported")
	case m.GetLocalClusterRateLimit() != nil:
		return errors.New("local_cluster_rate_limit: not supported (buckets are never shared between servers)")
	case m.GetEnableXRatelimitHeaders() != ratelimitpb.XRateLimitHeadersRFCVersion_OFF:
		return fmt.Errorf("enable_x_ratelimit_headers: %v is not supported", m.GetEnableXRatelimitHeaders())
	}
	return nil
}

// parseBucket validates token_bucket into c: fill_interval at least 50 ms
// (Envoy), tokens_per_fill above 0 (default 1), max_tokens any (0 refuses
// every RPC). Required in a per-route config.
func parseBucket(tb *typepb.TokenBucket, perRoute bool, c *Config) error {
	if tb == nil {
		if perRoute {
			return errors.New("token_bucket: missing, a per-route config needs one")
		}
		return nil
	}
	tpf := uint32(1)
	if w := tb.GetTokensPerFill(); w != nil {
		if w.GetValue() == 0 {
			return errors.New("token_bucket.tokens_per_fill: 0, want more than 0")
		}
		tpf = w.GetValue()
	}
	fi := tb.GetFillInterval()
	if fi == nil {
		return errors.New("token_bucket.fill_interval: missing")
	}
	if err := fi.CheckValid(); err != nil {
		return fmt.Errorf("token_bucket.fill_interval: %v", err)
	}
	if d := fi.AsDuration(); d < minFillInterval {
		return fmt.Errorf("token_bucket.fill_interval: %v, want at least %v", d, minFillInterval)
	}
	c.spec = newSpec(tb.GetMaxTokens(), tpf, fi.AsDuration())
	c.hasBucket = true
	return nil
}

// parseStatus returns the HTTP status of a refused RPC: 429 when unset or
// below 400 (Envoy).
func parseStatus(s *typepb.HttpStatus) (int, error) {
	if s == nil {
		return 429, nil
	}
	code := s.GetCode()
	if _, ok := typepb.StatusCode_name[int32(code)]; !ok || code == typepb.StatusCode_Empty {
		return 0, fmt.Errorf("status.code: %d is not an HTTP status Envoy defines", code)
	}
	if code < 400 {
		return 429, nil
	}
	return int(code), nil
}

// bucketKey identifies a config's bucket among those of one filter
// instance: whether it is per-route, the stat prefix, the bucket's shape and
// whether it is per connection. Other fields (enabled and enforced
// fractions, status, headers) can change without losing the tokens.
func bucketKey(m *localratelimitpb.LocalRateLimit, perRoute bool) string {
	level := "filter"
	if perRoute {
		level = "route"
	}
	tb := m.GetTokenBucket()
	tpf := uint32(1)
	if w := tb.GetTokensPerFill(); w != nil {
		tpf = w.GetValue()
	}
	return level + "|" + strconv.Quote(m.GetStatPrefix()) + "|" +
		strconv.FormatUint(uint64(tb.GetMaxTokens()), 10) + "|" +
		strconv.FormatUint(uint64(tpf), 10) + "|" +
		tb.GetFillInterval().AsDuration().String() + "|" +
		strconv.FormatBool(m.GetLocalRateLimitPerDownstreamConnection())
}
