package e2e_test

// Helpers of the RBAC end-to-end tests: Listeners whose filter chain runs
// the RBAC HTTP filter before the router, RBAC policies, an audit logger
// that records events, and certificates made at test time for mTLS.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"google.golang.org/grpc/authz/audit"
)

// rbacFilterName is the name of the RBAC filter instance in test Listeners.
const rbacFilterName = "rbac"

func anyOf(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// rbacListener returns a Listener for addr with one filter chain whose
// HttpConnectionManager runs the RBAC filter cfg, then the router; routes
// come from rc inline, or from RDS resource rds when rc is nil.
func rbacListener(t testing.TB, addr net.Addr, cfg *rbacpb.RBAC, rc *routepb.RouteConfiguration, rds string) *listenerpb.Listener {
	t.Helper()
	rbac := &hcmpb.HttpFilter{Name: rbacFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, cfg)}}
	return hcmListener(addr, "rbac", []*hcmpb.HttpFilter{rbac}, rc, rds)
}

// allRoutes is a RouteConfiguration letting every RPC through.
func allRoutes(name string) *routepb.RouteConfiguration { return e2e.DefaultRouteConfig(name) }

func exactString(s string) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: s}}
}

// pathPermission matches the RPC's method.
func pathPermission(method string) *rbacconfigpb.Permission {
	return &rbacconfigpb.Permission{Rule: &rbacconfigpb.Permission_UrlPath{UrlPath: &matcherpb.PathMatcher{
		Rule: &matcherpb.PathMatcher_Path{Path: exactString(method)},
	}}}
}

// headerPrincipal matches a metadata value.
func headerPrincipal(name, value string) *rbacconfigpb.Principal {
	return &rbacconfigpb.Principal{Identifier: &rbacconfigpb.Principal_Header{Header: &routepb.HeaderMatcher{
		Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: exactString(value)},
	}}}
}

func anyPrincipal() *rbacconfigpb.Principal {
	return &rbacconfigpb.Principal{Identifier: &rbacconfigpb.Principal_Any{Any: true}}
}

func anyPermission() *rbacconfigpb.Permission {
	return &rbacconfigpb.Permission{Rule: &rbacconfigpb.Permission_Any{Any: true}}
}

// rbacRules is an RBAC filter config with one policy per name.
func rbacRules(action rbacconfigpb.RBAC_Action, policies map[string]*rbacconfigpb.Policy) *rbacpb.RBAC {
	return &rbacpb.RBAC{Rules: &rbacconfigpb.RBAC{Action: action, Policies: policies}}
}

// allowMethods allows exactly the given methods, to anyone.
func allowMethods(methods ...string) *rbacpb.RBAC {
	p := &rbacconfigpb.Policy{Principals: []*rbacconfigpb.Principal{anyPrincipal()}}
	for _, m := range methods {
		p.Permissions = append(p.Permissions, pathPermission(m))
	}
	if len(methods) == 0 {
		return rbacRules(rbacconfigpb.RBAC_ALLOW, nil)
	}
	return rbacRules(rbacconfigpb.RBAC_ALLOW, map[string]*rbacconfigpb.Policy{"allow-methods": p})
}

// perRoute is a typed_per_filter_config map overriding the RBAC filter.
func perRoute(t testing.TB, o *rbacpb.RBACPerRoute) map[string]*anypb.Any {
	return map[string]*anypb.Any{rbacFilterName: anyOf(t, o)}
}

// --- audit ---

// recordingLoggerName is the audit logger type the tests configure; events
// go to the channel named by the logger config's "sink" field.
const recordingLoggerName = "xds_test.RecordingAuditLogger"

func init() { audit.RegisterLoggerBuilder(recordingBuilder{}) }

var (
	auditSinksMu sync.Mutex
	auditSinks   = struct {
		m map[string]chan audit.Event // guarded by auditSinksMu
	}{m: map[string]chan audit.Event{}}
)

// auditSink returns a channel receiving the events of loggers configured
// with sink name (registered before any server sees the config).
func auditSink(name string) chan audit.Event {
	ch := make(chan audit.Event, 100)
	auditSinksMu.Lock()
	auditSinks.m[name] = ch
	auditSinksMu.Unlock()
	return ch
}

type recordingBuilder struct{}

type recordingConfig struct {
	audit.LoggerConfig
	Sink string `json:"sink"`
}

func (recordingBuilder) Name() string { return recordingLoggerName }

func (recordingBuilder) ParseLoggerConfig(c json.RawMessage) (audit.LoggerConfig, error) {
	cfg := recordingConfig{}
	if err := json.Unmarshal(c, &cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (recordingBuilder) Build(c audit.LoggerConfig) audit.Logger {
	auditSinksMu.Lock()
	defer auditSinksMu.Unlock()
	return recordingLogger{ch: auditSinks.m[c.(recordingConfig).Sink]}
}

type recordingLogger struct{ ch chan audit.Event }

func (l recordingLogger) Log(e *audit.Event) {
	if l.ch != nil {
		select {
		case l.ch <- *e:
		default:
		}
	}
}

// expectAuditEvents checks that sink receives want, in order; by says who
// should have logged them, for the failure message.
func expectAuditEvents(ctx context.Context, t *testing.T, sink chan audit.Event, by string, want ...audit.Event) {
	t.Helper()
	for i, w := range want {
		select {
		case got := <-sink:
			if got != w {
				t.Errorf("audit event %d: %+v, want %+v", i, got, w)
			}
		case <-ctx.Done():
			t.Fatalf("audit event %d not received %s", i, by)
		}
	}
}

// recordingLogger returns audit options sending every decision matching
// cond to sink.
func auditTo(t testing.TB, sink string, cond rbacconfigpb.RBAC_AuditLoggingOptions_AuditCondition) *rbacconfigpb.RBAC_AuditLoggingOptions {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{"sink": sink})
	if err != nil {
		t.Fatal(err)
	}
	return &rbacconfigpb.RBAC_AuditLoggingOptions{
		AuditCondition: cond,
		LoggerConfigs: []*rbacconfigpb.RBAC_AuditLoggingOptions_AuditLoggerConfig{{
			AuditLogger: &corepb.TypedExtensionConfig{Name: "recorder", TypedConfig: anyOf(t, &xdstypepb.TypedStruct{
				TypeUrl: "type.googleapis.com/" + recordingLoggerName, Value: s,
			})},
		}},
	}
}

// --- certificates ---

// rbacPKI is a CA and certificates it signed, made at test time.
type rbacPKI struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	pool   *x509.CertPool
}

func newRBACPKI(t testing.TB) *rbacPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &rbacPKI{caCert: ca, caKey: key, pool: pool}
}

// leaf returns a certificate for both client and server auth with the given
// URI SANs, DNS SANs and 127.0.0.1 as an IP SAN.
func (p *rbacPKI) leaf(t testing.TB, serial int64, uris []string, dns []string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "leaf"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
