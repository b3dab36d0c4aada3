// Package extauthz is the ext_authz HTTP filter on the server
// (envoy.extensions.filters.http.ext_authz.v3.ExtAuthz), following the
// drafts of gRFC A92 (xDS ExtAuthz) and A102 (GrpcService): for each RPC
// on a route where it is active, one envoy.service.auth.v3.Authorization
// Check to the configured authorization server decides whether the RPC
// reaches its handler, and with which request headers.
//
// The check is the work the step returns (httpfilter.After), run after
// gRPC's tap handle on the RPC's own goroutine, with the RPC's deadline and cancellation: gRPC's
// reader goroutine, which runs the tap handle for every RPC of a
// connection, never waits for the authorization server. The side channel
// is internal/grpcservice's: one per target and credentials, kept across
// updates that keep them.
package extauthz

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	extauthzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
)

var logger = grpclog.Component("xds")

// Type URLs of the filter's configs.
const (
	ConfigTypeURL   = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz"
	OverrideTypeURL = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute"
)

// EnvDisable is gRFC A92's guard. The filter is on by default here; the
// variable set to "false" turns it off (the filter's type is then unknown,
// and a Listener that requires it is NACKed), for a deployment that wants
// grpc-go's behaviour while A92 is a draft.
const EnvDisable = "GRPC_EXPERIMENTAL_XDS_EXT_AUTHZ_ON_SERVER"

// Enabled reports whether the filter is on (see EnvDisable).
func Enabled() bool { return !strings.EqualFold(os.Getenv(EnvDisable), "false") }

// The outcomes the filter counts, in the order of Outcomes.Values.
const (
	outcomeAllowed = iota
	outcomeDenied
	outcomeDisabled
	outcomeFailed
)

var outcomes = &httpfilter.Outcomes{
	Unit:   "{RPCs}",
	Values: []string{"allowed", "denied", "filter_disabled", "failed"},
	// gRFC A92's server-side metrics: four counters, no attribute.
	Metrics: []string{
		"grpc.server_ext_authz.allowed_rpcs",
		"grpc.server_ext_authz.denied_rpcs",
		"grpc.server_ext_authz.filter_disabled_rpcs",
		"grpc.server_ext_authz.failed_rpcs",
	},
	Descriptions: []string{
		"Number of RPCs that were allowed by the ext_authz server.",
		"Number of RPCs that were denied by the ext_authz server.",
		"Number of RPCs for which the filter was disabled.",
		"Number of RPCs for which the ext_authz call-out failed.",
	},
	Title: "External authorization (ext_authz)",
	None:  "No RPC has met an ext_authz filter yet.",
}

// Filter is the ext_authz HTTP filter.
type Filter struct{}

// ConfigTypeURLs implements httpfilter.Filter.
func (Filter) ConfigTypeURLs() []string { return []string{ConfigTypeURL} }

// OverrideTypeURLs implements httpfilter.Filter.
func (Filter) OverrideTypeURLs() []string { return []string{OverrideTypeURL} }

// IsTerminal implements httpfilter.Filter.
func (Filter) IsTerminal() bool { return false }

// Needs implements httpfilter.NeedsReporter: the check runs after the tap,
// and an allowed RPC's response_headers_to_add go on the response path.
func (Filter) Needs() httpfilter.Needs {
	return httpfilter.Needs{After: true, Events: httpfilter.ServerHeaders}
}

// CallsOut implements httpfilter.SideCaller: the request's headers go to
// the authorization server.
func (Filter) CallsOut() bool { return true }

// UsesLocalIdentity implements httpfilter.LocalIdentityUser: the
// destination principal is the server's certificate's.
func (Filter) UsesLocalIdentity() bool { return true }

// Outcomes implements httpfilter.CountingFilter.
func (Filter) Outcomes() *httpfilter.Outcomes { return outcomes }

// ParseConfig implements httpfilter.Filter, for a config whose origin is
// unknown (see ParseConfigEnv).
func (f Filter) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return f.ParseConfigEnv(nil, raw)
}

// ParseConfigEnv implements httpfilter.EnvFilter: env is the
// *grpcservice.Env of the management server that sent the config.
func (Filter) ParseConfigEnv(env any, raw httpfilter.RawConfig) (httpfilter.Config, error) {
	if !Enabled() {
		return nil, fmt.Errorf("the ext_authz filter is turned off by %s=false", EnvDisable)
	}
	m := &extauthzpb.ExtAuthz{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("malformed ExtAuthz: %w", err)
	}
	e, _ := env.(*grpcservice.Env)
	return parseConfig(e, m)
}

// ParseOverride implements httpfilter.Filter. gRFC A92 ignores every field
// of ExtAuthzPerRoute (disabling is the generic FilterConfig.disabled): an
// override only makes the filter run where it is disabled by default.
func (Filter) ParseOverride(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	m := &extauthzpb.ExtAuthzPerRoute{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, fmt.Errorf("malformed ExtAuthzPerRoute: %w", err)
	}
	return perRoute{}, nil
}

type perRoute struct{}

// BuildStep implements httpfilter.Filter. The override changes nothing
// (see ParseOverride).
func (Filter) BuildStep(_ string, config, _ httpfilter.Config) (httpfilter.Step, error) {
	c, ok := config.(*Config)
	if !ok {
		return nil, fmt.Errorf("ext_authz: config of type %T", config)
	}
	return &step{cfg: c}, nil
}

