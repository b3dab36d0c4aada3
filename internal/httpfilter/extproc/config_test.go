package extproc

import (
	"reflect"
	"strings"
	"testing"
	"time"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	insecurepb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/insecure/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

var logs *testutils.Logs

func TestMain(m *testing.M) {
	logs = testutils.InstallLogs(false)
	testutils.VerifyNoLeaks(m)
}

const target = "127.0.0.1:9191"

func googleGRPC(target string) *corepb.GrpcService {
	return &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: target}}}
}

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// minimal is the smallest valid ExternalProcessor.
func minimal() *extprocpb.ExternalProcessor {
	return &extprocpb.ExternalProcessor{GrpcService: googleGRPC(target), ProcessingMode: &extprocpb.ProcessingMode{}}
}

func regex(re string) *matcherpb.RegexMatcher { return &matcherpb.RegexMatcher{Regex: re} }

func exact(s string) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: s}}
}

// TestParseConfig: each field of ExternalProcessor, valid and not; an
// error names the field.
func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		edit    func(m *extprocpb.ExternalProcessor)
		check   func(t *testing.T, c *Config)
		wantErr string
	}{
		{
			desc: "minimal: defaults",
			edit: func(*extprocpb.ExternalProcessor) {},
			check: func(t *testing.T, c *Config) {
				want := Mode{RequestHeaders: true, ResponseHeaders: true}
				if c.Mode != want {
					t.Errorf("Mode = %+v, want %+v (DEFAULT header modes: SEND, SEND, trailers SKIP; bodies NONE)", c.Mode, want)
				}
				if c.DeferredCloseTimeout != 5*time.Second {
					t.Errorf("DeferredCloseTimeout = %v, want 5s", c.DeferredCloseTimeout)
				}
				if c.Service == nil || c.Service.Target != target {
					t.Errorf("Service = %+v, want target %q", c.Service, target)
				}
				if c.FailureModeAllow || c.AllowModeOverride || c.AllowedOverrideModes != nil || c.DisableImmediateResponse || c.Observability ||
					c.RequestAttributes != nil || c.ResponseAttributes != nil || c.Allowed != nil || c.Disallowed != nil {
					t.Errorf("config %+v, want every other field unset", c)
				}
				if !c.Rules.Allows("x-anything") || c.Rules.DisallowIsError() {
					t.Errorf("no mutation_rules: Allows = false or DisallowIsError = true, want every mutation allowed")
				}
			},
		},
		{
			desc:    "grpc_service missing",
			edit:    func(m *extprocpb.ExternalProcessor) { m.GrpcService = nil },
			wantErr: "grpc_service: missing (gRFC A93 requires it)",
		},
		{
			desc: "http_service alone",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.GrpcService = nil
				m.HttpService = &extprocpb.ExtProcHttpService{}
			},
			wantErr: "grpc_service: missing; http_service is not supported",
		},
		{
			desc:  "http_service with grpc_service: ignored",
			edit:  func(m *extprocpb.ExternalProcessor) { m.HttpService = &extprocpb.ExtProcHttpService{} },
			check: func(*testing.T, *Config) {},
		},
		{
			desc: "grpc_service: envoy_grpc",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.GrpcService = &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corepb.GrpcService_EnvoyGrpc{ClusterName: "c"}}}
			},
			wantErr: "grpc_service: envoy_grpc: not supported",
		},
		{
			desc:    "grpc_service: bad target",
			edit:    func(m *extprocpb.ExternalProcessor) { m.GrpcService = googleGRPC("nope://x") },
			wantErr: "grpc_service: google_grpc.target_uri:",
		},
		{
			desc: "grpc_service: timeout and initial_metadata",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.GrpcService.Timeout = durationpb.New(time.Second)
				m.GrpcService.InitialMetadata = []*corepb.HeaderValue{{Key: "x-a", Value: "1"}}
			},
			check: func(t *testing.T, c *Config) {
				if c.Service.Timeout != time.Second || c.Service.Metadata.Get("x-a")[0] != "1" {
					t.Errorf("Service = %+v, want timeout 1s, x-a: 1", c.Service)
				}
			},
		},
		{
			desc:    "processing_mode missing",
			edit:    func(m *extprocpb.ExternalProcessor) { m.ProcessingMode = nil },
			wantErr: "processing_mode: missing (gRFC A93 requires it)",
		},
		{
			desc: "processing_mode: every mode set",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ProcessingMode = &extprocpb.ProcessingMode{
					RequestHeaderMode:   extprocpb.ProcessingMode_SKIP,
					ResponseHeaderMode:  extprocpb.ProcessingMode_SKIP,
					ResponseTrailerMode: extprocpb.ProcessingMode_SEND,
					RequestBodyMode:     extprocpb.ProcessingMode_GRPC,
					ResponseBodyMode:    extprocpb.ProcessingMode_GRPC,
					// gRPC sends no request trailers: ignored, whatever it is.
					RequestTrailerMode: extprocpb.ProcessingMode_HeaderSendMode(42),
				}
			},
			check: func(t *testing.T, c *Config) {
				want := Mode{ResponseTrailers: true, RequestBody: true, ResponseBody: true}
				if c.Mode != want {
					t.Errorf("Mode = %+v, want %+v", c.Mode, want)
				}
			},
		},
		{
			desc: "processing_mode: SEND headers",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ProcessingMode = &extprocpb.ProcessingMode{RequestHeaderMode: extprocpb.ProcessingMode_SEND, ResponseHeaderMode: extprocpb.ProcessingMode_SEND}
			},
			check: func(t *testing.T, c *Config) {
				if want := (Mode{RequestHeaders: true, ResponseHeaders: true}); c.Mode != want {
					t.Errorf("Mode = %+v, want %+v", c.Mode, want)
				}
			},
		},
		{
			desc: "processing_mode.request_body_mode: BUFFERED",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ProcessingMode.RequestBodyMode = extprocpb.ProcessingMode_BUFFERED
			},
			wantErr: "processing_mode.request_body_mode: BUFFERED is not supported (gRFC A93: NONE or GRPC)",
		},
		{
			desc: "processing_mode.response_body_mode: STREAMED",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ProcessingMode.ResponseBodyMode = extprocpb.ProcessingMode_STREAMED
			},
			wantErr: "processing_mode.response_body_mode: STREAMED is not supported",
		},
		{
			desc: "processing_mode.request_body_mode: FULL_DUPLEX_STREAMED",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ProcessingMode.RequestBodyMode = extprocpb.ProcessingMode_FULL_DUPLEX_STREAMED
			},
			wantErr: "processing_mode.request_body_mode: FULL_DUPLEX_STREAMED is not supported",
		},
		{
			desc: "processing_mode.response_body_mode: BUFFERED_PARTIAL",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ProcessingMode.ResponseBodyMode = extprocpb.ProcessingMode_BUFFERED_PARTIAL
			},
			wantErr: "processing_mode.response_body_mode: BUFFERED_PARTIAL is not supported",
		},
		{
			desc:    "processing_mode.request_body_mode: unknown",
			edit:    func(m *extprocpb.ExternalProcessor) { m.ProcessingMode.RequestBodyMode = 99 },
			wantErr: "processing_mode.request_body_mode: unknown value 99",
		},
		{
			desc:    "processing_mode.request_header_mode: unknown",
			edit:    func(m *extprocpb.ExternalProcessor) { m.ProcessingMode.RequestHeaderMode = 7 },
			wantErr: "processing_mode.request_header_mode: unknown value 7",
		},
		{
			desc:    "processing_mode.response_header_mode: unknown",
			edit:    func(m *extprocpb.ExternalProcessor) { m.ProcessingMode.ResponseHeaderMode = 7 },
			wantErr: "processing_mode.response_header_mode: unknown value 7",
		},
		{
			desc:    "processing_mode.response_trailer_mode: unknown",
			edit:    func(m *extprocpb.ExternalProcessor) { m.ProcessingMode.ResponseTrailerMode = 7 },
			wantErr: "processing_mode.response_trailer_mode: unknown value 7",
		},
		{
			desc: "failure_mode_allow, disable_immediate_response, observability_mode",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.FailureModeAllow, m.DisableImmediateResponse, m.ObservabilityMode = true, true, true
			},
			check: func(t *testing.T, c *Config) {
				if !c.FailureModeAllow || !c.DisableImmediateResponse || !c.Observability {
					t.Errorf("config %+v, want FailureModeAllow, DisableImmediateResponse, Observability", c)
				}
			},
		},
		{
			desc: "allow_mode_override with allowed_override_modes",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.AllowModeOverride = true
				m.AllowedOverrideModes = []*extprocpb.ProcessingMode{{}, {RequestBodyMode: extprocpb.ProcessingMode_GRPC}}
			},
			check: func(t *testing.T, c *Config) {
				want := []Mode{{RequestHeaders: true, ResponseHeaders: true}, {RequestHeaders: true, ResponseHeaders: true, RequestBody: true}}
				if !c.AllowModeOverride || !reflect.DeepEqual(c.AllowedOverrideModes, want) {
					t.Errorf("AllowModeOverride %v, AllowedOverrideModes %+v; want true, %+v", c.AllowModeOverride, c.AllowedOverrideModes, want)
				}
			},
		},
		{
			desc: "allowed_override_modes: an invalid entry",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.AllowModeOverride = true
				m.AllowedOverrideModes = []*extprocpb.ProcessingMode{{}, {ResponseBodyMode: extprocpb.ProcessingMode_BUFFERED}}
			},
			wantErr: "allowed_override_modes[1].response_body_mode: BUFFERED is not supported",
		},
		{
			desc: "allowed_override_modes without allow_mode_override: ignored (gRFC A93)",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.AllowedOverrideModes = []*extprocpb.ProcessingMode{{ResponseBodyMode: extprocpb.ProcessingMode_BUFFERED}}
			},
			check: func(t *testing.T, c *Config) {
				if c.AllowedOverrideModes != nil {
					t.Errorf("AllowedOverrideModes = %+v, want nil", c.AllowedOverrideModes)
				}
			},
		},
		{
			desc: "request_attributes and response_attributes: unsupported and repeated names dropped",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.RequestAttributes = []string{"request.path", "xds.cluster_name", "request.path", "source.address"}
				m.ResponseAttributes = []string{"response.grpc_status", "response.flags", "request.host"}
			},
			check: func(t *testing.T, c *Config) {
				if want := []string{"request.path", "source.address"}; !reflect.DeepEqual(c.RequestAttributes, want) {
					t.Errorf("RequestAttributes = %q, want %q", c.RequestAttributes, want)
				}
				if want := []string{"response.grpc_status", "request.host"}; !reflect.DeepEqual(c.ResponseAttributes, want) {
					t.Errorf("ResponseAttributes = %q, want %q", c.ResponseAttributes, want)
				}
			},
		},
		{
			desc: "mutation_rules",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.MutationRules = &mutationpb.HeaderMutationRules{
					AllowExpression:    regex("x-user-.*"),
					DisallowExpression: regex("x-user-admin"),
					DisallowAll:        wrapperspb.Bool(true),
					DisallowIsError:    wrapperspb.Bool(true),
					// Ignored (gRFC A93).
					AllowAllRouting: wrapperspb.Bool(true),
					AllowEnvoy:      wrapperspb.Bool(true),
					DisallowSystem:  wrapperspb.Bool(true),
				}
			},
			check: func(t *testing.T, c *Config) {
				for key, want := range map[string]bool{"x-user-id": true, "x-user-admin": false, "x-other": false} {
					if got := c.Rules.Allows(key); got != want {
						t.Errorf("Rules.Allows(%q) = %v, want %v", key, got, want)
					}
				}
				if !c.Rules.DisallowIsError() {
					t.Errorf("Rules.DisallowIsError() = false, want true")
				}
			},
		},
		{
			desc: "mutation_rules.allow_expression invalid",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.MutationRules = &mutationpb.HeaderMutationRules{AllowExpression: regex("(")}
			},
			wantErr: "mutation_rules.allow_expression.regex: invalid RE2 regex",
		},
		{
			desc: "mutation_rules.disallow_expression empty",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.MutationRules = &mutationpb.HeaderMutationRules{DisallowExpression: regex("")}
			},
			wantErr: "mutation_rules.disallow_expression.regex: empty",
		},
		{
			desc: "forward_rules",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ForwardRules = &extprocpb.HeaderForwardingRules{
					AllowedHeaders:    &matcherpb.ListStringMatcher{Patterns: []*matcherpb.StringMatcher{exact("x-a"), exact("x-b")}},
					DisallowedHeaders: &matcherpb.ListStringMatcher{Patterns: []*matcherpb.StringMatcher{exact("x-b")}},
				}
			},
			check: func(t *testing.T, c *Config) {
				if len(c.Allowed) != 2 || len(c.Disallowed) != 1 || !c.Allowed[0].Match("x-a") || !c.Disallowed[0].Match("x-b") || c.Disallowed[0].Match("x-a") {
					t.Errorf("Allowed %v, Disallowed %v; want [x-a x-b], [x-b]", c.Allowed, c.Disallowed)
				}
			},
		},
		{
			desc: "forward_rules: empty message, nothing set",
			edit: func(m *extprocpb.ExternalProcessor) { m.ForwardRules = &extprocpb.HeaderForwardingRules{} },
			check: func(t *testing.T, c *Config) {
				if c.Allowed != nil || c.Disallowed != nil {
					t.Errorf("Allowed %v, Disallowed %v; want nil, nil", c.Allowed, c.Disallowed)
				}
			},
		},
		{
			desc: "forward_rules.allowed_headers: no pattern",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ForwardRules = &extprocpb.HeaderForwardingRules{AllowedHeaders: &matcherpb.ListStringMatcher{}}
			},
			wantErr: "forward_rules.allowed_headers.patterns: empty",
		},
		{
			desc: "forward_rules.disallowed_headers: bad pattern",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ForwardRules = &extprocpb.HeaderForwardingRules{DisallowedHeaders: &matcherpb.ListStringMatcher{Patterns: []*matcherpb.StringMatcher{
					exact("x"), {MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: regex("(")}},
				}}}
			},
			wantErr: "forward_rules.disallowed_headers.patterns[1]",
		},
		{
			desc: "deferred_close_timeout",
			edit: func(m *extprocpb.ExternalProcessor) { m.DeferredCloseTimeout = durationpb.New(250 * time.Millisecond) },
			check: func(t *testing.T, c *Config) {
				if c.DeferredCloseTimeout != 250*time.Millisecond {
					t.Errorf("DeferredCloseTimeout = %v, want 250ms", c.DeferredCloseTimeout)
				}
			},
		},
		{
			desc:    "deferred_close_timeout zero",
			edit:    func(m *extprocpb.ExternalProcessor) { m.DeferredCloseTimeout = durationpb.New(0) },
			wantErr: "deferred_close_timeout: 0s, want a positive duration",
		},
		{
			desc:    "deferred_close_timeout negative",
			edit:    func(m *extprocpb.ExternalProcessor) { m.DeferredCloseTimeout = durationpb.New(-time.Second) },
			wantErr: "deferred_close_timeout: -1s, want a positive duration",
		},
		{
			desc: "deferred_close_timeout invalid",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.DeferredCloseTimeout = &durationpb.Duration{Seconds: 1, Nanos: -1}
			},
			wantErr: "deferred_close_timeout: ",
		},
		{
			desc: "processing_request_modifier",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.ProcessingRequestModifier = &corepb.TypedExtensionConfig{Name: "m"}
			},
			wantErr: "processing_request_modifier: not supported",
		},
		{
			desc: "ignored: gRFC A93's list, and the fields it is silent on",
			edit: func(m *extprocpb.ExternalProcessor) {
				m.MessageTimeout = durationpb.New(time.Second)
				m.MaxMessageTimeout = durationpb.New(time.Second)
				m.StatPrefix = "p"
				m.FilterMetadata = &structpb.Struct{}
				m.MetadataOptions = &extprocpb.MetadataOptions{}
				m.OnProcessingResponse = &corepb.TypedExtensionConfig{Name: "r"}
				m.DisableClearRouteCache = true
				m.RouteCacheAction = extprocpb.ExternalProcessor_CLEAR
				m.SendBodyWithoutWaitingForHeaderResponse = true
				m.AllowContentLengthHeader = true
				m.EmitClientSpan = wrapperspb.Bool(false)
				m.StatusOnError = &typepb.HttpStatus{Code: typepb.StatusCode_Forbidden}
			},
			check: func(t *testing.T, c *Config) {
				want, err := ParseConfig(nil, minimal())
				if err != nil {
					t.Fatal(err)
				}
				want.Service, c.Service = nil, nil
				if !reflect.DeepEqual(c, want) {
					t.Errorf("config %+v, want the minimal config's %+v", c, want)
				}
			},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			m := minimal()
			tc.edit(m)
			c, err := ParseConfig(nil, m)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseConfig: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			tc.check(t, c)
		})
	}
}

