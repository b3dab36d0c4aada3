package globalratelimit

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/ratelimitdesc"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
)

// Headers the filter sends (Envoy's names).
const (
	headerRateLimited = "x-envoy-ratelimited"
	headerLimit       = "x-ratelimit-limit"
	headerRemaining   = "x-ratelimit-remaining"
	headerReset       = "x-ratelimit-reset"
	headerRetryAfter  = "retry-after"
)

// step is the filter's work on one route. Immutable.
type step struct {
	cfg      *Config
	domain   string
	policies []policy
	route    httpfilter.RouteInfo
	counter  httpfilter.Counter // nil: nothing counts
}

// WithCounter implements httpfilter.CountingStep.
func (s *step) WithCounter(c httpfilter.Counter) httpfilter.Step {
	n := *s
	n.counter = c
	return &n
}

func (s *step) count(ctx context.Context, outcome int) {
	if s.counter != nil {
		s.counter.Count(ctx, outcome)
	}
}

// Run builds the RPC's descriptors in the tap handle; the call is left for
// after it. An RPC that yields no descriptor is let through without a call
// and counts nothing, as in Envoy.
func (s *step) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	if !s.cfg.enabled.Hit() {
		return ctx, nil, nil
	}
	req := ratelimitdesc.Request{Request: rpc.Request, RouteMetadata: s.route.Metadata, LocalCluster: s.cfg.localCluster}
	var ds []ratelimitdesc.Descriptor
	for _, p := range s.policies {
		ds = p.p.Descriptors(ds, s.cfg.stage, p.anyStage, req)
	}
	if len(ds) == 0 {
		return ctx, nil, nil
	}
	return ctx, &call{step: s, descriptors: ds}, nil
}

// call is one RPC's ShouldRateLimit, run after the tap handle on the RPC's
// goroutine (httpfilter.After).
type call struct {
	step        *step
	descriptors []ratelimitdesc.Descriptor
	// The headers the answer adds to a response the filter lets through,
	// added on the response path.
	httpfilter.ResponseHeaders
}

// RunAfter implements httpfilter.After: it asks the rate limit service and
// applies its answer; the context it returns carries the request headers
// the service added.
func (c *call) RunAfter(ctx context.Context) (context.Context, error) {
	s, cfg := c.step, c.step.cfg
	req := c.request()
	if err := c.sendable(req); err != nil {
		return c.refused(ctx, err)
	}
	callCtx := ctx
	if t := callTimeout(cfg.timeout, cfg.service.Timeout); t > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	cc, err := cfg.service.Conn(callCtx)
	if err != nil {
		return c.failed(ctx, err)
	}
	if cfg.service.Metadata != nil {
		callCtx = metadata.NewOutgoingContext(callCtx, cfg.service.Metadata)
	}
	resp, err := rlspb.NewRateLimitServiceClient(cc).ShouldRateLimit(callCtx, req)
	if refused := grpcservice.RequestRefused(err); refused != nil {
		return c.refused(ctx, refused)
	}
	if err != nil {
		return c.failed(ctx, fmt.Errorf("ShouldRateLimit to %q: %w", cfg.service.Target, err))
	}
	if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
		return c.overLimit(ctx, resp)
	}
	// OK, and UNKNOWN as Envoy takes it: not over the limit.
	s.count(ctx, outcomeOK)
	// Added to the response's headers at the filter's place on the
	// response path, also when the RPC fails later (gRPC then sends them
	// before its status).
	c.Add(c.responseHeaders(resp, false))
	if len(resp.GetRequestHeadersToAdd()) == 0 {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx) // a copy
	if md == nil {
		md = metadata.MD{}
	}
	if !addRequestHeaders(md, resp.GetRequestHeadersToAdd()) {
		return ctx, nil
	}
	return metadata.NewIncomingContext(ctx, md), nil
}

// addRequestHeaders adds the answer's request_headers_to_add to md, each
// value after those the RPC already has for its key, and reports whether it
// added any. Envoy adds them the same way (it copies them into the request's
// header map, which appends); an RPC's own header is never replaced.
func addRequestHeaders(md metadata.MD, hvs []*corepb.HeaderValue) bool {
	added := false
	for _, hv := range hvs {
		if key, value, ok := headerOf(hv); ok {
			md[key] = append(md[key], value)
			added = true
		}
	}
	return added
}