// Acquire implements httpfilter.Acquirer: the side channel is open while a
// filter chain serves with the config.
func (Filter) Acquire(config httpfilter.Config) func() {
	c, ok := config.(*Config)
	if !ok {
		return func() {}
	}
	return c.service.Hold("ext_authz")
}

// Describe implements httpfilter.Describer.
func (Filter) Describe(config httpfilter.Config) string {
	c, ok := config.(*Config)
	if !ok {
		return ""
	}
	fail := "failure denies with " + c.errorCode.String()
	if c.failureModeAllow {
		fail = "failure allows"
	}
	return fmt.Sprintf("authorization server %q (credentials: %s; %s)", c.service.Target, c.service.CredsSource, fail)
}

// step is the filter's work on one route. Immutable.
type step struct {
	cfg     *Config
	counter httpfilter.Counter // nil: nothing counts
}

// WithCounter implements httpfilter.CountingStep.
func (s *step) WithCounter(c httpfilter.Counter) httpfilter.Step {
	return &step{cfg: s.cfg, counter: c}
}

func (s *step) count(ctx context.Context, outcome int) {
	if s.counter != nil {
		s.counter.Count(ctx, outcome)
	}
}

// Run decides, in the tap handle, whether the filter is enabled for the
// RPC (filter_enabled); the check itself is work for after the tap.
func (s *step) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, httpfilter.After, error) {
	if !s.cfg.enabled.Hit() {
		s.count(ctx, outcomeDisabled)
		if s.cfg.denyAtDisable {
			return ctx, nil, denied(status.Error(s.cfg.errorCode, "ext_authz: the filter is disabled for this RPC and deny_at_disable is set"))
		}
		return ctx, nil, nil
	}
	return ctx, &check{step: s, req: rpc.Request}, nil
}

// errFailed marks a failed check, for the log and the RPC's message.
var errFailed = errors.New("ext_authz: the authorization check failed")

// failed ends a failed check: failure_mode_allow lets the RPC through,
// with x-envoy-auth-failure-mode-allowed when asked; otherwise it fails
// with status_on_error's code.
func (s *step) failed(ctx context.Context, why error) (context.Context, error) {
	s.count(ctx, outcomeFailed)
	if s.cfg.failureModeAllow {
		if logger.V(2) {
			logger.Infof("xds: ext_authz: %v: %v; allowed by failure_mode_allow", errFailed, why)
		}
		if s.cfg.failureModeAllowHeaderAdd {
			return withHeader(ctx, headerFailureModeAllowed, "true"), nil
		}
		return ctx, nil
	}
	return ctx, failedClosed(status.Errorf(s.cfg.errorCode, "%v: %v", errFailed, why))
}

// unanswered ends a check that got no answer (no channel, or the Check
// failed): when the RPC itself was cancelled or ran out of time, the RPC
// ends with that, failure_mode_allow or not; otherwise as failed.
func (s *step) unanswered(ctx context.Context, why error) (context.Context, error) {
	if err := grpcservice.CallerEnded(ctx); err != nil {
		s.count(ctx, outcomeFailed)
		return ctx, status.FromContextError(err).Err()
	}
	return s.failed(ctx, why)
}

// refused ends a check whose request the RPC made impossible to send
// (grpcservice.ErrUnsendable): the RPC fails with status_on_error's code.
// failure_mode_allow does not apply: the client, not the authorization
// server, made the check fail, and must not choose its outcome.
func (s *step) refused(ctx context.Context, why error) (context.Context, error) {
	s.count(ctx, outcomeFailed)
	return ctx, failedClosed(status.Errorf(s.cfg.errorCode, "ext_authz: the RPC is refused: %v", why))
}

// rejected ends a check whose answer cannot be applied (an invalid
// mutation, or one disallow_is_error refuses): the RPC fails with
// status_on_error's code. failure_mode_allow does not apply: the server
// answered, and applying part of its answer could hand the handler a header
// it meant to change.
func (s *step) rejected(ctx context.Context, why error) (context.Context, error) {
	s.count(ctx, outcomeFailed)
	return ctx, failedClosed(status.Errorf(s.cfg.errorCode, "ext_authz: the authorization server's answer cannot be applied: %v", why))
}

// denied and failedClosed are the refusals of the filter, as Envoy's
// access log tells them: flag UAEX, and ext_authz_denied for a denial (the
// server's, or deny_at_disable's), ext_authz_error for a check that failed
// closed.
func denied(err error) error {
	return responseinfo.Refused(err, accesslog.FlagUnauthorizedExternalService, accesslog.DetailsExtAuthzDenied)
}

func failedClosed(err error) error {
	return responseinfo.Refused(err, accesslog.FlagUnauthorizedExternalService, accesslog.DetailsExtAuthzError)
}

// headerFailureModeAllowed is the request header failure_mode_allow_header_add
// adds (Envoy's name).
const headerFailureModeAllowed = "x-envoy-auth-failure-mode-allowed"

var _ httpfilter.CountingStep = (*step)(nil)

// codeOf maps an HTTP status to gRPC's code (gRPC's HTTP-to-gRPC mapping).
func codeOf(httpStatus int) codes.Code {
	return codes.Code(httpfilter.GRPCCodeOfHTTP(httpStatus))
}

// Enabled implements httpfilter.Switchable: with EnvDisable=false the
// filter's types are unknown.
func (Filter) Enabled() bool { return Enabled() }
