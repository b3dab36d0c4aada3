package rbac

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	streampb "github.com/envoyproxy/go-control-plane/envoy/extensions/rbac/audit_loggers/stream/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	exprpb "google.golang.org/genproto/googleapis/api/expr/v1alpha1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"google.golang.org/grpc/authz/audit"
)

// md is request metadata.
type md map[string][]string

func (m md) Get(k string) []string { return m[k] }

func exact(s string) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: s}}
}

func prefix(s string) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: s}}
}

func cidr(s string) *corepb.CidrRange {
	p := netip.MustParsePrefix(s)
	return &corepb.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}
}

func hdr(name string, m *matcherpb.StringMatcher) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: m}}
}

func present(name string, invert bool) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, InvertMatch: invert, HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}
}

// Permission constructors.
func pAny() *rbacpb.Permission { return &rbacpb.Permission{Rule: &rbacpb.Permission_Any{Any: true}} }
func pHeader(h *routepb.HeaderMatcher) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Header{Header: h}}
}
func pPath(m *matcherpb.StringMatcher) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_UrlPath{UrlPath: &matcherpb.PathMatcher{Rule: &matcherpb.PathMatcher_Path{Path: m}}}}
}
func pAnd(ps ...*rbacpb.Permission) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{Rules: ps}}}
}
func pOr(ps ...*rbacpb.Permission) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_OrRules{OrRules: &rbacpb.Permission_Set{Rules: ps}}}
}
func pNot(p *rbacpb.Permission) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_NotRule{NotRule: p}}
}

// Principal constructors.
func idAny() *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Any{Any: true}}
}
func idAuth(m *matcherpb.StringMatcher) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Authenticated_{Authenticated: &rbacpb.Principal_Authenticated{PrincipalName: m}}}
}
func idAnd(ps ...*rbacpb.Principal) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_AndIds{AndIds: &rbacpb.Principal_Set{Ids: ps}}}
}
func idOr(ps ...*rbacpb.Principal) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_OrIds{OrIds: &rbacpb.Principal_Set{Ids: ps}}}
}
func idNot(p *rbacpb.Principal) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_NotId{NotId: p}}
}

func pol(perm *rbacpb.Permission, id *rbacpb.Principal) *rbacpb.Policy {
	return &rbacpb.Policy{Permissions: []*rbacpb.Permission{perm}, Principals: []*rbacpb.Principal{id}}
}

func allow(p *rbacpb.Policy) *rbacpb.RBAC {
	return &rbacpb.RBAC{Action: rbacpb.RBAC_ALLOW, Policies: map[string]*rbacpb.Policy{"p": p}}
}

func mustCompile(t testing.TB, pb *rbacpb.RBAC) *Engine {
	t.Helper()
	e, err := Compile(pb)
	if err != nil {
		t.Fatalf("Compile() failed: %v", err)
	}
	return e
}

func cert(t testing.TB, uris, dns []string, cn string) *x509.Certificate {
	t.Helper()
	c := &x509.Certificate{DNSNames: dns, Subject: pkix.Name{CommonName: cn, Organization: []string{"Example"}}}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		c.URIs = append(c.URIs, pu)
	}
	return c
}

// baseRI is a plaintext RPC from 10.0.0.1:1234 to 192.168.0.1:8080.
func baseRI() RequestInfo {
	return RequestInfo{
		FullMethod: "/pkg.Service/Method",
		Authority:  "svc.example.com:8080",
		Header:     md{":authority": {"svc.example.com:8080"}, "content-type": {"application/grpc"}, "x-user": {"alice"}, "x-multi": {"a", "b"}, "x-data-bin": {"raw"}, "te": {"trailers"}},
		Remote:     netip.MustParseAddrPort("10.0.0.1:1234"),
		Local:      netip.MustParseAddrPort("192.168.0.1:8080"),
	}
}

func withTLS(ri RequestInfo, certs ...*x509.Certificate) RequestInfo {
	ri.TLS = true
	ri.PeerCertificates = certs
	return ri
}

