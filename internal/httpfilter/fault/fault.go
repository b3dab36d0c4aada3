// Package fault is Envoy's fault injection HTTP filter
// (envoy.extensions.filters.http.fault.v3.HTTPFault) run by an xDS server,
// with gRFC A33's semantics (written for clients) carried over: a fault
// delays an RPC before its handler runs, aborts it with a status, or both,
// for a share of the RPCs, or as the RPC's own headers ask; at most
// max_active_faults RPCs of the process are faulted at a time. The server's
// registry (internal/httpfilter/builtin) holds it.
//
// An abort without a delay fails the RPC in the tap handle. A delay cannot
// wait there (the tap holds a transport lock), so the step returns it as
// work for after the tap (httpfilter.After): the RPC waits on its own goroutine,
// for the delay or until its deadline or cancellation, and is then aborted
// or let through.
package fault

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	faultcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/matcher"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
)

// TypeURL is the type of the filter's config and of its per-route
// override, which replaces the config (gRFC A33).
const TypeURL = "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"

// The headers of header-controlled faults (gRFC A33, Envoy), and the one
// downstream_nodes is compared with.
const (
	headerAbortHTTP    = "x-envoy-fault-abort-request"
	headerAbortGRPC    = "x-envoy-fault-abort-grpc-request"
	headerAbortPercent = "x-envoy-fault-abort-request-percentage"
	headerDelay        = "x-envoy-fault-delay-request"
	headerDelayPercent = "x-envoy-fault-delay-request-percentage"
	headerNode         = "x-envoy-downstream-service-node"
)

// defaultMessage is the status message of an abort without response_body
// (Envoy's default body).
const defaultMessage = "fault filter abort"

// maxDelay bounds a delay asked for by a header; the RPC's deadline usually
// ends it much sooner.
const maxDelay = 24 * time.Hour

// Filter is the fault injection filter.
type Filter struct{}

type kind uint8

const (
	kindNone   kind = iota
	kindFixed       // from the config
	kindHeader      // from the RPC's headers (header_delay, header_abort)
)

// Config is a parsed HTTPFault. Immutable.
type Config struct {
	delayKind kind
	delay     time.Duration // kindFixed
	delayPct  httpfilter.Fraction
	abortKind kind
	abortCode codes.Code // kindFixed
	abortPct  httpfilter.Fraction
	message   string // of an abort's status
	abortErr  error  // kindFixed, abortCode not OK
	// headers must all match for a fault to apply; nodes, when not nil,
	// must hold the RPC's x-envoy-downstream-service-node.
	headers []matcher.HeaderMatcher
	nodes   map[string]bool
	// maxActive limits the RPCs of the process being faulted at a time
	// when hasMax.
	maxActive uint32
	hasMax    bool
	// inert: upstream_cluster is set; faults apply only to RPCs bound to
	// that cluster, and a server's routes send none anywhere.
	inert bool
}

// ConfigTypeURLs implements httpfilter.Filter.
func (Filter) ConfigTypeURLs() []string { return []string{TypeURL} }

// OverrideTypeURLs implements httpfilter.Filter.
func (Filter) OverrideTypeURLs() []string { return []string{TypeURL} }

// IsTerminal implements httpfilter.Filter.
func (Filter) IsTerminal() bool { return false }

// Needs implements httpfilter.NeedsReporter: delays and aborts with status
// OK happen after the tap.
func (Filter) Needs() httpfilter.Needs { return httpfilter.Needs{After: true} }

// ParseConfig implements httpfilter.Filter.
func (Filter) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) { return parseRaw(raw) }

// ParseOverride implements httpfilter.Filter.
func (Filter) ParseOverride(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return parseRaw(raw)
}

func parseRaw(raw httpfilter.RawConfig) (*Config, error) {
	m := &faultpb.HTTPFault{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("fault: %w", err)
	}
	c, err := parse(m)
	if err != nil {
		return nil, fmt.Errorf("fault: %w", err)
	}
	return c, nil
}

// parse validates m with Envoy's proto constraints. Following gRFC A33,
// response_rate_limit (deferred) and the runtime keys (no runtime) are
// ignored; headers and downstream_nodes, which A33 defers too, are
// implemented, because ignoring them would fault RPCs the config excludes.
func parse(m *faultpb.HTTPFault) (*Config, error) {
	c := &Config{inert: m.GetUpstreamCluster() != "", message: defaultMessage}
	if err := parseDelay(m.GetDelay(), c); err != nil {
		return nil, err
	}
	if err := parseAbort(m.GetAbort(), c); err != nil {
		return nil, err
	}
	for i, h := range m.GetHeaders() {
		hm, err := matcher.NewHeaderMatcher(h)
		if err != nil {
			return nil, fmt.Errorf("headers[%d].%w", i, err)
		}
		c.headers = append(c.headers, hm)
	}
	if len(m.GetDownstreamNodes()) > 0 {
		c.nodes = make(map[string]bool, len(m.GetDownstreamNodes()))
		for _, n := range m.GetDownstreamNodes() {
			c.nodes[n] = true
		}
	}
	if v := m.GetMaxActiveFaults(); v != nil {
		c.maxActive, c.hasMax = v.GetValue(), true
	}
	return c, nil
}