// TestParseConfigWarnsOnce: status_on_error is ignored (gRFC A93 fixes
// the status) with one warning per parse, and so is ExtProcPerRoute's
// disabled (A93: FilterConfig's disabled turns the filter off).
func TestParseConfigWarnsOnce(t *testing.T) {
	before := logs.Count("W", "ext_proc", "status_on_error")
	m := minimal()
	m.StatusOnError = &typepb.HttpStatus{Code: typepb.StatusCode_Forbidden}
	if _, err := ParseConfig(nil, m); err != nil {
		t.Fatal(err)
	}
	if got := logs.Count("W", "ext_proc", "status_on_error") - before; got != 1 {
		t.Errorf("%d warnings about status_on_error, want 1", got)
	}
	before = logs.Count("W", "ext_proc")
	if _, err := ParseConfig(nil, minimal()); err != nil {
		t.Fatal(err)
	}
	if got := logs.Count("W", "ext_proc") - before; got != 0 {
		t.Errorf("%d warnings for a config without ignored fields, want 0", got)
	}
	before = logs.Count("W", "ext_proc", "disabled")
	if _, err := ParseOverride(nil, &extprocpb.ExtProcPerRoute{Override: &extprocpb.ExtProcPerRoute_Disabled{Disabled: true}}); err != nil {
		t.Fatal(err)
	}
	if got := logs.Count("W", "ext_proc", "disabled") - before; got != 1 {
		t.Errorf("%d warnings about ExtProcPerRoute.disabled, want 1", got)
	}
}