// callTimeout is the shorter of the filter's timeout and the GrpcService's;
// 0 when neither is set (the RPC's deadline alone bounds the call).
func callTimeout(filter, service time.Duration) time.Duration {
	switch {
	case filter <= 0:
		return service
	case service <= 0 || filter < service:
		return filter
	}
	return service
}

func (c *call) request() *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: c.step.domain, Descriptors: make([]*rlcommonpb.RateLimitDescriptor, len(c.descriptors))}
	for i, d := range c.descriptors {
		pd := &rlcommonpb.RateLimitDescriptor{Entries: make([]*rlcommonpb.RateLimitDescriptor_Entry, len(d.Entries))}
		for j, e := range d.Entries {
			pd.Entries[j] = &rlcommonpb.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
		}
		if d.HitsAddend > 0 {
			pd.HitsAddend = wrapperspb.UInt64(d.HitsAddend)
		}
		r.Descriptors[i] = pd
	}
	return r
}

// sendable returns why req, the RPC's RateLimitRequest, cannot be sent
// (grpcservice.ErrUnsendable); nil when it can. Descriptor values may hold
// the RPC's own bytes (its :authority, path or a header); the rest is the
// server's configuration.
func (c *call) sendable(req *rlspb.RateLimitRequest) error {
	for _, d := range c.descriptors {
		for _, e := range d.Entries {
			if err := grpcservice.CheckString("descriptor entry "+e.Key, e.Value); err != nil {
				return err
			}
		}
	}
	return grpcservice.CheckSize(req)
}

// refused ends a call whose request the RPC made impossible to send: the
// RPC fails with status_on_error's code, whatever failure_mode_deny says:
// the client, not the rate limit service, made the call fail, and must not
// choose its outcome.
func (c *call) refused(ctx context.Context, why error) (context.Context, error) {
	c.step.count(ctx, outcomeError)
	return ctx, responseinfo.Refused(status.Errorf(c.step.cfg.errorCode, "ratelimit: the RPC is refused: %v", why), accesslog.FlagRateLimitServiceError, accesslog.DetailsRateLimiterError)
}

// failed ends a call that got no answer: the RPC goes on unless
// failure_mode_deny (or failure_mode_deny_percent) says otherwise, in which
// case it fails with status_on_error's code. An RPC whose own context
// ended fails with its context's error.
func (c *call) failed(ctx context.Context, why error) (context.Context, error) {
	s, cfg := c.step, c.step.cfg
	s.count(ctx, outcomeError)
	if err := grpcservice.CallerEnded(ctx); err != nil {
		return ctx, status.FromContextError(err).Err()
	}
	deny := cfg.failureModeDeny
	if cfg.denyPercent != nil {
		deny = cfg.denyPercent.Hit()
	}
	if deny {
		return ctx, responseinfo.Refused(status.Errorf(cfg.errorCode, "ratelimit: the rate limit service did not answer: %v", why), accesslog.FlagRateLimitServiceError, accesslog.DetailsRateLimiterError)
	}
	s.count(ctx, outcomeFailureModeAllowed)
	if logger.V(2) {
		logger.Infof("xds: ratelimit: %v; allowed (failure_mode_deny is false)", why)
	}
	return ctx, nil
}

// overLimit fails the RPC with rate_limited_status's code and Envoy's
// headers as trailers, unless filter_enforced lets it through.
func (c *call) overLimit(ctx context.Context, resp *rlspb.RateLimitResponse) (context.Context, error) {
	s, cfg := c.step, c.step.cfg
	s.count(ctx, outcomeOverLimit)
	if !cfg.enforced.Hit() {
		return ctx, nil
	}
	tr := c.responseHeaders(resp, true)
	if !cfg.noRatelimitd {
		tr.Set(headerRateLimited, "true")
	}
	if len(tr) > 0 {
		_ = grpc.SetTrailer(ctx, tr)
	}
	return ctx, responseinfo.Refused(status.Error(cfg.limitedCode, "ratelimit: over the limit"), accesslog.FlagRateLimited, accesslog.DetailsRateLimited)
}

