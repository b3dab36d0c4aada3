package httpfilter

import (
	"fmt"
	"regexp"

	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/matcher"
)

// MutationRules is an Envoy HeaderMutationRules as gRPC applies it to the
// header mutations a side service answers (gRFC A92's
// decoder_header_mutation_rules, A93's mutation_rules): disallow_all,
// allow_expression, disallow_expression and disallow_is_error.
// allow_all_routing, disallow_system and allow_envoy are ignored: the
// headers they are about (pseudo-headers, host, gRPC's own) are never
// changed by a side service, whatever the rules say. The zero value allows
// every mutation. Immutable.
type MutationRules struct {
	allow, disallow *regexp.Regexp // nil: unset; full-string matches, as Envoy's
	disallowAll     bool
	disallowIsError bool
}

// ParseMutationRules validates r (nil: no rules); an invalid expression
// is an error naming its field.
func ParseMutationRules(r *mutationpb.HeaderMutationRules) (MutationRules, error) {
	var out MutationRules
	if r == nil {
		return out, nil
	}
	var err error
	if e := r.GetAllowExpression(); e != nil {
		if out.allow, err = matcher.CompileRegex(e); err != nil {
			return MutationRules{}, fieldpath.In("allow_expression", err)
		}
	}
	if e := r.GetDisallowExpression(); e != nil {
		if out.disallow, err = matcher.CompileRegex(e); err != nil {
			return MutationRules{}, fieldpath.In("disallow_expression", err)
		}
	}
	out.disallowAll = r.GetDisallowAll().GetValue()
	out.disallowIsError = r.GetDisallowIsError().GetValue()
	return out, nil
}

// Allows reports whether the rules let the side service change key, in
// Envoy's order: disallow_expression refuses, then allow_expression
// allows, then disallow_all refuses, and anything else is allowed.
func (r *MutationRules) Allows(key string) bool {
	switch {
	case r.disallow != nil && r.disallow.MatchString(key):
		return false
	case r.allow != nil && r.allow.MatchString(key):
		return true
	}
	return !r.disallowAll
}

// DisallowIsError reports whether a change the rules refuse is an error
// (disallow_is_error) rather than ignored.
func (r *MutationRules) DisallowIsError() bool { return r.disallowIsError }

// Judge reports whether the rules let the side service change key; an
// error, naming the rules by their field, when they do not and
// disallow_is_error is set.
func (r *MutationRules) Judge(field, key string) (bool, error) {
	if r.Allows(key) {
		return true, nil
	}
	if r.disallowIsError {
		return false, fmt.Errorf("%s disallow changing %q (disallow_is_error)", field, key)
	}
	return false, nil
}
