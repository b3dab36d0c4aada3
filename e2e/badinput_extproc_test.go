package e2e_test

// The ext_proc rows of the bad-input matrix (badinput_test.go): each
// invalid field of an ExternalProcessor (gRFC A93) or of an
// ExtProcPerRoute is NACKed naming its field, and the last good config,
// whose ext_proc filter calls a real processor, keeps serving on the same
// connection. The management server is not trusted and the bootstrap
// allows the processor's target only (gRFC A102), so that a grpc_service,
// in a Listener or in an override that a RouteConfiguration carries over
// RDS, naming another target is refused by the trust check.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/proxyless-grpc/xds/csds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/extprocserver"
)

// extProcFilter is the name of the ext_proc filter of every chain of the
// ext_proc matrix's good Listener, and the key of its overrides.
const extProcFilter = "proc"

// extProcNotAllowed is a target the matrix's bootstrap does not allow.
const extProcNotAllowed = "127.0.0.1:9"

// googleGRPCService is a GrpcService calling target with google_grpc.
func googleGRPCService(target string) *corepb.GrpcService {
	return &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{TargetUri: target}}}
}

// extProcAny is m as an Any, for the mutations that have no *testing.T.
func extProcAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

// extProcHTTPFilter returns the HCM's http_filters entry named
// extProcFilter (the first filter of each chain of the good Listener).
func extProcHTTPFilter(t *testing.T, h *hcmpb.HttpConnectionManager) *hcmpb.HttpFilter {
	t.Helper()
	for _, f := range h.GetHttpFilters() {
		if f.GetName() == extProcFilter {
			return f
		}
	}
	t.Fatalf("no http filter %q in %v", extProcFilter, h.GetHttpFilters())
	return nil
}

// withExtProc changes the good ExternalProcessor of chain "A" with f.
func withExtProc(f func(c *extprocpb.ExternalProcessor)) mutFn {
	return withHCM(func(t *testing.T, h *hcmpb.HttpConnectionManager) {
		hf := extProcHTTPFilter(t, h)
		c := &extprocpb.ExternalProcessor{}
		if err := hf.GetTypedConfig().UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		f(c)
		hf.ConfigType = &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, c)}
	})
}

// bodyModeRow is a row setting one body mode of processing_mode to v.
func bodyModeRow(response bool, v extprocpb.ProcessingMode_BodySendMode) badCase {
	field := "request_body_mode"
	if response {
		field = "response_body_mode"
	}
	return badCase{
		name: "ext_proc processing_mode." + field + " " + v.String(),
		mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			if response {
				c.ProcessingMode.ResponseBodyMode = v
			} else {
				c.ProcessingMode.RequestBodyMode = v
			}
		}),
		want: []string{extProcField + "processing_mode." + field + ": " + v.String() + " is not supported (gRFC A93: NONE or GRPC)"},
	}
}

// goodExtProcOverride is the override the good RouteConfiguration's
// virtual host carries: another processing mode and a grpc_service the
// bootstrap allows (target), which an untrusted server may send.
func goodExtProcOverride(target string) *extprocpb.ExtProcPerRoute {
	return &extprocpb.ExtProcPerRoute{Override: &extprocpb.ExtProcPerRoute_Overrides{Overrides: &extprocpb.ExtProcOverrides{
		ProcessingMode: &extprocpb.ProcessingMode{RequestBodyMode: extprocpb.ProcessingMode_GRPC},
		GrpcService:    googleGRPCService(target),
	}}}
}

// withRDSExtProcOverride changes the good override of the RDS
// RouteConfiguration's virtual host with f.
func withRDSExtProcOverride(f func(o *extprocpb.ExtProcOverrides)) func(rc *routepb.RouteConfiguration) {
	return func(rc *routepb.RouteConfiguration) {
		vh := rc.GetVirtualHosts()[0]
		o := &extprocpb.ExtProcPerRoute{}
		if err := vh.GetTypedPerFilterConfig()[extProcFilter].UnmarshalTo(o); err != nil {
			panic(err)
		}
		f(o.GetOverrides())
		vh.TypedPerFilterConfig[extProcFilter] = extProcAny(o)
	}
}

