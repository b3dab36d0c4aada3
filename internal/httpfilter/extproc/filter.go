// Package extproc is the ext_proc HTTP filter on the server
// (envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor), following
// the draft of gRFC A93: for each RPC on a route where it is active, one
// envoy.service.ext_proc.v3.ExternalProcessor stream to the configured
// processor carries the events of the RPC the processing mode names (the
// client's headers, messages and half-close; the server's headers,
// messages and trailers), and the processor's answers change them: header
// mutations, replaced or dropped messages, an immediate response that ends
// the RPC.
//
// The filter is the first full user of the server's response path
// (httpfilter.Call): its step returns a call per RPC whose RunAfter sends
// the request headers, and whose hooks send the later events, each waiting
// for the processor's answer (unless in observability mode), on the RPC's
// own goroutines. The side channel is internal/grpcservice's, as
// ext_authz's (gRFC A102).
package extproc

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/grpclog"

	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

var logger = grpclog.Component("xds")

// Type URLs of the filter's configs.
const (
	ConfigTypeURL   = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
	OverrideTypeURL = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"
)

// EnvDisable is gRFC A93's guard. The filter is on by default here, as
// ext_authz is; the variable set to "false" turns it off (the filter's
// type is then unknown, and a Listener that requires it is NACKed).
const EnvDisable = "GRPC_EXPERIMENTAL_XDS_EXT_PROC"

// Enabled reports whether the filter is on (see EnvDisable).
func Enabled() bool { return !strings.EqualFold(os.Getenv(EnvDisable), "false") }

// Filter is the ext_proc HTTP filter.
type Filter struct{}

// ConfigTypeURLs implements httpfilter.Filter.
func (Filter) ConfigTypeURLs() []string { return []string{ConfigTypeURL} }

// OverrideTypeURLs implements httpfilter.Filter.
func (Filter) OverrideTypeURLs() []string { return []string{OverrideTypeURL} }

// IsTerminal implements httpfilter.Filter.
func (Filter) IsTerminal() bool { return false }

// Needs implements httpfilter.NeedsReporter: the request headers go to the
// processor after the tap, and every later event may.
func (Filter) Needs() httpfilter.Needs {
	return httpfilter.Needs{After: true, Events: httpfilter.ClientMessages | httpfilter.ServerHeaders | httpfilter.ServerMessages | httpfilter.ServerTrailers}
}

// CallsOut implements httpfilter.SideCaller: the request's headers go to
// the processor.
func (Filter) CallsOut() bool { return true }

// ParseConfig implements httpfilter.Filter, for a config whose origin is
// unknown (see ParseConfigEnv).
func (f Filter) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return f.ParseConfigEnv(nil, raw)
}

// ParseConfigEnv implements httpfilter.EnvFilter: env is the
// *grpcservice.Env of the management server that sent the config.
func (Filter) ParseConfigEnv(env any, raw httpfilter.RawConfig) (httpfilter.Config, error) {
	if !Enabled() {
		return nil, fmt.Errorf("the ext_proc filter is turned off by %s=false", EnvDisable)
	}
	return parseConfigRaw(env, raw)
}

// ParseOverride implements httpfilter.Filter (see ParseOverrideEnv).
func (f Filter) ParseOverride(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return f.ParseOverrideEnv(nil, raw)
}

// ParseOverrideEnv implements httpfilter.EnvOverrideFilter: an override's
// grpc_service is judged by the trust of the server that sent the resource
// carrying it (a RouteConfiguration from RDS as much as a Listener).
func (Filter) ParseOverrideEnv(env any, raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return parseOverrideRaw(env, raw)
}

// BuildStep implements httpfilter.Filter: the route's config is the
// instance's merged with the route's override.
func (Filter) BuildStep(instance string, config, override httpfilter.Config) (httpfilter.Step, error) {
	c, ok := config.(*Config)
	if !ok {
		return nil, fmt.Errorf("ext_proc: config of type %T", config)
	}
	var o *Override
	if override != nil {
		if o, ok = override.(*Override); !ok {
			return nil, fmt.Errorf("ext_proc: override of type %T", override)
		}
	}
	s := &step{name: instance, cfg: c.Merge(o), lastLog: new(atomic.Int64)}
	// The instance's channel is held while its chain serves (Acquire); a
	// route's own is held by each RPC that uses it.
	s.perRPC = o != nil && o.Service != nil && o.Service != c.Service
	return s, nil
}

// Acquire implements httpfilter.Acquirer: the side channel is open while a
// filter chain serves with the config.
func (Filter) Acquire(config httpfilter.Config) func() {
	c, ok := config.(*Config)
	if !ok || c.Service == nil {
		return func() {}
	}
	return c.Service.Hold("ext_proc")
}

// Describe implements httpfilter.Describer.
func (Filter) Describe(config httpfilter.Config) string {
	c, ok := config.(*Config)
	if !ok || c.Service == nil {
		return ""
	}
	fail := "failure fails the RPC with UNAVAILABLE"
	if c.FailureModeAllow {
		fail = "failure allows"
	}
	obs := ""
	if c.Observability {
		obs = "; observability mode"
	}
	return fmt.Sprintf("processor %q (credentials: %s; %s; %s%s)", c.Service.Target, c.Service.CredsSource, c.Mode, fail, obs)
}

