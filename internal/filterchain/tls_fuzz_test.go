package filterchain

import (
	"testing"

	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
)

// FuzzDownstreamTLS: any bytes decoded as a DownstreamTlsContext are either
// rejected or give a Security whose instances are the bootstrap's and whose
// mTLS requirement has a root instance (gRFC A29).
func FuzzDownstreamTLS(f *testing.F) {
	for _, s := range []*tlspb.DownstreamTlsContext{
		{},
		{CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "id"},
		}},
		{
			RequireClientCertificate: nil,
			CommonTlsContext: &tlspb.CommonTlsContext{
				TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "id"},
				ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
					CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "roots"},
				}},
			},
		},
	} {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	instances := map[string]bool{"id": true, "roots": true, "other-plugin": false}
	f.Fuzz(func(t *testing.T, b []byte) {
		d := &tlspb.DownstreamTlsContext{}
		if proto.Unmarshal(b, d) != nil {
			return
		}
		sec, err := validateDownstreamTLS(d, instances, func(string, string) {})
		if err != nil {
			return
		}
		if sec == nil {
			t.Fatal("validateDownstreamTLS returned neither a Security nor an error")
		}
		if !instances[sec.IdentityInstance] {
			t.Errorf("accepted identity instance %q, not a supported bootstrap instance", sec.IdentityInstance)
		}
		if sec.RootInstance != "" && !instances[sec.RootInstance] {
			t.Errorf("accepted root instance %q, not a supported bootstrap instance", sec.RootInstance)
		}
		if d.GetRequireClientCertificate().GetValue() && !sec.MutualTLS() {
			t.Errorf("require_client_certificate accepted without a root instance")
		}
	})
}