// Where the errors are: the filter's config in chain "A"'s HCM, the
// override on the RDS RouteConfiguration's virtual host, the override on
// the first route of chain "A"'s inline RouteConfiguration.
const (
	extProcField        = `http_filters[0] ("` + extProcFilter + `"): `
	rdsOverrideField    = `virtual_hosts[0].typed_per_filter_config["` + extProcFilter + `"]: `
	inlineOverrideField = `virtual_hosts[0].routes[0].typed_per_filter_config["` + extProcFilter + `"]: `
)

func extProcBadCases() []badCase {
	cases := []badCase{
		// --- grpc_service (gRFC A93, A102) ---
		{name: "ext_proc without grpc_service", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.GrpcService = nil
		}), want: []string{extProcField + "grpc_service: missing (gRFC A93 requires it)"}},
		{name: "ext_proc with http_service only", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.GrpcService = nil
			c.HttpService = &extprocpb.ExtProcHttpService{}
		}), want: []string{extProcField + "grpc_service: missing; http_service is not supported"}},
		{name: "ext_proc target not allowed by the bootstrap", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.GrpcService.GetGoogleGrpc().TargetUri = extProcNotAllowed
		}), want: []string{extProcField + "grpc_service: google_grpc.target_uri: ", extProcNotAllowed, "allowed_grpc_services", "trusted_xds_server"}},
		{name: "ext_proc envoy_grpc", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.GrpcService.TargetSpecifier = &corepb.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corepb.GrpcService_EnvoyGrpc{ClusterName: "proc"}}
		}), want: []string{extProcField + "grpc_service: envoy_grpc: not supported"}},
		{name: "ext_proc negative grpc_service timeout", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.GrpcService.Timeout = &durationpb.Duration{Seconds: -1}
		}), want: []string{extProcField + "grpc_service: timeout: "}},
		{name: "ext_proc initial_metadata upper case", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.GrpcService.InitialMetadata = []*corepb.HeaderValue{{Key: "X-Tenant", Value: "a"}}
		}), want: []string{extProcField + "grpc_service: initial_metadata[0]: ", "X-Tenant"}},
		// --- processing_mode ---
		{name: "ext_proc without processing_mode", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ProcessingMode = nil
		}), want: []string{extProcField + "processing_mode: missing (gRFC A93 requires it)"}},
		{name: "ext_proc request_header_mode unknown", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ProcessingMode.RequestHeaderMode = 7
		}), want: []string{extProcField + "processing_mode.request_header_mode: unknown value 7, want DEFAULT, SEND or SKIP"}},
		{name: "ext_proc response_header_mode unknown", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ProcessingMode.ResponseHeaderMode = 7
		}), want: []string{extProcField + "processing_mode.response_header_mode: unknown value 7"}},
		{name: "ext_proc response_trailer_mode unknown", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ProcessingMode.ResponseTrailerMode = 7
		}), want: []string{extProcField + "processing_mode.response_trailer_mode: unknown value 7"}},
		{name: "ext_proc request_body_mode unknown", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ProcessingMode.RequestBodyMode = 99
		}), want: []string{extProcField + "processing_mode.request_body_mode: unknown value 99 is not supported"}},
	}
	// Each body mode gRPC does not support, on either side.
	for _, response := range []bool{false, true} {
		for _, v := range []extprocpb.ProcessingMode_BodySendMode{
			extprocpb.ProcessingMode_STREAMED, extprocpb.ProcessingMode_BUFFERED,
			extprocpb.ProcessingMode_BUFFERED_PARTIAL, extprocpb.ProcessingMode_FULL_DUPLEX_STREAMED,
		} {
			cases = append(cases, bodyModeRow(response, v))
		}
	}
	return append(cases, []badCase{
		{name: "ext_proc allowed_override_modes unsupported body mode", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.AllowModeOverride = true
			c.AllowedOverrideModes = []*extprocpb.ProcessingMode{{}, {ResponseBodyMode: extprocpb.ProcessingMode_BUFFERED}}
		}), want: []string{extProcField + "allowed_override_modes[1].response_body_mode: BUFFERED is not supported"}},
		// --- mutation_rules, forward_rules ---
		{name: "ext_proc mutation_rules bad allow_expression", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.MutationRules = &mutationpb.HeaderMutationRules{AllowExpression: &matcherpb.RegexMatcher{Regex: "a("}}
		}), want: []string{extProcField + "mutation_rules.allow_expression.regex: invalid RE2 regex"}},
		{name: "ext_proc mutation_rules bad disallow_expression", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.MutationRules = &mutationpb.HeaderMutationRules{DisallowExpression: &matcherpb.RegexMatcher{Regex: "[z-a]"}}
		}), want: []string{extProcField + "mutation_rules.disallow_expression.regex: invalid RE2 regex"}},
		{name: "ext_proc mutation_rules empty disallow_expression", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.MutationRules = &mutationpb.HeaderMutationRules{DisallowExpression: &matcherpb.RegexMatcher{}}
		}), want: []string{extProcField + "mutation_rules.disallow_expression.regex: empty"}},
		{name: "ext_proc forward_rules allowed_headers without patterns", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ForwardRules = &extprocpb.HeaderForwardingRules{AllowedHeaders: &matcherpb.ListStringMatcher{}}
		}), want: []string{extProcField + "forward_rules.allowed_headers.patterns: empty, want at least one pattern"}},
		{name: "ext_proc forward_rules disallowed_headers without patterns", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ForwardRules = &extprocpb.HeaderForwardingRules{DisallowedHeaders: &matcherpb.ListStringMatcher{}}
		}), want: []string{extProcField + "forward_rules.disallowed_headers.patterns: empty"}},
		{name: "ext_proc forward_rules bad safe_regex", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ForwardRules = &extprocpb.HeaderForwardingRules{AllowedHeaders: &matcherpb.ListStringMatcher{Patterns: []*matcherpb.StringMatcher{
				{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "x-a"}},
				{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: "("}}},
			}}}
		}), want: []string{extProcField + "forward_rules.allowed_headers.patterns[1].safe_regex.regex: invalid RE2 regex"}},
		{name: "ext_proc forward_rules pattern without match_pattern", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ForwardRules = &extprocpb.HeaderForwardingRules{DisallowedHeaders: &matcherpb.ListStringMatcher{Patterns: []*matcherpb.StringMatcher{{}}}}
		}), want: []string{extProcField + "forward_rules.disallowed_headers.patterns[0].match_pattern: unset"}},
		{name: "ext_proc forward_rules empty prefix", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ForwardRules = &extprocpb.HeaderForwardingRules{DisallowedHeaders: &matcherpb.ListStringMatcher{Patterns: []*matcherpb.StringMatcher{
				{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: ""}},
			}}}
		}), want: []string{extProcField + "forward_rules.disallowed_headers.patterns[0].prefix: empty"}},
		// --- deferred_close_timeout, processing_request_modifier ---
		{name: "ext_proc deferred_close_timeout zero", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.DeferredCloseTimeout = durationpb.New(0)
		}), want: []string{extProcField + "deferred_close_timeout: 0s, want a positive duration (gRFC A93)"}},
		{name: "ext_proc deferred_close_timeout negative", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.DeferredCloseTimeout = durationpb.New(-time.Second)
		}), want: []string{extProcField + "deferred_close_timeout: -1s, want a positive duration"}},
		{name: "ext_proc deferred_close_timeout invalid", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.DeferredCloseTimeout = &durationpb.Duration{Seconds: 1, Nanos: -1}
		}), want: []string{extProcField + "deferred_close_timeout: "}},
		{name: "ext_proc processing_request_modifier", mutate: withExtProc(func(c *extprocpb.ExternalProcessor) {
			c.ProcessingRequestModifier = &corepb.TypedExtensionConfig{Name: "modifier"}
		}), want: []string{extProcField + "processing_request_modifier: not supported"}},
		{name: "ext_proc garbage bytes", mutate: withHCM(func(t *testing.T, h *hcmpb.HttpConnectionManager) {
			extProcHTTPFilter(t, h).GetTypedConfig().Value = []byte{0x0a, 0xff}
		}), want: []string{extProcField + "malformed ExternalProcessor"}},
		// --- ExtProcPerRoute in a RouteConfiguration over RDS, from the
		// untrusted server ---
		{name: "ext_proc rds override async_mode", route: withRDSExtProcOverride(func(o *extprocpb.ExtProcOverrides) {
			o.AsyncMode = true
		}), want: []string{rdsOverrideField + "overrides.async_mode: true is not supported"}},
		{name: "ext_proc rds override processing_request_modifier", route: withRDSExtProcOverride(func(o *extprocpb.ExtProcOverrides) {
			o.ProcessingRequestModifier = &corepb.TypedExtensionConfig{Name: "modifier"}
		}), want: []string{rdsOverrideField + "overrides.processing_request_modifier: not supported"}},
		{name: "ext_proc rds override request_body_mode STREAMED", route: withRDSExtProcOverride(func(o *extprocpb.ExtProcOverrides) {
			o.ProcessingMode.RequestBodyMode = extprocpb.ProcessingMode_STREAMED
		}), want: []string{rdsOverrideField + "overrides.processing_mode.request_body_mode: STREAMED is not supported (gRFC A93: NONE or GRPC)"}},
		{name: "ext_proc rds override response_body_mode FULL_DUPLEX_STREAMED", route: withRDSExtProcOverride(func(o *extprocpb.ExtProcOverrides) {
			o.ProcessingMode.ResponseBodyMode = extprocpb.ProcessingMode_FULL_DUPLEX_STREAMED
		}), want: []string{rdsOverrideField + "overrides.processing_mode.response_body_mode: FULL_DUPLEX_STREAMED is not supported"}},
		{name: "ext_proc rds override response_trailer_mode unknown", route: withRDSExtProcOverride(func(o *extprocpb.ExtProcOverrides) {
			o.ProcessingMode.ResponseTrailerMode = 7
		}), want: []string{rdsOverrideField + "overrides.processing_mode.response_trailer_mode: unknown value 7"}},
		{name: "ext_proc rds override target not allowed by the bootstrap", route: withRDSExtProcOverride(func(o *extprocpb.ExtProcOverrides) {
			o.GrpcService.GetGoogleGrpc().TargetUri = extProcNotAllowed
		}), want: []string{rdsOverrideField + "overrides.grpc_service: google_grpc.target_uri: ", extProcNotAllowed, "allowed_grpc_services", "trusted_xds_server"}},
		{name: "ext_proc rds override envoy_grpc", route: withRDSExtProcOverride(func(o *extprocpb.ExtProcOverrides) {
			o.GrpcService.TargetSpecifier = &corepb.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corepb.GrpcService_EnvoyGrpc{ClusterName: "proc"}}
		}), want: []string{rdsOverrideField + "overrides.grpc_service: envoy_grpc: not supported"}},
		{name: "ext_proc rds override grpc_initial_metadata upper case", route: withRDSExtProcOverride(func(o *extprocpb.ExtProcOverrides) {
			o.GrpcInitialMetadata = []*corepb.HeaderValue{{Key: "x-ok", Value: "1"}, {Key: "X-Tenant", Value: "a"}}
		}), want: []string{rdsOverrideField + "overrides.grpc_initial_metadata[1]: ", "X-Tenant"}},
		{name: "ext_proc rds override garbage bytes", route: func(rc *routepb.RouteConfiguration) {
			rc.VirtualHosts[0].TypedPerFilterConfig[extProcFilter].Value = []byte{0x0a, 0xff}
		}, want: []string{rdsOverrideField + "malformed ExtProcPerRoute"}},
		// --- ExtProcPerRoute inline, on a route of the Listener ---
		{name: "ext_proc inline override target not allowed by the bootstrap", mutate: withRoute(func(r *routepb.Route) {
			r.TypedPerFilterConfig = map[string]*anypb.Any{extProcFilter: extProcAny(goodExtProcOverride(extProcNotAllowed))}
		}), want: []string{inlineOverrideField + "overrides.grpc_service: google_grpc.target_uri: ", extProcNotAllowed, "allowed_grpc_services"}},
		{name: "ext_proc inline override async_mode", mutate: withRoute(func(r *routepb.Route) {
			r.TypedPerFilterConfig = map[string]*anypb.Any{extProcFilter: extProcAny(&extprocpb.ExtProcPerRoute{Override: &extprocpb.ExtProcPerRoute_Overrides{Overrides: &extprocpb.ExtProcOverrides{AsyncMode: true}}})}
		}), want: []string{inlineOverrideField + "overrides.async_mode: true is not supported"}},
	}...)
}

