package extauthz

import (
	"errors"
	"fmt"

	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	extauthzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc/codes"

	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/matcher"
)

// Config is a validated ExtAuthz. Immutable.
type Config struct {
	service *grpcservice.Service

	enabled                   httpfilter.Fraction // filter_enabled; 100% when unset
	denyAtDisable             bool
	failureModeAllow          bool
	failureModeAllowHeaderAdd bool
	errorCode                 codes.Code // status_on_error, mapped
	includePeerCertificate    bool

	allowed, disallowed []matcher.StringMatcher // nil: unset (an empty list too)
	rules               mutationRules
}

// mutationRules is decoder_header_mutation_rules as gRPC applies it
// (gRFC A92, A102: httpfilter.MutationRules). The rules govern the
// request-header mutations of an OK answer (headers, headers_to_remove), as
// in Envoy: not response_headers_to_add, not a denial's headers.
type mutationRules = httpfilter.MutationRules

func parseConfig(env *grpcservice.Env, m *extauthzpb.ExtAuthz) (*Config, error) {
	if m.GetGrpcService() == nil {
		if m.GetHttpService() != nil {
			return nil, errors.New("grpc_service: missing; http_service is not supported (gRFC A92: gRPC calls the authorization server over gRPC only)")
		}
		return nil, errors.New("grpc_service: missing (gRFC A92 requires it)")
	}
	var err error
	c := &Config{
		enabled:                   httpfilter.FractionAll,
		failureModeAllow:          m.GetFailureModeAllow(),
		failureModeAllowHeaderAdd: m.GetFailureModeAllowHeaderAdd(),
		includePeerCertificate:    m.GetIncludePeerCertificate(),
		errorCode:                 codes.PermissionDenied,
	}
	if c.enabled, err = httpfilter.ParseRuntimeFraction("filter_enabled", m.GetFilterEnabled(), httpfilter.FractionAll); err != nil {
		return nil, err
	}
	if d := m.GetDenyAtDisable(); d != nil {
		if d.GetDefaultValue() == nil {
			return nil, errors.New("deny_at_disable.default_value: missing")
		}
		c.denyAtDisable = d.GetDefaultValue().GetValue()
	}
	if se := m.GetStatusOnError(); se != nil && se.GetCode() != 0 {
		// Code 0 is the enum's "Empty": taken as unset (403).
		c.errorCode = codeOf(int(se.GetCode()))
	}
	if c.allowed, err = stringMatchers("allowed_headers", m.GetAllowedHeaders()); err != nil {
		return nil, err
	}
	if c.disallowed, err = stringMatchers("disallowed_headers", m.GetDisallowedHeaders()); err != nil {
		return nil, err
	}
	if c.rules, err = parseRules(m.GetDecoderHeaderMutationRules()); err != nil {
		return nil, fmt.Errorf("decoder_header_mutation_rules: %w", err)
	}
	// Last, so that a config with several problems reports its own before
	// the trust check's.
	if c.service, err = grpcservice.Parse(env, m.GetGrpcService()); err != nil {
		return nil, fmt.Errorf("grpc_service: %w", err)
	}
	return c, nil
}

func stringMatchers(field string, l *matcherpb.ListStringMatcher) ([]matcher.StringMatcher, error) {
	if len(l.GetPatterns()) == 0 {
		return nil, nil
	}
	out := make([]matcher.StringMatcher, len(l.GetPatterns()))
	for i, p := range l.GetPatterns() {
		m, err := matcher.NewStringMatcher(p)
		if err != nil {
			return nil, fmt.Errorf("%s.patterns[%d]: %w", field, i, err)
		}
		out[i] = m
	}
	return out, nil
}

func parseRules(r *mutationpb.HeaderMutationRules) (mutationRules, error) {
	return httpfilter.ParseMutationRules(r)
}
