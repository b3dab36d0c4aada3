package istio

import (
	"context"
	"net/netip"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"istio.io/istio/pkg/istio-agent/grpcxds"
)

const listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"

// inboundListener asks istiod, over an ADS stream of its own with the echo
// pod's node, for the Listener the echo server subscribes to, and returns
// it as istiod first sends it.
func (m *mesh) inboundListener(t *testing.T) *listenerpb.Listener {
	t.Helper()
	ctx := testContext(t)
	name := grpcxds.ServerListenerNamePrefix + netip.AddrPortFrom(echoPod.ip, m.echoPort()).String()
	node := m.bootstrapConfig(t, echoPod, t.TempDir()).Node
	cc, err := grpc.NewClient(m.xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discoverypb.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("ADS stream to istiod: %v", err)
	}
	if err := stream.Send(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: listenerType, ResourceNames: []string{name}}); err != nil {
		t.Fatalf("ADS request: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("ADS response: %v", err)
	}
	for _, r := range resp.GetResources() {
		l := &listenerpb.Listener{}
		if err := r.UnmarshalTo(l); err != nil {
			t.Fatalf("decoding istiod's Listener: %v", err)
		}
		if l.GetName() == name {
			return l
		}
	}
	t.Fatalf("istiod's Listener response has no %q (%d resources)", name, len(resp.GetResources()))
	return nil
}

func (m *mesh) echoPort() uint16 {
	return netip.MustParseAddrPort(m.echoLis.Addr().String()).Port()
}

// listenerShape is what matters to a gRPC server of one of istiod's inbound
// Listeners.
type listenerShape struct {
	Chains int
	// Matches counts the filter chains with a filter_chain_match.
	Matches int
	// TLS describes the DownstreamTlsContext of the first chain: "" (none,
	// plaintext), else which fields are set.
	TLS []string
	// Filters are the HTTP filters of the first chain, in order, with the
	// RBAC action where the filter is RBAC.
	Filters []string
	// Route is "inline" or "rds".
	Route string
}

func shapeOf(t *testing.T, l *listenerpb.Listener) listenerShape {
	t.Helper()
	s := listenerShape{Chains: len(l.GetFilterChains())}
	for _, fc := range l.GetFilterChains() {
		if fc.GetFilterChainMatch() != nil {
			s.Matches++
		}
	}
	if s.Chains == 0 {
		return s
	}
	fc := l.GetFilterChains()[0]
	if ts := fc.GetTransportSocket(); ts != nil {
		d := &tlspb.DownstreamTlsContext{}
		if err := ts.GetTypedConfig().UnmarshalTo(d); err != nil {
			t.Fatalf("transport_socket %q: %v", ts.GetName(), err)
		}
		s.TLS = tlsFields(d)
	}
	hcm := &hcmpb.HttpConnectionManager{}
	if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatalf("filter %q: %v", fc.GetFilters()[0].GetName(), err)
	}
	s.Route = "rds"
	if hcm.GetRouteConfig() != nil {
		s.Route = "inline"
	}
	for _, f := range hcm.GetHttpFilters() {
		name := f.GetName()
		r := &rbacpb.RBAC{}
		if f.GetTypedConfig().MessageIs(r) {
			if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
				t.Fatal(err)
			}
			name += " (" + r.GetRules().GetAction().String() + ")"
		}
		s.Filters = append(s.Filters, name)
	}
	return s
}

// tlsFields lists the certificate fields set in d.
func tlsFields(d *tlspb.DownstreamTlsContext) []string {
	var out []string
	add := func(set bool, field string) {
		if set {
			out = append(out, field)
		}
	}
	c := d.GetCommonTlsContext()
	add(d.GetRequireClientCertificate().GetValue(), "require_client_certificate")
	add(c.GetTlsCertificateProviderInstance() != nil, "tls_certificate_provider_instance")
	add(c.GetTlsCertificateCertificateProviderInstance() != nil, "tls_certificate_certificate_provider_instance (deprecated)")
	add(c.GetValidationContext() != nil, "validation_context")
	cv := c.GetCombinedValidationContext()
	add(cv.GetDefaultValidationContext().GetCaCertificateProviderInstance() != nil, "combined_validation_context.default_validation_context.ca_certificate_provider_instance")
	add(cv.GetValidationContextCertificateProviderInstance() != nil, "combined_validation_context.validation_context_certificate_provider_instance (deprecated)")
	add(len(cv.GetDefaultValidationContext().GetMatchSubjectAltNames()) > 0, "match_subject_alt_names")
	return out
}

// TestWhatIstiodSends records the shape of the inbound Listener istiod
// generates for the echo pod in each mode the other tests use (the table of
// the README), so that a new istio version that changes it is noticed. Run
// with -v to see each Listener in JSON.
func TestWhatIstiodSends(t *testing.T) {
	mtls := []string{
		"require_client_certificate",
		"tls_certificate_provider_instance",
		"tls_certificate_certificate_provider_instance (deprecated)",
		"combined_validation_context.default_validation_context.ca_certificate_provider_instance",
		"combined_validation_context.validation_context_certificate_provider_instance (deprecated)",
	}
	router := "envoy.filters.http.router"
	tests := []struct {
		desc string
		spec meshSpec
		want listenerShape
	}{
		{
			desc: "STRICT",
			spec: meshSpec{config: peerAuthentication("STRICT")},
			want: listenerShape{Chains: 1, TLS: mtls, Filters: []string{router}, Route: "inline"},
		},
		{
			desc: "PERMISSIVE without the tlsMode label",
			spec: meshSpec{config: peerAuthentication("PERMISSIVE")},
			want: listenerShape{Chains: 1, Filters: []string{router}, Route: "inline"},
		},
		{
			desc: "PERMISSIVE with the tlsMode label",
			spec: meshSpec{echoLabels: map[string]string{tlsModeLabel: "istio"}, config: peerAuthentication("PERMISSIVE")},
			want: listenerShape{Chains: 1, TLS: mtls, Filters: []string{router}, Route: "inline"},
		},
		{
			desc: "DISABLE",
			spec: meshSpec{config: peerAuthentication("DISABLE")},
			want: listenerShape{Chains: 1, Filters: []string{router}, Route: "inline"},
		},
		{
			desc: "STRICT, AuthorizationPolicies ALLOW and DENY",
			spec: meshSpec{config: yamlDocs(peerAuthentication("STRICT"),
				authorizationPolicy("allow", "ALLOW", `
  - from:
    - source:
        principals: ["cluster.local/ns/client/sa/client"]
    - source:
        namespaces: ["client"]
  - to:
    - operation:
        paths: ["/grpc.testing.TestService/UnaryCall"]
`),
				authorizationPolicy("deny", "DENY", `
  - from:
    - source:
        principals: ["cluster.local/ns/other/sa/other"]
    to:
    - operation:
        paths: ["/grpc.testing.TestService/EmptyCall"]
`))},
			want: listenerShape{Chains: 1, TLS: mtls, Filters: []string{
				"envoy.filters.http.rbac.DENY (DENY)", "envoy.filters.http.rbac (ALLOW)", router,
			}, Route: "inline"},
		},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			m := newMesh(t, test.spec)
			l := m.inboundListener(t)
			t.Logf("istiod's Listener:\n%s", protojson.Format(l))
			if diff := cmp.Diff(shapeOf(t, l), test.want); diff != "" {
				t.Errorf("Listener shape (-got, +want):\n%s", diff)
			}
		})
	}
}