// TestPermissions checks every permission type with a principal of any,
// under ALLOW: the RPC is allowed exactly when the permission matches.
func TestPermissions(t *testing.T) {
	ri := baseRI()
	tests := []struct {
		desc string
		perm *rbacpb.Permission
		ri   RequestInfo
		want bool
	}{
		{desc: "any", perm: pAny(), want: true},
		{desc: "url_path exact", perm: pPath(exact("/pkg.Service/Method")), want: true},
		{desc: "url_path prefix mismatch", perm: pPath(prefix("/other.")), want: false},
		{desc: "header :path is the method", perm: pHeader(hdr(":path", exact("/pkg.Service/Method"))), want: true},
		{desc: "header :method is POST", perm: pHeader(hdr(":method", exact("POST"))), want: true},
		{desc: "header :method GET does not match", perm: pHeader(hdr(":method", exact("GET"))), want: false},
		{desc: "header :authority", perm: pHeader(hdr(":authority", exact("svc.example.com:8080"))), want: true},
		{desc: "header host is :authority", perm: pHeader(hdr("Host", exact("svc.example.com:8080"))), want: true},
		{desc: "header custom", perm: pHeader(hdr("x-user", exact("alice"))), want: true},
		{desc: "header custom mismatch", perm: pHeader(hdr("x-user", exact("bob"))), want: false},
		{desc: "header multi-valued joined with comma", perm: pHeader(hdr("x-multi", exact("a,b"))), want: true},
		{desc: "header content-type as sent", perm: pHeader(hdr("content-type", exact("application/grpc"))), want: true},
		{desc: "header -bin is present", perm: pHeader(present("x-data-bin", false)), want: true},
		{desc: "header -bin present, inverted presence does not match", perm: pHeader(present("x-data-bin", true)), want: false},
		{desc: "header -bin is base64-encoded", perm: pHeader(hdr("x-data-bin", exact("cmF3"))), want: true},
		{desc: "header -bin raw value does not match", perm: pHeader(hdr("x-data-bin", exact("raw"))), want: false},
		{desc: "header te is absent", perm: pHeader(present("te", false)), want: false},
		{desc: "header missing does not match even inverted", perm: pHeader(&routepb.HeaderMatcher{Name: "x-none", InvertMatch: true, HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: "v"}}), want: false},
		{desc: "header range", perm: pHeader(&routepb.HeaderMatcher{Name: "x-n", HeaderMatchSpecifier: &routepb.HeaderMatcher_RangeMatch{RangeMatch: &typepb.Int64Range{Start: 1, End: 10}}}), ri: func() RequestInfo { r := baseRI(); r.Header = md{"x-n": {"5"}}; return r }(), want: true},
		{desc: "destination_ip", perm: &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationIp{DestinationIp: cidr("192.168.0.0/16")}}, want: true},
		{desc: "destination_ip is the local address, not the peer's", perm: &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationIp{DestinationIp: cidr("10.0.0.0/8")}}, want: false},
		{desc: "destination_port", perm: &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: 8080}}, want: true},
		{desc: "destination_port mismatch", perm: &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: 1234}}, want: false},
		{desc: "destination_port_range in", perm: &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPortRange{DestinationPortRange: &typepb.Int32Range{Start: 8000, End: 8081}}}, want: true},
		{desc: "destination_port_range end excluded", perm: &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPortRange{DestinationPortRange: &typepb.Int32Range{Start: 8000, End: 8080}}}, want: false},
		{desc: "requested_server_name matching empty", perm: &rbacpb.Permission{Rule: &rbacpb.Permission_RequestedServerName{RequestedServerName: exact("")}}, want: true},
		{desc: "requested_server_name non-empty never matches", perm: &rbacpb.Permission{Rule: &rbacpb.Permission_RequestedServerName{RequestedServerName: exact("svc.example.com")}}, want: false},
		{desc: "metadata never matches", perm: &rbacpb.Permission{Rule: &rbacpb.Permission_Metadata{Metadata: &matcherpb.MetadataMatcher{Filter: "f"}}}, want: false},
		{desc: "not metadata always matches", perm: pNot(&rbacpb.Permission{Rule: &rbacpb.Permission_Metadata{Metadata: &matcherpb.MetadataMatcher{Filter: "f"}}}), want: true},
		{desc: "and_rules all match", perm: pAnd(pPath(prefix("/pkg.")), pHeader(hdr("x-user", exact("alice")))), want: true},
		{desc: "and_rules one fails", perm: pAnd(pPath(prefix("/pkg.")), pHeader(hdr("x-user", exact("bob")))), want: false},
		{desc: "or_rules one matches", perm: pOr(pPath(prefix("/other.")), pHeader(hdr("x-user", exact("alice")))), want: true},
		{desc: "or_rules none matches", perm: pOr(pPath(prefix("/other.")), pHeader(hdr("x-user", exact("bob")))), want: false},
		{desc: "not_rule", perm: pNot(pPath(prefix("/other."))), want: true},
		{desc: "nested not(and(or, not))", perm: pNot(pAnd(pOr(pAny()), pNot(pPath(exact("/pkg.Service/Method"))))), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			e := mustCompile(t, allow(pol(tc.perm, idAny())))
			r := tc.ri
			if r.FullMethod == "" {
				r = ri
			}
			if got := e.Evaluate(r).Allow; got != tc.want {
				t.Errorf("Evaluate().Allow = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPrincipals checks every principal type with a permission of any.
func TestPrincipals(t *testing.T) {
	spiffe := cert(t, []string{"spiffe://example.org/ns/a/sa/client"}, []string{"client.example.org"}, "client")
	dnsOnly := cert(t, nil, []string{"client.example.org", "alt.example.org"}, "client")
	subjectOnly := cert(t, nil, nil, "client")
	tests := []struct {
		desc string
		id   *rbacpb.Principal
		ri   RequestInfo
		want bool
	}{
		{desc: "any", id: idAny(), ri: baseRI(), want: true},
		{desc: "source_ip", id: &rbacpb.Principal{Identifier: &rbacpb.Principal_SourceIp{SourceIp: cidr("10.0.0.0/8")}}, ri: baseRI(), want: true},
		{desc: "direct_remote_ip", id: &rbacpb.Principal{Identifier: &rbacpb.Principal_DirectRemoteIp{DirectRemoteIp: cidr("10.0.0.1/32")}}, ri: baseRI(), want: true},
		{desc: "remote_ip mismatch", id: &rbacpb.Principal{Identifier: &rbacpb.Principal_RemoteIp{RemoteIp: cidr("192.168.0.0/16")}}, ri: baseRI(), want: false},
		{desc: "header", id: &rbacpb.Principal{Identifier: &rbacpb.Principal_Header{Header: hdr("x-user", prefix("al"))}}, ri: baseRI(), want: true},
		{desc: "url_path", id: &rbacpb.Principal{Identifier: &rbacpb.Principal_UrlPath{UrlPath: &matcherpb.PathMatcher{Rule: &matcherpb.PathMatcher_Path{Path: prefix("/pkg.")}}}}, ri: baseRI(), want: true},
		{desc: "metadata never matches", id: &rbacpb.Principal{Identifier: &rbacpb.Principal_Metadata{Metadata: &matcherpb.MetadataMatcher{}}}, ri: baseRI(), want: false},
		{desc: "authenticated without name: plaintext", id: idAuth(nil), ri: baseRI(), want: false},
		{desc: "authenticated without name: TLS without cert", id: idAuth(nil), ri: withTLS(baseRI()), want: true},
		{desc: "authenticated: plaintext never matches", id: idAuth(exact("")), ri: baseRI(), want: false},
		{desc: "authenticated: TLS without cert is checked as empty", id: idAuth(exact("")), ri: withTLS(baseRI()), want: true},
		{desc: "authenticated: TLS without cert, non-empty name", id: idAuth(exact("client")), ri: withTLS(baseRI()), want: false},
		{desc: "authenticated: URI SAN", id: idAuth(exact("spiffe://example.org/ns/a/sa/client")), ri: withTLS(baseRI(), spiffe), want: true},
		{desc: "authenticated: DNS SAN not checked when URI SANs exist", id: idAuth(exact("client.example.org")), ri: withTLS(baseRI(), spiffe), want: false},
		{desc: "authenticated: DNS SAN, second", id: idAuth(exact("alt.example.org")), ri: withTLS(baseRI(), dnsOnly), want: true},
		{desc: "authenticated: subject not checked when DNS SANs exist", id: idAuth(exact("CN=client,O=Example")), ri: withTLS(baseRI(), dnsOnly), want: false},
		{desc: "authenticated: subject in RFC 2253", id: idAuth(exact("CN=client,O=Example")), ri: withTLS(baseRI(), subjectOnly), want: true},
		{desc: "and_ids", id: idAnd(idAny(), idAuth(prefix("spiffe://example.org/"))), ri: withTLS(baseRI(), spiffe), want: true},
		{desc: "or_ids", id: idOr(idAuth(exact("nope")), &rbacpb.Principal{Identifier: &rbacpb.Principal_SourceIp{SourceIp: cidr("10.0.0.0/8")}}), ri: baseRI(), want: true},
		{desc: "not_id", id: idNot(idAuth(nil)), ri: baseRI(), want: true},
		{desc: "not_id of any", id: idNot(idAny()), ri: baseRI(), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			e := mustCompile(t, allow(pol(pAny(), tc.id)))
			if got := e.Evaluate(tc.ri).Allow; got != tc.want {
				t.Errorf("Evaluate().Allow = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestActions checks ALLOW, DENY and LOG, with no policy, a matching one and
// a non-matching one, and the matched policy's name.
func TestActions(t *testing.T) {
	match := pol(pPath(exact("/pkg.Service/Method")), idAny())
	miss := pol(pPath(exact("/other.S/M")), idAny())
	tests := []struct {
		desc     string
		action   rbacpb.RBAC_Action
		policies map[string]*rbacpb.Policy
		want     Decision
	}{
		{desc: "ALLOW without policies denies", action: rbacpb.RBAC_ALLOW, want: Decision{}},
		{desc: "ALLOW match", action: rbacpb.RBAC_ALLOW, policies: map[string]*rbacpb.Policy{"m": match, "x": miss}, want: Decision{Allow: true, MatchedPolicy: "m"}},
		{desc: "ALLOW no match", action: rbacpb.RBAC_ALLOW, policies: map[string]*rbacpb.Policy{"x": miss}, want: Decision{}},
		{desc: "ALLOW first match by name", action: rbacpb.RBAC_ALLOW, policies: map[string]*rbacpb.Policy{"b": match, "a": match}, want: Decision{Allow: true, MatchedPolicy: "a"}},
		{desc: "DENY without policies allows", action: rbacpb.RBAC_DENY, want: Decision{Allow: true}},
		{desc: "DENY match", action: rbacpb.RBAC_DENY, policies: map[string]*rbacpb.Policy{"m": match}, want: Decision{Allow: false, MatchedPolicy: "m"}},
		{desc: "DENY no match", action: rbacpb.RBAC_DENY, policies: map[string]*rbacpb.Policy{"x": miss}, want: Decision{Allow: true}},
		{desc: "LOG match allows", action: rbacpb.RBAC_LOG, policies: map[string]*rbacpb.Policy{"m": match}, want: Decision{Allow: true, MatchedPolicy: "m"}},
		{desc: "LOG no match allows", action: rbacpb.RBAC_LOG, policies: map[string]*rbacpb.Policy{"x": miss}, want: Decision{Allow: true}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			e := mustCompile(t, &rbacpb.RBAC{Action: tc.action, Policies: tc.policies})
			if got := e.Evaluate(baseRI()); got != tc.want {
				t.Errorf("Evaluate() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCompileErrors checks the configs gRFC A41 (and Envoy's validation)
// reject; each error names the field.
func TestCompileErrors(t *testing.T) {
	cond := &exprpb.Expr{}
	tests := []struct {
		desc    string
		pb      *rbacpb.RBAC
		wantErr string
	}{
		{desc: "CEL condition", pb: allow(&rbacpb.Policy{Permissions: []*rbacpb.Permission{pAny()}, Principals: []*rbacpb.Principal{idAny()}, Condition: cond}), wantErr: `policies["p"].condition`},
		{desc: "CEL checked_condition", pb: allow(&rbacpb.Policy{Permissions: []*rbacpb.Permission{pAny()}, Principals: []*rbacpb.Principal{idAny()}, CheckedCondition: &exprpb.CheckedExpr{}}), wantErr: "checked_condition"},
		{desc: "permission header grpc-", pb: allow(pol(pHeader(hdr("grpc-timeout", exact("1S"))), idAny())), wantErr: "permissions[0].header.name"},
		{desc: "principal header grpc- (any case)", pb: allow(pol(pAny(), &rbacpb.Principal{Identifier: &rbacpb.Principal_Header{Header: hdr("GRPC-Foo", exact("x"))}})), wantErr: "principals[0].header.name"},
		{desc: "header :scheme", pb: allow(pol(pHeader(hdr(":scheme", exact("https"))), idAny())), wantErr: ":scheme"},
		{desc: "nested header grpc-", pb: allow(pol(pNot(pAnd(pAny(), pHeader(present("grpc-x", false)))), idAny())), wantErr: "not_rule.and_rules.rules[1].header.name"},
		{desc: "permission matcher", pb: allow(pol(&rbacpb.Permission{Rule: &rbacpb.Permission_Matcher{Matcher: &corepb.TypedExtensionConfig{Name: "m"}}}, idAny())), wantErr: "permissions[0].matcher"},
		{desc: "permission uri_template", pb: allow(pol(&rbacpb.Permission{Rule: &rbacpb.Permission_UriTemplate{UriTemplate: &corepb.TypedExtensionConfig{}}}, idAny())), wantErr: "uri_template"},
		{desc: "principal custom", pb: allow(pol(pAny(), &rbacpb.Principal{Identifier: &rbacpb.Principal_Custom{Custom: &corepb.TypedExtensionConfig{}}})), wantErr: "principals[0].custom"},
		{desc: "unset rule", pb: allow(pol(&rbacpb.Permission{}, idAny())), wantErr: "permissions[0].rule"},
		{desc: "unset identifier", pb: allow(pol(pAny(), &rbacpb.Principal{})), wantErr: "principals[0].identifier"},
		{desc: "no permissions", pb: allow(&rbacpb.Policy{Principals: []*rbacpb.Principal{idAny()}}), wantErr: "permissions: empty"},
		{desc: "no principals", pb: allow(&rbacpb.Policy{Permissions: []*rbacpb.Permission{pAny()}}), wantErr: "principals: empty"},
		{desc: "empty and_rules", pb: allow(pol(pAnd(), idAny())), wantErr: "and_rules.rules: empty"},
		{desc: "empty or_ids", pb: allow(pol(pAny(), idOr())), wantErr: "or_ids.ids: empty"},
		{desc: "destination_port too big", pb: allow(pol(&rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: 70000}}, idAny())), wantErr: "destination_port"},
		{desc: "bad cidr", pb: allow(pol(&rbacpb.Permission{Rule: &rbacpb.Permission_DestinationIp{DestinationIp: &corepb.CidrRange{AddressPrefix: "nope"}}}, idAny())), wantErr: "destination_ip.address_prefix"},
		{desc: "bad regex", pb: allow(pol(pPath(&matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: "("}}}), idAny())), wantErr: "url_path.path.safe_regex"},
		{desc: "unknown action", pb: &rbacpb.RBAC{Action: 7}, wantErr: "action"},
		{desc: "unknown audit condition", pb: &rbacpb.RBAC{AuditLoggingOptions: &rbacpb.RBAC_AuditLoggingOptions{AuditCondition: 9}}, wantErr: "audit_condition"},
		{desc: "unknown audit logger", pb: &rbacpb.RBAC{AuditLoggingOptions: loggers(false, typedStruct(t, "test.Unknown", nil))}, wantErr: `unsupported audit logger type "test.Unknown"`},
		{desc: "audit logger unset", pb: &rbacpb.RBAC{AuditLoggingOptions: &rbacpb.RBAC_AuditLoggingOptions{LoggerConfigs: []*rbacpb.RBAC_AuditLoggingOptions_AuditLoggerConfig{{}}}}, wantErr: "logger_configs[0].audit_logger"},
		{desc: "audit logger bad config", pb: &rbacpb.RBAC{AuditLoggingOptions: loggers(true, typedStruct(t, recorderName, map[string]any{"fail": true}))}, wantErr: "invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := Compile(tc.pb)
			if err == nil {
				t.Fatalf("Compile() succeeded, want an error mentioning %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Compile() error %q does not mention %q", err, tc.wantErr)
			}
		})
	}
}

// --- audit ---

const recorderName = "test.Recorder"

// recorder is an audit logger builder whose loggers append to events.
type recorder struct{ events *[]audit.Event }

type recorderConfig struct{ audit.LoggerConfig }

func (recorder) Name() string { return recorderName }
func (recorder) ParseLoggerConfig(c json.RawMessage) (audit.LoggerConfig, error) {
	if strings.Contains(string(c), "fail") {
		return nil, errors.New("fail requested")
	}
	return recorderConfig{}, nil
}
func (r recorder) Build(audit.LoggerConfig) audit.Logger { return r }
func (r recorder) Log(e *audit.Event)                    { *r.events = append(*r.events, *e) }

func typedStruct(t testing.TB, name string, v map[string]any) *anypb.Any {
	t.Helper()
	s, err := structpb.NewStruct(v)
	if err != nil {
		t.Fatal(err)
	}
	a, err := anypb.New(&xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/" + name, Value: s})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func loggers(optional bool, cfgs ...*anypb.Any) *rbacpb.RBAC_AuditLoggingOptions {
	o := &rbacpb.RBAC_AuditLoggingOptions{}
	for i, c := range cfgs {
		o.LoggerConfigs = append(o.LoggerConfigs, &rbacpb.RBAC_AuditLoggingOptions_AuditLoggerConfig{
			AuditLogger: &corepb.TypedExtensionConfig{Name: fmt.Sprint("l", i), TypedConfig: c},
			IsOptional:  optional,
		})
	}
	return o
}

var events []audit.Event

func init() { audit.RegisterLoggerBuilder(recorder{events: &events}) }

// TestAudit checks gRFC A59's audit conditions over ALLOW and DENY
// decisions, the event's fields, and that an unknown optional logger is
// ignored.
func TestAudit(t *testing.T) {
	spiffe := cert(t, []string{"spiffe://example.org/client"}, nil, "c")
	match := pol(pPath(exact("/pkg.Service/Method")), idAny())
	tests := []struct {
		desc       string
		cond       rbacpb.RBAC_AuditLoggingOptions_AuditCondition
		action     rbacpb.RBAC_Action
		wantEvents []audit.Event
	}{
		{desc: "NONE", cond: rbacpb.RBAC_AuditLoggingOptions_NONE, action: rbacpb.RBAC_ALLOW},
		{desc: "ON_DENY, allowed", cond: rbacpb.RBAC_AuditLoggingOptions_ON_DENY, action: rbacpb.RBAC_ALLOW},
		{desc: "ON_DENY, denied", cond: rbacpb.RBAC_AuditLoggingOptions_ON_DENY, action: rbacpb.RBAC_DENY,
			wantEvents: []audit.Event{{FullMethodName: "/pkg.Service/Method", Principal: "spiffe://example.org/client", PolicyName: "filter", MatchedRule: "m", Authorized: false}}},
		{desc: "ON_ALLOW, allowed", cond: rbacpb.RBAC_AuditLoggingOptions_ON_ALLOW, action: rbacpb.RBAC_ALLOW,
			wantEvents: []audit.Event{{FullMethodName: "/pkg.Service/Method", Principal: "spiffe://example.org/client", PolicyName: "filter", MatchedRule: "m", Authorized: true}}},
		{desc: "ON_ALLOW, denied", cond: rbacpb.RBAC_AuditLoggingOptions_ON_ALLOW, action: rbacpb.RBAC_DENY},
		{desc: "ON_DENY_AND_ALLOW, denied", cond: rbacpb.RBAC_AuditLoggingOptions_ON_DENY_AND_ALLOW, action: rbacpb.RBAC_DENY,
			wantEvents: []audit.Event{{FullMethodName: "/pkg.Service/Method", Principal: "spiffe://example.org/client", PolicyName: "filter", MatchedRule: "m"}}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			events = nil
			opts := loggers(false, typedStruct(t, recorderName, nil))
			opts.LoggerConfigs = append(opts.LoggerConfigs, loggers(true, typedStruct(t, "test.Unknown", nil)).LoggerConfigs...)
			opts.AuditCondition = tc.cond
			e := mustCompile(t, &rbacpb.RBAC{Action: tc.action, Policies: map[string]*rbacpb.Policy{"m": match}, AuditLoggingOptions: opts})
			ri := withTLS(baseRI(), spiffe)
			e.Audit(ri, e.Evaluate(ri), "filter", false)
			if len(events) != len(tc.wantEvents) {
				t.Fatalf("got events %+v, want %+v", events, tc.wantEvents)
			}
			for i := range events {
				if events[i] != tc.wantEvents[i] {
					t.Errorf("event %d = %+v, want %+v", i, events[i], tc.wantEvents[i])
				}
			}
		})
	}
}

// TestStdoutLoggerConfig: the StdoutAuditLog type selects the built-in
// stdout logger, directly or in a TypedStruct.
func TestStdoutLoggerConfig(t *testing.T) {
	a, err := anypb.New(&streampb.StdoutAuditLog{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*anypb.Any{a, typedStruct(t, string(proto.MessageName(&streampb.StdoutAuditLog{})), nil)} {
		e := mustCompile(t, &rbacpb.RBAC{AuditLoggingOptions: &rbacpb.RBAC_AuditLoggingOptions{
			AuditCondition: rbacpb.RBAC_AuditLoggingOptions_ON_DENY, LoggerConfigs: loggers(false, c).LoggerConfigs,
		}})
		if !e.Audits() {
			t.Errorf("engine with a stdout logger (%s) does not audit", c.GetTypeUrl())
		}
	}
}

// TestEvaluateAllocs: evaluation allocates nothing on the common paths.
func TestEvaluateAllocs(t *testing.T) {
	e := mustCompile(t, benchRBAC(10))
	ri := baseRI()
	ri.FullMethod = "/pkg.Service/Method9"
	if n := testing.AllocsPerRun(100, func() { e.Evaluate(ri) }); n != 0 {
		t.Errorf("Evaluate allocates %v times, want 0", n)
	}
}

// TestEvaluateAllocsBinaryPresence: a present_match on a binary header
// reads whether it is there, so it encodes nothing and does not allocate.
func TestEvaluateAllocsBinaryPresence(t *testing.T) {
	e := mustCompile(t, &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{
		"p": pol(pHeader(present("X-Data-Bin", false)), idAny()),
	}})
	ri := baseRI()
	if d := e.Evaluate(ri); d.Allow {
		t.Fatalf("Evaluate() = %+v, want the RPC denied", d)
	}
	if n := testing.AllocsPerRun(100, func() { e.Evaluate(ri) }); n != 0 {
		t.Errorf("Evaluate allocates %v times, want 0", n)
	}
}

// benchRBAC is an ALLOW config of n policies, each a path, a header and a
// source range; only the last matches baseRI with method
// "/pkg.Service/Method<n-1>".
func benchRBAC(n int) *rbacpb.RBAC {
	pb := &rbacpb.RBAC{Action: rbacpb.RBAC_ALLOW, Policies: map[string]*rbacpb.Policy{}}
	for i := range n {
		pb.Policies[fmt.Sprintf("policy-%03d", i)] = &rbacpb.Policy{
			Permissions: []*rbacpb.Permission{pAnd(pPath(exact(fmt.Sprintf("/pkg.Service/Method%d", i))), pHeader(hdr("x-user", exact("alice"))))},
			Principals: []*rbacpb.Principal{idOr(
				&rbacpb.Principal{Identifier: &rbacpb.Principal_SourceIp{SourceIp: cidr("10.0.0.0/8")}},
				idAuth(prefix("spiffe://example.org/")),
			)},
		}
	}
	return pb
}

func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			e := mustCompile(b, benchRBAC(n))
			ri := baseRI()
			ri.FullMethod = fmt.Sprintf("/pkg.Service/Method%d", n-1)
			b.ReportAllocs()
			for b.Loop() {
				if !e.Evaluate(ri).Allow {
					b.Fatal("denied")
				}
			}
		})
	}
}