func parseDelay(d *faultcommonpb.FaultDelay, c *Config) error {
	if d == nil {
		return nil
	}
	switch spec := d.GetFaultDelaySecifier().(type) {
	case *faultcommonpb.FaultDelay_FixedDelay:
		fd := spec.FixedDelay
		if err := fd.CheckValid(); err != nil {
			return fmt.Errorf("delay.fixed_delay: %v", err)
		}
		if fd.AsDuration() <= 0 {
			return fmt.Errorf("delay.fixed_delay: %v, want more than 0", fd.AsDuration())
		}
		c.delayKind, c.delay = kindFixed, fd.AsDuration()
	case *faultcommonpb.FaultDelay_HeaderDelay_:
		c.delayKind = kindHeader
	default:
		return errors.New("delay: neither fixed_delay nor header_delay is set")
	}
	var err error
	c.delayPct, err = httpfilter.ParseFraction("delay.percentage", d.GetPercentage(), httpfilter.Fraction{})
	return err
}

func parseAbort(a *faultpb.FaultAbort, c *Config) error {
	if a == nil {
		return nil
	}
	switch e := a.GetErrorType().(type) {
	case *faultpb.FaultAbort_HttpStatus:
		if e.HttpStatus < 200 || e.HttpStatus >= 600 {
			return fmt.Errorf("abort.http_status: %d, want 200 to 599", e.HttpStatus)
		}
		c.abortKind, c.abortCode = kindFixed, codes.Code(httpfilter.GRPCCodeOfHTTP(int(e.HttpStatus)))
	case *faultpb.FaultAbort_GrpcStatus:
		c.abortKind, c.abortCode = kindFixed, grpcCode(uint64(e.GrpcStatus))
	case *faultpb.FaultAbort_HeaderAbort_:
		c.abortKind = kindHeader
	default:
		return errors.New("abort: none of http_status, grpc_status and header_abort is set")
	}
	if b := a.GetResponseBody(); b != "" {
		c.message = b
	}
	if c.abortKind == kindFixed && c.abortCode != codes.OK {
		c.abortErr = aborted(status.Error(c.abortCode, c.message))
	}
	var err error
	c.abortPct, err = httpfilter.ParseFraction("abort.percentage", a.GetPercentage(), httpfilter.Fraction{})
	return err
}

// grpcCode converts a gRPC status code number; one gRPC does not define is
// UNKNOWN.
func grpcCode(n uint64) codes.Code {
	if n > uint64(codes.Unauthenticated) {
		return codes.Unknown
	}
	return codes.Code(n)
}

// BuildStep implements httpfilter.Filter: an override replaces the config.
// A config that can fault nothing has no step.
func (Filter) BuildStep(_ string, config, override httpfilter.Config) (httpfilter.Step, error) {
	c, ok := config.(*Config)
	if override != nil {
		c, ok = override.(*Config)
	}
	if !ok {
		return nil, fmt.Errorf("fault: config of type %T, want *fault.Config", config)
	}
	delays := c.delayKind != kindNone && !c.delayPct.Never()
	aborts := c.abortKind != kindNone && !c.abortPct.Never()
	if c.inert || (c.hasMax && c.maxActive == 0) || (!delays && !aborts) {
		return nil, nil
	}
	return &Step{c: c}, nil
}

// Step is the filter's per-RPC work on one route. Immutable.
type Step struct{ c *Config }

// active counts the RPCs of the process being faulted now (gRFC A33: the
// limit is process-wide).
var active atomic.Int64

// enter counts one more faulted RPC, unless that would exceed c's limit.
func (c *Config) enter() bool {
	n := active.Add(1)
	if c.hasMax && n > int64(c.maxActive) {
		active.Add(-1)
		return false
	}
	return true
}

func leave() { active.Add(-1) }