// responseHeaders returns the headers the answer asks for: its
// response_headers_to_add, the x-ratelimit-* headers when enabled and, for
// an over-limit answer, retry-after when enabled. Never nil.
func (c *call) responseHeaders(resp *rlspb.RateLimitResponse, over bool) metadata.MD {
	cfg := c.step.cfg
	md := metadata.MD{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		if key, value, ok := headerOf(hv); ok {
			md.Append(key, value)
		}
	}
	if cfg.xHeaders {
		xRateLimitHeaders(md, resp.GetStatuses())
	}
	if over && cfg.retryAfter && len(md.Get(headerRetryAfter)) == 0 {
		// The service's own retry-after is kept, as in Envoy.
		if secs, ok := retryAfterSeconds(resp.GetStatuses()); ok {
			md.Set(headerRetryAfter, strconv.FormatInt(secs, 10))
		}
	}
	return md
}

// retryAfterSeconds is the retry-after of an over-limit answer, as Envoy's
// enable_retry_after_header documents it: the largest duration_until_reset
// of the over-limit descriptor statuses (an unset one is 0), in seconds, at
// least 1; ok is false when no status is over the limit. A part of a second
// counts as a second, so that a client that waits that long finds the window
// reset. It reads the Duration's fields: a time.Duration holds 292 years,
// not the 10 000 a Duration can say, and rounding one up near its limit
// would overflow into a negative number.
func retryAfterSeconds(statuses []*rlspb.RateLimitResponse_DescriptorStatus) (secs int64, ok bool) {
	for _, st := range statuses {
		if st.GetCode() != rlspb.RateLimitResponse_OVER_LIMIT {
			continue
		}
		d := st.GetDurationUntilReset()
		s := d.GetSeconds()
		if d.GetNanos() > 0 && s < math.MaxInt64 {
			s++
		}
		if !ok || s > secs {
			secs, ok = s, true
		}
	}
	return max(secs, 1), ok
}

// xRateLimitHeaders sets the headers of draft 03 of the RateLimit header
// fields, from the descriptor status closest to its limit, as Envoy does.
func xRateLimitHeaders(md metadata.MD, statuses []*rlspb.RateLimitResponse_DescriptorStatus) {
	var min *rlspb.RateLimitResponse_DescriptorStatus
	var quota []string
	for _, st := range statuses {
		l := st.GetCurrentLimit()
		if l == nil {
			continue
		}
		if min == nil || st.GetLimitRemaining() < min.GetLimitRemaining() {
			min = st
		}
		q := fmt.Sprintf("%d;w=%d", l.GetRequestsPerUnit(), window(l))
		if l.GetName() != "" {
			q += fmt.Sprintf(";name=%q", l.GetName())
		}
		quota = append(quota, q)
	}
	if min == nil {
		return
	}
	md.Set(headerLimit, strconv.FormatUint(uint64(min.GetCurrentLimit().GetRequestsPerUnit()), 10)+", "+strings.Join(quota, ", "))
	md.Set(headerRemaining, strconv.FormatUint(uint64(min.GetLimitRemaining()), 10))
	md.Set(headerReset, xRateLimitReset(min.GetDurationUntilReset()))
}

// xRateLimitReset is x-ratelimit-reset for a descriptor status's
// duration_until_reset: its whole seconds, the fraction dropped, 0 when
// unset, as Envoy writes it (the Duration's seconds field, whatever its
// size or sign).
func xRateLimitReset(d *durationpb.Duration) string {
	return strconv.FormatInt(d.GetSeconds(), 10)
}

// window is a limit's unit in seconds.
func window(l *rlspb.RateLimitResponse_RateLimit) uint64 {
	var sec uint64
	switch l.GetUnit() {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		sec = 1
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		sec = 60
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		sec = 3600
	case rlspb.RateLimitResponse_RateLimit_DAY:
		sec = 86400
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		sec = 7 * 86400
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		sec = 30 * 86400
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		sec = 365 * 86400
	}
	if m := l.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		sec *= uint64(m.GetValue())
	}
	return sec
}

// headerOf validates a header of the service's answer
// (grpcservice.AnswerHeader: gRFC A102's rules, as ext_authz's): a
// reserved or invalid one is dropped.
func headerOf(hv *corepb.HeaderValue) (string, string, bool) {
	k, v, keep, err := grpcservice.AnswerHeader(hv)
	if err != nil && logger.V(2) {
		logger.Infof("xds: ratelimit: header %q of the rate limit service's answer dropped: %v", strings.ToLower(hv.GetKey()), err)
	}
	return k, v, keep
}

var _ httpfilter.CountingStep = (*step)(nil)
