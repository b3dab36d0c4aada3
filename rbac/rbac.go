// Package rbac compiles Envoy RBAC policies (envoy.config.rbac.v3.RBAC) into
// an Engine that authorizes RPCs, as gRFC A41 maps them onto gRPC, and
// reports decisions to audit loggers (gRFC A59).
//
// Compile validates everything up front: an error means the resource that
// carries the policy must be NACKed, and evaluation cannot fail. An Engine
// is immutable and safe for concurrent use; Evaluate does not allocate,
// except to join a header's several values, to base64-encode a binary
// header's values, or to format a certificate's identity for an
// authenticated principal.
//
// The engine never fails open on a field gRPC lacks: such a field is
// evaluated with A41's fixed value, never skipped, so that not_rule, not_id,
// and/or and the matchers' own invert flags keep their meaning. Envoy
// metadata (metadata, sourced_metadata from any source) and filter state are
// empty, so their matchers never match and an inverted metadata matcher
// always matches; requested_server_name is the empty string. Header matcher
// names are case-insensitive at any depth, and a binary ("-bin") header is
// seen in its base64 form. An RPC whose method does not start with "/" is
// denied by ALLOW and DENY engines (see Engine.Evaluate).
//
// The package is pure: no gRPC, no goroutines, no I/O of its own (audit
// loggers may do I/O).
package rbac

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/authz/audit"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"

	"github.com/proxyless-grpc/xds/httpfilter"
	"github.com/proxyless-grpc/xds/internal/auditlog"
	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/matcher"
)

// Headers is the request metadata the engine reads: keys are lower-case,
// Get returns every value of a header in order and nothing when it is absent.
// gRPC's metadata.MD satisfies it. It is the Headers of HTTP filters.
type Headers = httpfilter.Headers

// RequestInfo is what the engine knows of an RPC: the request view HTTP
// filters see (httpfilter.Request), so a filter hands its RPC's Request to
// Evaluate as it is. FullMethod is what url_path matches; Authority is also
// the Host header; Remote is source_ip, direct_remote_ip and remote_ip;
// Local is destination_ip and destination_port; a nil Header means none.
type RequestInfo = httpfilter.Request

// Action is what an Engine does with an RPC that matches one of its
// policies.
type Action uint8

const (
	// ActionAllow allows an RPC that matches a policy and denies the rest.
	ActionAllow Action = iota
	// ActionDeny denies an RPC that matches a policy and allows the rest.
	ActionDeny
	// ActionLog allows every RPC; the matching policy is only reported to
	// audit loggers (gRFC A41: LOG is ignored for enforcement).
	ActionLog
)

// String returns the proto name of the action.
func (a Action) String() string {
	switch a {
	case ActionAllow:
		return "ALLOW"
	case ActionDeny:
		return "DENY"
	default:
		return "LOG"
	}
}

// Decision is the outcome of an evaluation.
type Decision struct {
	// Allow reports whether the RPC is allowed.
	Allow bool
	// MatchedPolicy is the name of the policy that matched (the first in
	// name order), or "" when none did.
	MatchedPolicy string
}

// Engine is a compiled RBAC config. It is immutable and safe for concurrent
// use.
type Engine struct {
	action   Action
	policies []policy // sorted by name
	audit    auditOptions
}

type policy struct {
	name        string
	permissions []node // any of them
	principals  []node // any of them
}

// Compile validates an RBAC config (gRFC A41) and compiles it. Errors name
// the offending field relative to the RBAC message and mean NACK. A config
// with a policy that has a CEL condition or checked_condition, a header
// matcher on a "grpc-" header or ":scheme", an extension matcher
// (Permission.matcher, uri_template, Principal.custom), an unknown action or
// audit condition, or an unknown audit logger type not marked is_optional
// is rejected.
//
// An error reads "rbac: " and the field path from the RBAC message down;
// errors.Unwrap returns it without the "rbac: ", for a caller that puts
// the RBAC message's own path in front.
func Compile(pb *rbacpb.RBAC) (*Engine, error) {
	e, err := compile(pb)
	if err != nil {
		return nil, fmt.Errorf("rbac: %w", err)
	}
	return e, nil
}