// TestParseTrust: the grpc_service of a config or an override is judged by
// the trust of the server that sent it (gRFC A102), after every other
// field.
func TestParseTrust(t *testing.T) {
	untrusted := &grpcservice.Env{Server: "cp:1"}
	allowing := &grpcservice.Env{Server: "cp:1", Allowed: map[string]*bootstrap.ServerConfig{target: {ServerURI: target, ChannelCreds: bootstrap.ChannelCreds{Type: bootstrap.CredsInsecure}}}}
	trusted := &grpcservice.Env{Trusted: true, Server: "cp:1"}
	withPlugin := func() *corepb.GrpcService {
		gs := googleGRPC(target)
		gs.GetGoogleGrpc().ChannelCredentialsPlugin = []*anypb.Any{mustAny(t, &insecurepb.InsecureCredentials{})}
		return gs
	}

	if _, err := ParseConfig(untrusted, minimal()); err == nil || !strings.HasPrefix(err.Error(), "grpc_service: google_grpc.target_uri: ") || !strings.Contains(err.Error(), "allowed_grpc_services") {
		t.Errorf("config from an untrusted server, target not allowed: %v; want a NACK naming grpc_service: google_grpc.target_uri and allowed_grpc_services", err)
	}
	c, err := ParseConfig(allowing, minimal())
	if err != nil || !strings.Contains(c.Service.CredsSource, "allowed_grpc_services") {
		t.Errorf("config from an untrusted server, target allowed: %v; want the bootstrap's credentials", err)
	}
	m := minimal()
	m.GrpcService = withPlugin()
	if c, err := ParseConfig(trusted, m); err != nil || !strings.Contains(c.Service.CredsSource, "trusted") {
		t.Errorf("config from a trusted server: %v; want the resource's credentials", err)
	}
	// Another problem is reported first.
	m = minimal()
	m.ProcessingMode.RequestBodyMode = extprocpb.ProcessingMode_BUFFERED
	if _, err := ParseConfig(untrusted, m); err == nil || !strings.Contains(err.Error(), "processing_mode") {
		t.Errorf("a bad processing_mode from an untrusted server: %v; want the processing_mode's error first", err)
	}

	over := &extprocpb.ExtProcPerRoute{Override: &extprocpb.ExtProcPerRoute_Overrides{Overrides: &extprocpb.ExtProcOverrides{GrpcService: googleGRPC(target)}}}
	if _, err := ParseOverride(untrusted, over); err == nil || !strings.HasPrefix(err.Error(), "overrides.grpc_service: google_grpc.target_uri: ") {
		t.Errorf("override from an untrusted server, target not allowed: %v; want a NACK naming overrides.grpc_service: google_grpc.target_uri", err)
	}
	if o, err := ParseOverride(allowing, over); err != nil || !strings.Contains(o.Service.CredsSource, "allowed_grpc_services") {
		t.Errorf("override from an untrusted server, target allowed: %v; want the bootstrap's credentials", err)
	}
	over.GetOverrides().GrpcService = withPlugin()
	if o, err := ParseOverride(trusted, over); err != nil || !strings.Contains(o.Service.CredsSource, "trusted") {
		t.Errorf("override from a trusted server: %v; want the resource's credentials", err)
	}
}