// The durations the filter records, in the order of timings.Metrics.
const (
	durClientHeaders = iota
	durClientHalfClose
	durServerHeaders
	durServerTrailers
)

var timings = &httpfilter.Timings{
	// gRFC A93's server-side metrics: four histograms, no attribute.
	Metrics: []string{
		"grpc.server_ext_proc.client_headers_duration",
		"grpc.server_ext_proc.client_half_close_duration",
		"grpc.server_ext_proc.server_headers_duration",
		"grpc.server_ext_proc.server_trailers_duration",
	},
	Descriptions: []string{
		"Time between when the ext_proc filter sees the client's headers and when it allows those headers to continue on to the next filter.",
		"Time between when the ext_proc filter sees the client's half-close and when it allows that half-close to continue on to the next filter.",
		"Time between when the ext_proc filter sees the server's headers and when it allows those headers to continue on to the next filter.",
		"Time between when the ext_proc filter sees the server's trailers and when it allows those trailers to continue on to the next filter.",
	},
}

// Timings implements httpfilter.TimingFilter.
func (Filter) Timings() *httpfilter.Timings { return timings }

// WithTimer implements httpfilter.TimingStep.
func (s *step) WithTimer(t httpfilter.Timer) httpfilter.Step {
	c := *s
	c.timer = t
	return &c
}

// record records the duration of an event the filter held since start.
func (s *step) record(ctx context.Context, metric int, start time.Time) {
	if s.timer != nil {
		s.timer.Record(ctx, metric, time.Since(start))
	}
}

// The filter's counter, of the header mutations it ignored, by reason.
const (
	// IgnoredMutationsMetric counts the entries of processors' header
	// mutations the filter did not apply though they were valid: of a
	// header gRPC writes itself (AttrReason ReasonReserved: host,
	// pseudo-headers, te, content-type, grpc-*), or one mutation_rules
	// refuse without disallow_is_error (ReasonDisallowed). The filter is
	// in AttrFilter.
	IgnoredMutationsMetric = "grpc.xds_server.ext_proc.ignored_mutations"
	AttrFilter             = "grpc.xds_server.ext_proc.filter"
	AttrReason             = "grpc.xds_server.ext_proc.reason"
	ReasonReserved         = "reserved"
	ReasonDisallowed       = "disallowed"
)

// The outcomes in the order of outcomes.Values.
const (
	ignoredReserved = iota
	ignoredDisallowed
)

var outcomes = &httpfilter.Outcomes{
	Metric:      IgnoredMutationsMetric,
	Unit:        "{mutation}",
	Description: "Entries of ext_proc processors' header mutations the filter ignored: of a header gRPC writes itself (reserved), or one mutation_rules refuse without disallow_is_error (disallowed).",
	FilterAttr:  AttrFilter,
	OutcomeAttr: AttrReason,
	Values:      []string{ReasonReserved, ReasonDisallowed},
	Title:       "ext_proc: header mutations ignored",
	None:        "No ext_proc processor's header mutation has been ignored.",
}

// Outcomes implements httpfilter.CountingFilter.
func (Filter) Outcomes() *httpfilter.Outcomes { return outcomes }

// WithCounter implements httpfilter.CountingStep.
func (s *step) WithCounter(c httpfilter.Counter) httpfilter.Step {
	n := *s
	n.counter = c
	return &n
}

// ignored counts, and logs at most once per logEvery per step, the entries
// of a processor's mutation the filter ignored.
func (s *step) ignored(ctx context.Context, ign *ignoredEntries) {
	if s.counter != nil {
		for range ign.reserved {
			s.counter.Count(ctx, ignoredReserved)
		}
		for range ign.disallowed {
			s.counter.Count(ctx, ignoredDisallowed)
		}
	}
	if ign.reserved == 0 {
		return
	}
	now := time.Now().UnixNano()
	if last := s.lastLog.Load(); now-last >= int64(logEvery) && s.lastLog.CompareAndSwap(last, now) {
		logger.Warningf("xds: ext_proc %q: the processor's answer changes %q, which gRPC writes itself: ignored (more in the next %v are counted in %s, not logged)", s.name, ign.reservedKey, logEvery, IgnoredMutationsMetric)
	}
}

// logEvery bounds how often a step logs the mutations it ignored.
const logEvery = 10 * time.Second

var _ httpfilter.CountingStep = (*step)(nil)
var _ httpfilter.EnvFilter = Filter{}
var _ httpfilter.TimingStep = (*step)(nil)
var _ httpfilter.Acquirer = Filter{}

// grpcserviceOf is the Service a route's RPCs use.
func (s *step) service() *grpcservice.Service { return s.cfg.Service }

// Enabled implements httpfilter.Switchable: with EnvDisable=false the
// filter's types are unknown.
func (Filter) Enabled() bool { return Enabled() }