// TestBadInputExtProc pushes every case of extProcBadCases in turn to one
// serving xDS server, as TestBadInputMatrix does: good -> bad (NACK naming
// the resource and the field, the old config, ext_proc included, still
// serving the same connection, CSDS NACKED with the reason) -> good again
// (ACK). The good config is itself what an untrusted server may send: an
// ext_proc filter and an RDS override whose grpc_service the bootstrap
// allows.
func TestBadInputExtProc(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := extprocserver.Start(t, extprocserver.PassThrough())
	env := authzEnv(t, false, p.Addr())

	// CSDS on a side grpc.Server: it reports every xDS client of the process.
	admin := grpc.NewServer()
	if err := csds.Register(admin); err != nil {
		t.Fatal(err)
	}
	acc, err := grpc.NewClient("passthrough:///"+testutils.ServeGRPC(t, admin).String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { acc.Close() })
	csdsClient := csdspb.NewClientStatusDiscoveryServiceClient(acc)

	// The good Listener: chain "A" serves the client through ext_proc;
	// chain "R" (which no connection matches) takes its routes over RDS,
	// whose virtual host overrides the filter with a grpc_service the
	// bootstrap allows.
	proc := func() []*hcmpb.HttpFilter {
		return []*hcmpb.HttpFilter{httpFilter(t, extProcFilter, extProc(p.Addr(), headersOnly()))}
	}
	goodRoute := routeConfig("rds-extproc", chainRoutes("R"))
	goodRoute.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{extProcFilter: anyOf(t, goodExtProcOverride(p.Addr()))}
	goodListener := func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{
			{name: "A", filters: proc()},
			{name: "R", match: &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}}, rds: goodRoute.GetName(), filters: proc()},
		}, nil)
	}
	s, addr := startServing(ctx, t, env, goodListener, []*routepb.RouteConfiguration{goodRoute})
	good := goodListener(addr)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall on the good config: %v, want OK", got)
	}
	if err := p.WaitStreams(ctx, 1); err != nil {
		t.Fatalf("the good config's EmptyCall opened no processor stream: %v", err)
	}
	// The good override names the processor, which the bootstrap allows:
	// ACKed although the server that sent it is not trusted.
	testutils.WaitFor(ctx, t, "the good RouteConfiguration ACKED in CSDS", func() error {
		if g := csdsResource(ctx, t, csdsClient, env.nodeID, routeTypeURL, goodRoute.GetName()); g.GetClientStatus() != adminpb.ClientResourceStatus_ACKED {
			return fmt.Errorf("CSDS status %v (%s)", g.GetClientStatus(), g.GetErrorState().GetDetails())
		}
		return nil
	})
	dials := c.dials.Load()

	pushGood := func(t *testing.T) {
		t.Helper()
		seen := len(env.ms.Requests())
		env.update(ctx, t, []*listenerpb.Listener{good}, []*routepb.RouteConfiguration{goodRoute})
		for _, typeURL := range []string{listenerTypeURL, routeTypeURL} {
			if _, err := env.ms.WaitForRequest(ctx, after(seen, func(r *discoverypb.DiscoveryRequest) bool {
				return r.GetTypeUrl() == typeURL && r.GetResponseNonce() != "" && r.GetErrorDetail() == nil
			})); err != nil {
				t.Fatalf("no ACK of the good %s: %v", typeURL, err)
			}
		}
	}

	cases := extProcBadCases()
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			if tc.knownBug != "" {
				t.Skip("known bug: " + tc.knownBug)
			}
			defer pushGood(t)
			seen := len(env.ms.Requests())
			typeURL, name := listenerTypeURL, good.GetName()
			if tc.route != nil {
				typeURL, name = routeTypeURL, goodRoute.GetName()
				bad := proto.Clone(goodRoute).(*routepb.RouteConfiguration)
				tc.route(bad)
				env.update(ctx, t, []*listenerpb.Listener{good}, []*routepb.RouteConfiguration{bad})
			} else {
				bad := proto.Clone(good).(*listenerpb.Listener)
				tc.mutate(t, bad)
				env.update(ctx, t, []*listenerpb.Listener{bad}, nil)
			}
			nctx, ncancel := context.WithTimeout(ctx, 10*time.Second)
			defer ncancel()
			nack, err := env.ms.WaitForRequest(nctx, after(seen, e2e.IsNACK(typeURL)))
			if err != nil {
				t.Fatalf("no NACK: %v", err)
			}
			detail := nack.GetErrorDetail().GetMessage()
			t.Logf("error_detail: %s", detail)
			for _, w := range append([]string{name}, tc.want...) {
				if !strings.Contains(detail, w) {
					t.Errorf("error_detail %q does not contain %q", detail, w)
				}
			}

			// The previous config still serves, on the same connection,
			// its ext_proc filter calling the processor.
			streams := len(p.Streams())
			if got := c.emptyCall(ctx); got != codes.OK {
				t.Errorf("EmptyCall after the NACK: %v, want OK", got)
			}
			if err := p.WaitStreams(ctx, streams+1); err != nil {
				t.Errorf("EmptyCall after the NACK opened no processor stream: %v", err)
			}
			if got := c.chainOf(ctx, t, "A"); got != "A" {
				t.Errorf("connection served by chain %q after the NACK, want A", got)
			}
			if n := c.dials.Load(); n != dials {
				t.Errorf("client dialed %d times, want %d (the connection was lost)", n, dials)
			}

			// CSDS: NACKED with the reason.
			g := csdsResource(ctx, t, csdsClient, env.nodeID, typeURL, name)
			switch {
			case g == nil:
				t.Errorf("CSDS has no %s %q", typeURL, name)
			case g.GetClientStatus() != adminpb.ClientResourceStatus_NACKED:
				t.Errorf("CSDS status of %q: %v, want NACKED", name, g.GetClientStatus())
			default:
				for _, w := range tc.want {
					if !strings.Contains(g.GetErrorState().GetDetails(), w) {
						t.Errorf("CSDS error_state.details %q does not contain %q", g.GetErrorState().GetDetails(), w)
					}
				}
			}
		})
	}
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall after the matrix: %v, want OK", got)
	}
	s.modes.expectNone(t, addr, 10*time.Millisecond)
}