func perRoute(o *extprocpb.ExtProcOverrides) *extprocpb.ExtProcPerRoute {
	return &extprocpb.ExtProcPerRoute{Override: &extprocpb.ExtProcPerRoute_Overrides{Overrides: o}}
}

// TestParseOverride: each field of ExtProcPerRoute, valid and not; an
// error names the field.
func TestParseOverride(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		desc    string
		in      *extprocpb.ExtProcPerRoute
		want    *Override // Service compared by target
		wantErr string
	}{
		{desc: "empty", in: &extprocpb.ExtProcPerRoute{}, want: &Override{}},
		{desc: "disabled: ignored (gRFC A93)", in: &extprocpb.ExtProcPerRoute{Override: &extprocpb.ExtProcPerRoute_Disabled{Disabled: true}}, want: &Override{}},
		{desc: "overrides nil", in: perRoute(nil), want: &Override{}},
		{desc: "overrides empty", in: perRoute(&extprocpb.ExtProcOverrides{}), want: &Override{}},
		{
			desc: "processing_mode",
			in:   perRoute(&extprocpb.ExtProcOverrides{ProcessingMode: &extprocpb.ProcessingMode{RequestBodyMode: extprocpb.ProcessingMode_GRPC}}),
			want: &Override{Mode: &Mode{RequestHeaders: true, ResponseHeaders: true, RequestBody: true}},
		},
		{
			desc:    "processing_mode invalid",
			in:      perRoute(&extprocpb.ExtProcOverrides{ProcessingMode: &extprocpb.ProcessingMode{ResponseBodyMode: extprocpb.ProcessingMode_BUFFERED}}),
			wantErr: "overrides.processing_mode.response_body_mode: BUFFERED is not supported (gRFC A93: NONE or GRPC)",
		},
		{
			desc: "grpc_service",
			in:   perRoute(&extprocpb.ExtProcOverrides{GrpcService: googleGRPC("127.0.0.1:7")}),
			want: &Override{Service: &grpcservice.Service{Target: "127.0.0.1:7"}},
		},
		{
			desc:    "grpc_service invalid",
			in:      perRoute(&extprocpb.ExtProcOverrides{GrpcService: &corepb.GrpcService{}}),
			wantErr: "overrides.grpc_service: google_grpc: missing",
		},
		{
			desc: "grpc_initial_metadata",
			in: perRoute(&extprocpb.ExtProcOverrides{GrpcInitialMetadata: []*corepb.HeaderValue{
				{Key: "x-a", Value: "1"}, {Key: "x-a", RawValue: []byte("2")}, {Key: "x-b-bin", RawValue: []byte{0, 1}},
			}}),
			want: &Override{InitialMetadata: metadata.MD{"x-a": {"1", "2"}, "x-b-bin": {"\x00\x01"}}},
		},
		{
			desc:    "grpc_initial_metadata: bad key",
			in:      perRoute(&extprocpb.ExtProcOverrides{GrpcInitialMetadata: []*corepb.HeaderValue{{Key: "x-a", Value: "1"}, {Key: "X-A", Value: "1"}}}),
			wantErr: "overrides.grpc_initial_metadata[1]: ",
		},
		{
			desc:    "grpc_initial_metadata: reserved key",
			in:      perRoute(&extprocpb.ExtProcOverrides{GrpcInitialMetadata: []*corepb.HeaderValue{{Key: "grpc-timeout", Value: "1S"}}}),
			wantErr: "overrides.grpc_initial_metadata[0]: ",
		},
		{
			desc:    "grpc_initial_metadata: bad value",
			in:      perRoute(&extprocpb.ExtProcOverrides{GrpcInitialMetadata: []*corepb.HeaderValue{{Key: "x-a", Value: "\n"}}}),
			wantErr: "overrides.grpc_initial_metadata[0]: ",
		},
		{
			desc: "attributes",
			in: perRoute(&extprocpb.ExtProcOverrides{
				RequestAttributes:  []string{"request.host", "nope"},
				ResponseAttributes: []string{"nope"},
			}),
			want: &Override{RequestAttributes: []string{"request.host"}, HasRequestAttributes: true, HasResponseAttributes: true},
		},
		{
			desc: "failure_mode_allow",
			in:   perRoute(&extprocpb.ExtProcOverrides{FailureModeAllow: wrapperspb.Bool(true)}),
			want: &Override{FailureModeAllow: &yes},
		},
		{
			desc:    "async_mode",
			in:      perRoute(&extprocpb.ExtProcOverrides{AsyncMode: true}),
			wantErr: "overrides.async_mode: true is not supported",
		},
		{
			desc:    "processing_request_modifier",
			in:      perRoute(&extprocpb.ExtProcOverrides{ProcessingRequestModifier: &corepb.TypedExtensionConfig{Name: "m"}}),
			wantErr: "overrides.processing_request_modifier: not supported",
		},
		{
			desc: "ignored: metadata_options, emit_client_span",
			in:   perRoute(&extprocpb.ExtProcOverrides{MetadataOptions: &extprocpb.MetadataOptions{}, EmitClientSpan: wrapperspb.Bool(true)}),
			want: &Override{},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := ParseOverride(nil, tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseOverride: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseOverride: %v", err)
			}
			if (got.Service == nil) != (tc.want.Service == nil) || got.Service != nil && got.Service.Target != tc.want.Service.Target {
				t.Errorf("Service = %+v, want %+v", got.Service, tc.want.Service)
			}
			g, w := *got, *tc.want
			g.Service, w.Service = nil, nil
			if !reflect.DeepEqual(g, w) {
				t.Errorf("ParseOverride = %+v, want %+v", g, w)
			}
		})
	}
}