// Run implements httpfilter.Step: it decides, with independent draws for
// the delay and the abort (gRFC A33), which faults the RPC gets. An abort
// alone fails the RPC here; a delay, or an abort with status OK, is work
// for after the tap.
func (s *Step) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	c := s.c
	if !c.selects(rpc) {
		return ctx, nil, nil
	}
	delay := c.delayOf(rpc)
	code, abort := c.abortOf(rpc)
	switch {
	case delay == 0 && !abort:
		return ctx, nil, nil
	case delay == 0 && code != codes.OK:
		// An abort is over at once: it needs room under the limit, and
		// takes none.
		if c.hasMax && active.Load() >= int64(c.maxActive) {
			return ctx, nil, nil
		}
		return ctx, nil, c.errOf(code)
	}
	return ctx, &pending{c: c, delay: delay, abort: abort, code: code}, nil
}

// selects reports whether the config's faults may apply to rpc.
func (c *Config) selects(rpc httpfilter.RPC) bool {
	if c.inert {
		return false
	}
	for i := range c.headers {
		if !c.headers[i].Match(rpc.Header) {
			return false
		}
	}
	if c.nodes != nil {
		for _, n := range rpc.Header.Get(headerNode) {
			if c.nodes[n] {
				return true
			}
		}
		return false
	}
	return true
}

// delayOf returns the delay rpc gets; 0 for none.
func (c *Config) delayOf(rpc httpfilter.RPC) time.Duration {
	switch c.delayKind {
	case kindFixed:
		if c.delayPct.Hit() {
			return c.delay
		}
	case kindHeader:
		ms, ok := headerUint(rpc, headerDelay)
		if !ok || ms == 0 {
			return 0
		}
		if c.pctOf(rpc, headerDelayPercent, c.delayPct).Hit() {
			return min(time.Duration(min(ms, math.MaxInt64/uint64(time.Millisecond)))*time.Millisecond, maxDelay)
		}
	}
	return 0
}

// abortOf returns the code of the abort rpc gets, if it gets one.
func (c *Config) abortOf(rpc httpfilter.RPC) (codes.Code, bool) {
	switch c.abortKind {
	case kindFixed:
		return c.abortCode, c.abortPct.Hit()
	case kindHeader:
		var code codes.Code
		if n, ok := headerUint(rpc, headerAbortHTTP); ok && n >= 200 && n < 600 {
			code = codes.Code(httpfilter.GRPCCodeOfHTTP(int(n)))
		} else if n, ok := headerUint(rpc, headerAbortGRPC); ok {
			code = grpcCode(n)
		} else {
			return codes.OK, false
		}
		return code, c.pctOf(rpc, headerAbortPercent, c.abortPct).Hit()
	}
	return codes.OK, false
}

// pctOf returns the configured fraction, lowered by the percentage header
// if it has a valid one (gRFC A33: the header cannot raise it).
func (c *Config) pctOf(rpc httpfilter.RPC, header string, configured httpfilter.Fraction) httpfilter.Fraction {
	if n, ok := headerUint(rpc, header); ok {
		return configured.Capped(n)
	}
	return configured
}

// errOf returns the status of an abort with code (not OK).
func (c *Config) errOf(code codes.Code) error {
	if c.abortErr != nil && code == c.abortCode {
		return c.abortErr
	}
	return aborted(status.Error(code, c.message))
}

// aborted is an abort as Envoy's access log tells it: flag FI,
// fault_filter_abort.
func aborted(err error) error {
	return responseinfo.Refused(err, accesslog.FlagFaultInjected, accesslog.DetailsFaultAbort)
}

// headerUint parses the first value of rpc's header as an unsigned
// integer; an absent or malformed header is ignored (gRFC A33).
func headerUint(rpc httpfilter.RPC, header string) (uint64, bool) {
	v := rpc.Header.Get(header)
	if len(v) == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(v[0], 10, 64)
	return n, err == nil
}

// pending is the fault of one RPC, run after the tap: it waits for the
// delay, then aborts. It counts as an active fault from the start of the
// delay to the abort; when max_active_faults would be exceeded, the RPC
// gets neither.
type pending struct {
	c     *Config
	delay time.Duration
	abort bool
	code  codes.Code
}

// RunAfter implements httpfilter.After.
func (p *pending) RunAfter(ctx context.Context) (context.Context, error) {
	if !p.c.enter() {
		return ctx, nil
	}
	defer leave()
	if p.delay > 0 {
		responseinfo.AddFlag(ctx, accesslog.FlagDelayInjected)
		t := time.NewTimer(p.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx, ctx.Err()
		}
	}
	switch {
	case !p.abort:
		return ctx, nil
	case p.code == codes.OK:
		return ctx, httpfilter.ErrSkipHandler
	}
	return ctx, p.c.errOf(p.code)
}