// compile is Compile, its errors without the package prefix.
func compile(pb *rbacpb.RBAC) (*Engine, error) {
	if pb == nil {
		return nil, errors.New("config is missing")
	}
	e := &Engine{}
	switch pb.GetAction() {
	case rbacpb.RBAC_ALLOW:
		e.action = ActionAllow
	case rbacpb.RBAC_DENY:
		e.action = ActionDeny
	case rbacpb.RBAC_LOG:
		e.action = ActionLog
	default:
		return nil, fieldpath.Errorf("action", "unknown value %d, want ALLOW, DENY or LOG", int32(pb.GetAction()))
	}
	c := &compiler{m: &matcher.Compiler{}}
	names := make([]string, 0, len(pb.GetPolicies()))
	for name := range pb.GetPolicies() {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p, err := c.policy(pb.GetPolicies()[name])
		if err != nil {
			return nil, fieldpath.In(fmt.Sprintf("policies[%q]", name), err)
		}
		p.name = name
		e.policies = append(e.policies, p)
	}
	a, err := compileAudit(pb.GetAuditLoggingOptions())
	if err != nil {
		return nil, fieldpath.In("audit_logging_options", err)
	}
	e.audit = a
	return e, nil
}

// Action returns the engine's action.
func (e *Engine) Action() Action { return e.action }

// Enforces reports whether the engine can deny an RPC: its action is not
// LOG.
func (e *Engine) Enforces() bool { return e.action != ActionLog }

// Audits reports whether some decision of the engine is reported to an
// audit logger. An engine that neither enforces nor audits need not be
// evaluated.
func (e *Engine) Audits() bool { return e.audit.enabled() }

// Evaluate decides on an RPC. ALLOW allows it if a policy matches, DENY
// denies it if a policy matches, LOG allows it. A policy matches when one of
// its permissions and one of its principals match.
//
// An RPC whose FullMethod does not start with "/" is denied by ALLOW and
// DENY engines whatever their policies (MatchedPolicy ""): it is a
// malformed HTTP/2 request, which Envoy rejects before RBAC runs, and no
// url_path or :path matcher written for well-formed paths can be relied on
// to catch it. Otherwise FullMethod is matched byte for byte: gRPC method
// names are case-sensitive, so only a matcher with ignore_case folds case.
func (e *Engine) Evaluate(ri RequestInfo) Decision {
	if e.action != ActionLog && !strings.HasPrefix(ri.FullMethod, "/") {
		return Decision{}
	}
	name, matched := e.match(&ri)
	switch e.action {
	case ActionAllow:
		return Decision{Allow: matched, MatchedPolicy: name}
	case ActionDeny:
		return Decision{Allow: !matched, MatchedPolicy: name}
	default:
		return Decision{Allow: true, MatchedPolicy: name}
	}
}

func (e *Engine) match(ri *RequestInfo) (string, bool) {
	for i := range e.policies {
		p := &e.policies[i]
		if anyMatch(p.permissions, ri) && anyMatch(p.principals, ri) {
			return p.name, true
		}
	}
	return "", false
}

// Audit reports d, a decision of this engine on ri, to the engine's audit
// loggers when its audit_condition holds for it (gRFC A59). policyName is
// the name of the RBAC filter instance; shadow marks a decision of
// shadow_rules, which is not enforced. It allocates only when it logs.
func (e *Engine) Audit(ri RequestInfo, d Decision, policyName string, shadow bool) {
	if !e.audit.wants(d.Allow) {
		return
	}
	ev := &audit.Event{
		FullMethodName: ri.FullMethod,
		Principal:      principal(ri.PeerCertificates),
		PolicyName:     policyName,
		MatchedRule:    d.MatchedPolicy,
		Authorized:     d.Allow,
	}
	for _, l := range e.audit.loggers {
		if sl, ok := l.(auditlog.ShadowLogger); ok && shadow {
			sl.LogShadow(ev)
		} else {
			l.Log(ev)
		}
	}
}

// principal is the peer identity for audit events: the first URI SAN, else
// the first DNS SAN, else the subject of the leaf certificate.
func principal(certs []*x509.Certificate) string {
	if len(certs) == 0 || certs[0] == nil {
		return ""
	}
	c := certs[0]
	switch {
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	default:
		return c.Subject.String()
	}
}

// hiddenHeader reports whether a header is treated as absent by RBAC
// (gRFC A41): hop-by-hop headers ("Implementations must consider the
// request's hop-by-hop headers to not be present") and pseudo-headers other
// than :path, :method and :authority. name is lower-case.
func hiddenHeader(name string) bool {
	switch name {
	case "te", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return true
	}
	return strings.HasPrefix(name, ":")
}