// TestMerge: an override's fields replace the config's, its initial
// metadata merges into the service's by key, and the config is left as it
// was.
func TestMerge(t *testing.T) {
	m := minimal()
	m.GrpcService.InitialMetadata = []*corepb.HeaderValue{{Key: "x-keep", Value: "k"}, {Key: "x-over", Value: "old"}}
	m.RequestAttributes = []string{"request.path"}
	m.ResponseAttributes = []string{"response.grpc_status"}
	c, err := ParseConfig(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	orig := *c
	origMD := c.Service.Metadata.Copy()

	if got := c.Merge(nil); got != c {
		t.Errorf("Merge(nil) = %p, want the config itself %p", got, c)
	}
	if got := c.Merge(&Override{}); got != c {
		t.Errorf("Merge(empty) = %p, want the config itself %p", got, c)
	}

	no := false
	mode := Mode{RequestBody: true}
	o := &Override{
		Mode:                  &mode,
		InitialMetadata:       metadata.MD{"x-over": {"new"}, "x-add": {"a"}},
		HasRequestAttributes:  true, // and none supported
		ResponseAttributes:    []string{"response.code"},
		HasResponseAttributes: true,
		FailureModeAllow:      &no,
	}
	c.FailureModeAllow = true
	orig.FailureModeAllow = true
	got := c.Merge(o)
	if got.Mode != mode || got.RequestAttributes != nil || !reflect.DeepEqual(got.ResponseAttributes, []string{"response.code"}) || got.FailureModeAllow {
		t.Errorf("Merge = %+v, want the override's mode, attributes and failure_mode_allow", got)
	}
	if want := (metadata.MD{"x-keep": {"k"}, "x-over": {"new"}, "x-add": {"a"}}); !reflect.DeepEqual(got.Service.Metadata, want) {
		t.Errorf("merged service metadata = %v, want %v", got.Service.Metadata, want)
	}
	if got.Service.Target != c.Service.Target {
		t.Errorf("merged service target %q, want the config's %q", got.Service.Target, c.Service.Target)
	}
	if !reflect.DeepEqual(*c, orig) || !reflect.DeepEqual(c.Service.Metadata, origMD) {
		t.Errorf("Merge modified the config: %+v (metadata %v), was %+v (metadata %v)", c, c.Service.Metadata, orig, origMD)
	}

	// A service of the override's own, with the override's metadata.
	other, err := ParseOverride(nil, perRoute(&extprocpb.ExtProcOverrides{
		GrpcService:         googleGRPC("127.0.0.1:7"),
		GrpcInitialMetadata: []*corepb.HeaderValue{{Key: "x-add", Value: "a"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	got = c.Merge(other)
	if got.Service.Target != "127.0.0.1:7" || !reflect.DeepEqual(got.Service.Metadata, metadata.MD{"x-add": {"a"}}) {
		t.Errorf("Merge with a grpc_service: %+v, want target 127.0.0.1:7 with x-add: a only", got.Service)
	}
	if other.Service.Metadata != nil {
		t.Errorf("Merge modified the override's service: metadata %v", other.Service.Metadata)
	}
	if got.Mode != c.Mode || !reflect.DeepEqual(got.RequestAttributes, c.RequestAttributes) || got.FailureModeAllow != c.FailureModeAllow {
		t.Errorf("Merge with an override setting none of them changed mode, attributes or failure_mode_allow: %+v", got)
	}
}

// TestOverrideAllowed: mode_override applies only with
// allow_mode_override, and then only as one of allowed_override_modes when
// set, request_header_mode aside.
func TestOverrideAllowed(t *testing.T) {
	body := Mode{ResponseHeaders: true, RequestBody: true}
	none := Mode{ResponseHeaders: true}
	for _, tc := range []struct {
		desc string
		cfg  Config
		m    Mode
		want bool
	}{
		{desc: "not allowed", cfg: Config{}, m: body, want: false},
		{desc: "any", cfg: Config{AllowModeOverride: true}, m: body, want: true},
		{desc: "listed", cfg: Config{AllowModeOverride: true, AllowedOverrideModes: []Mode{none, body}}, m: body, want: true},
		{desc: "not listed", cfg: Config{AllowModeOverride: true, AllowedOverrideModes: []Mode{none}}, m: body, want: false},
		{desc: "request headers ignored", cfg: Config{AllowModeOverride: true, AllowedOverrideModes: []Mode{{RequestHeaders: true, ResponseHeaders: true}}}, m: none, want: true},
	} {
		if got := tc.cfg.OverrideAllowed(tc.m); got != tc.want {
			t.Errorf("%s: OverrideAllowed(%+v) = %v, want %v", tc.desc, tc.m, got, tc.want)
		}
	}
}

// TestParseRaw: the helpers the filter's parse methods call unmarshal an
// Any or a TypedStruct, take the env the parser gives, and name a
// malformed config.
func TestParseRaw(t *testing.T) {
	raw := func(t *testing.T, a *anypb.Any) httpfilter.RawConfig {
		t.Helper()
		r, err := typedconfig.Unwrap(a)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	c, err := parseConfigRaw(nil, raw(t, mustAny(t, minimal())))
	if err != nil || c.Service.Target != target {
		t.Errorf("parseConfigRaw: %+v, %v; want the minimal config", c, err)
	}
	if _, err := parseConfigRaw(&grpcservice.Env{Server: "cp:1"}, raw(t, mustAny(t, minimal()))); err == nil || !strings.Contains(err.Error(), "allowed_grpc_services") {
		t.Errorf("parseConfigRaw from an untrusted server: %v, want the trust NACK", err)
	}
	js, err := structpb.NewStruct(map[string]any{
		"grpc_service":    map[string]any{"google_grpc": map[string]any{"target_uri": target}},
		"processing_mode": map[string]any{"request_body_mode": "GRPC"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := mustAny(t, &xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor", Value: js})
	if c, err := parseConfigRaw(nil, raw(t, ts)); err != nil || !c.Mode.RequestBody {
		t.Errorf("parseConfigRaw of a TypedStruct: %+v, %v; want request_body_mode GRPC", c, err)
	}
	bad := &anypb.Any{TypeUrl: "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor", Value: []byte{0xff}}
	if _, err := parseConfigRaw(nil, raw(t, bad)); err == nil || !strings.Contains(err.Error(), "malformed ExternalProcessor") {
		t.Errorf("parseConfigRaw of bad bytes: %v, want malformed ExternalProcessor", err)
	}

	o, err := parseOverrideRaw(nil, raw(t, mustAny(t, perRoute(&extprocpb.ExtProcOverrides{FailureModeAllow: wrapperspb.Bool(true)}))))
	if err != nil || o.FailureModeAllow == nil || !*o.FailureModeAllow {
		t.Errorf("parseOverrideRaw: %+v, %v; want failure_mode_allow true", o, err)
	}
	over := perRoute(&extprocpb.ExtProcOverrides{GrpcService: googleGRPC(target)})
	if _, err := parseOverrideRaw(&grpcservice.Env{Server: "cp:1"}, raw(t, mustAny(t, over))); err == nil || !strings.Contains(err.Error(), "allowed_grpc_services") {
		t.Errorf("parseOverrideRaw from an untrusted server: %v, want the trust NACK", err)
	}
	bad.TypeUrl = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"
	if _, err := parseOverrideRaw(nil, raw(t, bad)); err == nil || !strings.Contains(err.Error(), "malformed ExtProcPerRoute") {
		t.Errorf("parseOverrideRaw of bad bytes: %v, want malformed ExtProcPerRoute", err)
	}
}

func TestModeString(t *testing.T) {
	for _, tc := range []struct {
		m    Mode
		want string
	}{
		{Mode{}, "sends no event"},
		{Mode{RequestHeaders: true, ResponseHeaders: true}, "sends request headers, response headers"},
		{Mode{true, true, true, true, true}, "sends request headers, request messages, response headers, response messages, response trailers"},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.m, got, tc.want)
		}
	}
}
