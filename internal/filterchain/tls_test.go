package filterchain_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
)

// tlsInstances are the bootstrap instances the tests compile with: two of
// plugins the server runs and one of a plugin that is not registered.
var tlsInstances = map[string]bool{"identity": true, "roots": true, "spiffe": false}

func providerInstance(name string) *tlspb.CertificateProviderPluginInstance {
	return &tlspb.CertificateProviderPluginInstance{InstanceName: name}
}

// mtlsContext is a valid mTLS DownstreamTlsContext; tests break one field.
func mtlsContext() *tlspb.DownstreamTlsContext {
	return &tlspb.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateProviderInstance: providerInstance("identity"),
			ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
				CaCertificateProviderInstance: providerInstance("roots"),
			}},
		},
	}
}

// validationContext returns d's validation_context (set by mtlsContext).
func validationContext(d *tlspb.DownstreamTlsContext) *tlspb.CertificateValidationContext {
	return d.GetCommonTlsContext().GetValidationContext()
}

func withTLS(d *tlspb.DownstreamTlsContext) *listenerpb.Listener {
	return withChain(func(fc *listenerpb.FilterChain) {
		fc.TransportSocket = &corepb.TransportSocket{
			Name:       "envoy.transport_sockets.tls",
			ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: mustAny(d)},
		}
	})
}

// TestDownstreamTLSValid checks what a valid DownstreamTlsContext compiles to
// (gRFC A29).
func TestDownstreamTLSValid(t *testing.T) {
	tests := []struct {
		desc string
		tls  func(d *tlspb.DownstreamTlsContext)
		want filterchain.Security
	}{
		{
			desc: "mTLS, client certificate required",
			tls:  func(*tlspb.DownstreamTlsContext) {},
			want: filterchain.Security{IdentityInstance: "identity", RootInstance: "roots", RequireClientCert: true},
		},
		{
			desc: "mTLS, client certificate optional",
			tls:  func(d *tlspb.DownstreamTlsContext) { d.RequireClientCertificate = nil },
			want: filterchain.Security{IdentityInstance: "identity", RootInstance: "roots"},
		},
		{
			desc: "TLS only: no validation context",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.RequireClientCertificate = wrapperspb.Bool(false)
				d.CommonTlsContext.ValidationContextType = nil
				d.CommonTlsContext.TlsCertificateProviderInstance.CertificateName = "default"
			},
			want: filterchain.Security{IdentityInstance: "identity", IdentityCertName: "default"},
		},
		{
			desc: "combined_validation_context",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext: &tlspb.CertificateValidationContext{CaCertificateProviderInstance: providerInstance("roots")},
					},
				}
			},
			want: filterchain.Security{IdentityInstance: "identity", RootInstance: "roots", RequireClientCert: true},
		},
		{
			desc: "deprecated identity instance alone",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.TlsCertificateProviderInstance = nil
				d.CommonTlsContext.TlsCertificateCertificateProviderInstance = &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "identity", CertificateName: "default"}
			},
			want: filterchain.Security{IdentityInstance: "identity", IdentityCertName: "default", RootInstance: "roots", RequireClientCert: true},
		},
		{
			desc: "current identity instance wins over the deprecated one",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.TlsCertificateCertificateProviderInstance = &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "not-in-bootstrap"}
				d.CommonTlsContext.TlsCertificateCertificateProvider = &tlspb.CommonTlsContext_CertificateProvider{Name: "inline"}
			},
			want: filterchain.Security{IdentityInstance: "identity", RootInstance: "roots", RequireClientCert: true},
		},
		{
			desc: "deprecated standalone validation_context_certificate_provider_instance",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_ValidationContextCertificateProviderInstance{
					ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "roots", CertificateName: "ROOTCA"},
				}
			},
			want: filterchain.Security{IdentityInstance: "identity", RootInstance: "roots", RootCertName: "ROOTCA", RequireClientCert: true},
		},
		{
			desc: "combined: deprecated instance only",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
						ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "roots", CertificateName: "ROOTCA"},
					},
				}
			},
			want: filterchain.Security{IdentityInstance: "identity", RootInstance: "roots", RootCertName: "ROOTCA", RequireClientCert: true},
		},
		{
			desc: "combined: default context without roots, deprecated instance",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext:                     &tlspb.CertificateValidationContext{},
						ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "roots"},
					},
				}
			},
			want: filterchain.Security{IdentityInstance: "identity", RootInstance: "roots", RequireClientCert: true},
		},
		{
			desc: "combined: current roots win over the deprecated instance",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext:                     &tlspb.CertificateValidationContext{CaCertificateProviderInstance: providerInstance("roots")},
						ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "not-in-bootstrap"},
						ValidationContextCertificateProvider:         &tlspb.CommonTlsContext_CertificateProvider{Name: "inline"},
					},
				}
			},
			want: filterchain.Security{IdentityInstance: "identity", RootInstance: "roots", RequireClientCert: true},
		},
		{
			desc: "ignored fields (A29)",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.RequireSni = wrapperspb.Bool(false)
				d.OcspStaplePolicy = tlspb.DownstreamTlsContext_LENIENT_STAPLING
				d.DisableStatefulSessionResumption = true
				d.SessionTimeout = durationpb.New(time.Minute)
				d.SessionTicketKeysType = &tlspb.DownstreamTlsContext_SessionTicketKeys{SessionTicketKeys: &tlspb.TlsSessionTicketKeys{}}
				d.CommonTlsContext.AlpnProtocols = []string{"h2"}
				vc := validationContext(d)
				vc.TrustedCa = &corepb.DataSource{Specifier: &corepb.DataSource_Filename{Filename: "/ca.pem"}}
				vc.AllowExpiredCertificate = true
				vc.TrustChainVerification = tlspb.CertificateValidationContext_ACCEPT_UNTRUSTED
				vc.WatchedDirectory = &corepb.WatchedDirectory{Path: "/certs"}
			},
			want: filterchain.Security{IdentityInstance: "identity", RootInstance: "roots", RequireClientCert: true},
		},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			d := mtlsContext()
			test.tls(d)
			tbl, err := filterchain.Compile(withTLS(d), filterchain.Options{CertProviderInstances: tlsInstances})
			if err != nil {
				t.Fatalf("Compile() failed: %v", err)
			}
			sec := tbl.Chains()[0].Security
			if sec == nil {
				t.Fatal("chain has no Security, want one")
			}
			if diff := cmp.Diff(*sec, test.want); diff != "" {
				t.Errorf("Security (-got, +want):\n%s", diff)
			}
			if got, want := sec.MutualTLS(), test.want.RootInstance != ""; got != want {
				t.Errorf("MutualTLS() = %v, want %v", got, want)
			}
		})
	}
}

// TestDownstreamTLSErrors checks each NACK rule of gRFC A29 for a server's
// DownstreamTlsContext: the error names the chain and the field.
func TestDownstreamTLSErrors(t *testing.T) {
	const prefix = "transport_socket.typed_config."
	tests := []struct {
		desc      string
		tls       func(d *tlspb.DownstreamTlsContext)
		instances map[string]bool // nil: tlsInstances
		wantField string          // after prefix
		wantText  string
	}{
		{
			desc:      "require_sni true",
			tls:       func(d *tlspb.DownstreamTlsContext) { d.RequireSni = wrapperspb.Bool(true) },
			wantField: "require_sni",
		},
		{
			desc:      "ocsp_staple_policy STRICT_STAPLING",
			tls:       func(d *tlspb.DownstreamTlsContext) { d.OcspStaplePolicy = tlspb.DownstreamTlsContext_STRICT_STAPLING },
			wantField: "ocsp_staple_policy", wantText: "STRICT_STAPLING",
		},
		{
			desc:      "ocsp_staple_policy MUST_STAPLE",
			tls:       func(d *tlspb.DownstreamTlsContext) { d.OcspStaplePolicy = tlspb.DownstreamTlsContext_MUST_STAPLE },
			wantField: "ocsp_staple_policy", wantText: "MUST_STAPLE",
		},
		{
			desc:      "no common_tls_context",
			tls:       func(d *tlspb.DownstreamTlsContext) { d.CommonTlsContext = nil },
			wantField: "common_tls_context",
		},
		{
			desc:      "no identity certificate provider instance",
			tls:       func(d *tlspb.DownstreamTlsContext) { d.CommonTlsContext.TlsCertificateProviderInstance = nil },
			wantField: "common_tls_context.tls_certificate_provider_instance", wantText: "missing",
		},
		{
			desc: "empty identity instance name",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.TlsCertificateProviderInstance.InstanceName = ""
			},
			wantField: "common_tls_context.tls_certificate_provider_instance.instance_name", wantText: "empty",
		},
		{
			desc: "identity instance not in the bootstrap",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.TlsCertificateProviderInstance.InstanceName = "nope"
			},
			wantField: "common_tls_context.tls_certificate_provider_instance.instance_name", wantText: `"nope"`,
		},
		{
			desc: "identity instance with a plugin that is not registered",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.TlsCertificateProviderInstance.InstanceName = "spiffe"
			},
			wantField: "common_tls_context.tls_certificate_provider_instance.instance_name", wantText: "certprovider.Register",
		},
		{
			desc:      "bootstrap without certificate providers",
			tls:       func(*tlspb.DownstreamTlsContext) {},
			instances: map[string]bool{},
			wantField: "common_tls_context.tls_certificate_provider_instance.instance_name", wantText: `"identity"`,
		},
		{
			desc: "root instance not in the bootstrap",
			tls: func(d *tlspb.DownstreamTlsContext) {
				validationContext(d).CaCertificateProviderInstance.InstanceName = "nope"
			},
			wantField: "common_tls_context.validation_context.ca_certificate_provider_instance.instance_name", wantText: `"nope"`,
		},
		{
			desc:      "validation context without ca_certificate_provider_instance",
			tls:       func(d *tlspb.DownstreamTlsContext) { validationContext(d).CaCertificateProviderInstance = nil },
			wantField: "common_tls_context.validation_context.ca_certificate_provider_instance", wantText: "missing",
		},
		{
			desc:      "require_client_certificate without a validation context",
			tls:       func(d *tlspb.DownstreamTlsContext) { d.CommonTlsContext.ValidationContextType = nil },
			wantField: "require_client_certificate",
		},
		{
			desc: "tls_certificates",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.TlsCertificates = []*tlspb.TlsCertificate{{}}
			},
			wantField: "common_tls_context.tls_certificates",
		},
		{
			desc: "tls_certificate_sds_secret_configs",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlspb.SdsSecretConfig{{Name: "s"}}
			},
			wantField: "common_tls_context.tls_certificate_sds_secret_configs", wantText: "SDS",
		},
		{
			desc: "deprecated inline tls_certificate_certificate_provider alone",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.TlsCertificateProviderInstance = nil
				d.CommonTlsContext.TlsCertificateCertificateProvider = &tlspb.CommonTlsContext_CertificateProvider{Name: "p"}
			},
			wantField: "common_tls_context.tls_certificate_certificate_provider", wantText: "inline",
		},
		{
			desc: "deprecated identity instance not in the bootstrap",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.TlsCertificateProviderInstance = nil
				d.CommonTlsContext.TlsCertificateCertificateProviderInstance = &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "nope"}
			},
			wantField: "common_tls_context.tls_certificate_certificate_provider_instance.instance_name", wantText: `"nope"`,
		},
		{
			desc: "validation_context_sds_secret_config",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: &tlspb.SdsSecretConfig{Name: "s"}}
			},
			wantField: "common_tls_context.validation_context_sds_secret_config", wantText: "SDS",
		},
		{
			desc: "combined validation context with SDS",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext:         &tlspb.CertificateValidationContext{CaCertificateProviderInstance: providerInstance("roots")},
						ValidationContextSdsSecretConfig: &tlspb.SdsSecretConfig{Name: "s"},
					},
				}
			},
			wantField: "common_tls_context.combined_validation_context.validation_context_sds_secret_config", wantText: "SDS",
		},
		{
			desc: "combined validation context without default_validation_context",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{},
				}
			},
			wantField: "common_tls_context.combined_validation_context.default_validation_context", wantText: "missing",
		},
		{
			desc: "deprecated validation_context_certificate_provider_instance not in the bootstrap",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_ValidationContextCertificateProviderInstance{
					ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "nope"},
				}
			},
			wantField: "common_tls_context.validation_context_certificate_provider_instance.instance_name", wantText: `"nope"`,
		},
		{
			desc: "deprecated inline validation_context_certificate_provider",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_ValidationContextCertificateProvider{
					ValidationContextCertificateProvider: &tlspb.CommonTlsContext_CertificateProvider{Name: "p"},
				}
			},
			wantField: "common_tls_context.validation_context_certificate_provider", wantText: "inline",
		},
		{
			desc: "combined: deprecated inline provider, no instance",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext:             &tlspb.CertificateValidationContext{},
						ValidationContextCertificateProvider: &tlspb.CommonTlsContext_CertificateProvider{Name: "p"},
					},
				}
			},
			wantField: "common_tls_context.combined_validation_context.validation_context_certificate_provider", wantText: "inline",
		},
		{
			desc: "combined: deprecated instance not in the bootstrap",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
						ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "nope"},
					},
				}
			},
			wantField: "common_tls_context.combined_validation_context.validation_context_certificate_provider_instance.instance_name", wantText: `"nope"`,
		},
		{
			desc: "combined: default context with an unsupported field next to a deprecated instance",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext:                     &tlspb.CertificateValidationContext{VerifyCertificateHash: []string{"x"}},
						ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "roots"},
					},
				}
			},
			wantField: "common_tls_context.combined_validation_context.default_validation_context.verify_certificate_hash",
		},
		{
			desc:      "tls_params",
			tls:       func(d *tlspb.DownstreamTlsContext) { d.CommonTlsContext.TlsParams = &tlspb.TlsParameters{} },
			wantField: "common_tls_context.tls_params",
		},
		{
			desc: "custom_handshaker",
			tls: func(d *tlspb.DownstreamTlsContext) {
				d.CommonTlsContext.CustomHandshaker = &corepb.TypedExtensionConfig{Name: "h"}
			},
			wantField: "common_tls_context.custom_handshaker",
		},
		{
			desc:      "verify_certificate_spki",
			tls:       func(d *tlspb.DownstreamTlsContext) { validationContext(d).VerifyCertificateSpki = []string{"x"} },
			wantField: "common_tls_context.validation_context.verify_certificate_spki",
		},
		{
			desc:      "verify_certificate_hash",
			tls:       func(d *tlspb.DownstreamTlsContext) { validationContext(d).VerifyCertificateHash = []string{"x"} },
			wantField: "common_tls_context.validation_context.verify_certificate_hash",
		},
		{
			desc: "require_signed_certificate_timestamp",
			tls: func(d *tlspb.DownstreamTlsContext) {
				validationContext(d).RequireSignedCertificateTimestamp = wrapperspb.Bool(true)
			},
			wantField: "common_tls_context.validation_context.require_signed_certificate_timestamp",
		},
		{
			desc: "crl",
			tls: func(d *tlspb.DownstreamTlsContext) {
				validationContext(d).Crl = &corepb.DataSource{Specifier: &corepb.DataSource_Filename{Filename: "/crl"}}
			},
			wantField: "common_tls_context.validation_context.crl",
		},
		{
			desc: "custom_validator_config",
			tls: func(d *tlspb.DownstreamTlsContext) {
				validationContext(d).CustomValidatorConfig = &corepb.TypedExtensionConfig{Name: "v"}
			},
			wantField: "common_tls_context.validation_context.custom_validator_config",
		},
		{
			desc: "match_subject_alt_names on a server",
			tls: func(d *tlspb.DownstreamTlsContext) {
				validationContext(d).MatchSubjectAltNames = []*matcherpb.StringMatcher{{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "a"}}}
			},
			wantField: "common_tls_context.validation_context.match_subject_alt_names",
		},
		{
			desc: "match_typed_subject_alt_names on a server",
			tls: func(d *tlspb.DownstreamTlsContext) {
				validationContext(d).MatchTypedSubjectAltNames = []*tlspb.SubjectAltNameMatcher{{SanType: tlspb.SubjectAltNameMatcher_DNS}}
			},
			wantField: "common_tls_context.validation_context.match_typed_subject_alt_names",
		},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			d := mtlsContext()
			test.tls(d)
			instances := test.instances
			if instances == nil {
				instances = tlsInstances
			}
			tbl, err := filterchain.Compile(withTLS(d), filterchain.Options{CertProviderInstances: instances})
			if err == nil {
				t.Fatalf("Compile() = %v, nil; want an error", tbl)
			}
			var ve *filterchain.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Compile() error = %v (%T), want a *filterchain.ValidationError", err, err)
			}
			if ve.Chain != `filter_chains[0] "a"` || ve.Field != prefix+test.wantField {
				t.Errorf("Compile() error chain, field = %q, %q; want %q, %q", ve.Chain, ve.Field, `filter_chains[0] "a"`, prefix+test.wantField)
			}
			if !strings.Contains(err.Error(), test.wantText) {
				t.Errorf("Compile() error = %q, want it to mention %q", err, test.wantText)
			}
		})
	}
}

// TestDownstreamTLSNoInstanceCheck: without CertProviderInstances the names
// are not looked up, but every other rule applies.
func TestDownstreamTLSNoInstanceCheck(t *testing.T) {
	d := mtlsContext()
	d.CommonTlsContext.TlsCertificateProviderInstance.InstanceName = "anything"
	if _, err := filterchain.Compile(withTLS(d), filterchain.Options{}); err != nil {
		t.Errorf("Compile() without instances failed: %v", err)
	}
	d.RequireSni = wrapperspb.Bool(true)
	if _, err := filterchain.Compile(withTLS(d), filterchain.Options{}); err == nil {
		t.Error("Compile() with require_sni succeeded without instances, want an error")
	}
}

// TestDownstreamTLSShared: chains with identical DownstreamTlsContexts share
// one Security; a chain without transport_socket has none.
func TestDownstreamTLSShared(t *testing.T) {
	l := withTLS(mtlsContext())
	second := chain("b", &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}})
	second.TransportSocket = l.FilterChains[0].TransportSocket
	third := chain("c", &listenerpb.FilterChainMatch{SourcePorts: []uint32{2}})
	l.FilterChains = append(l.FilterChains, second, third)
	tbl, err := filterchain.Compile(l, filterchain.Options{CertProviderInstances: tlsInstances})
	if err != nil {
		t.Fatalf("Compile() failed: %v", err)
	}
	cs := tbl.Chains()
	if cs[0].Security == nil || cs[0].Security != cs[1].Security {
		t.Errorf("chains with the same DownstreamTlsContext have Security %p and %p, want one shared value", cs[0].Security, cs[1].Security)
	}
	if cs[2].Security != nil || cs[2].TLS != nil {
		t.Errorf("chain without transport_socket has Security %v, TLS %v; want nil", cs[2].Security, cs[2].TLS)
	}
}

// istiodStrictTLS is the DownstreamTlsContext istiod's proxyless generator
// (pilot/pkg/networking/grpcgen, since istio/istio#58257) sends for
// PeerAuthentication STRICT: every certificate provider is named twice, in
// the current field and in the deprecated one, with the instance "default"
// of the bootstrap istio-agent writes and the certificate names "default"
// and "ROOTCA".
func istiodStrictTLS() *tlspb.DownstreamTlsContext {
	return &tlspb.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateProviderInstance:            &tlspb.CertificateProviderPluginInstance{InstanceName: "default", CertificateName: "default"},
			TlsCertificateCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "default", CertificateName: "default"},
			ValidationContextType: &tlspb.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext: &tlspb.CertificateValidationContext{
						CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "default", CertificateName: "ROOTCA"},
					},
					ValidationContextCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{InstanceName: "default", CertificateName: "ROOTCA"},
				},
			},
		},
	}
}

// TestDownstreamTLSIstiod: istiod's STRICT mTLS context is accepted as mTLS
// with the bootstrap's "default" instance for both identity and roots, and
// the deprecated duplicates are listed as ignored.
func TestDownstreamTLSIstiod(t *testing.T) {
	tbl, err := filterchain.Compile(withTLS(istiodStrictTLS()), filterchain.Options{CertProviderInstances: map[string]bool{"default": true}})
	if err != nil {
		t.Fatalf("Compile(istiod's STRICT Listener) failed: %v", err)
	}
	want := filterchain.Security{IdentityInstance: "default", IdentityCertName: "default", RootInstance: "default", RootCertName: "ROOTCA", RequireClientCert: true}
	if diff := cmp.Diff(*tbl.Chains()[0].Security, want); diff != "" {
		t.Errorf("Security (-got, +want):\n%s", diff)
	}
	const p = `filter_chains[0] "a": transport_socket.typed_config.common_tls_context.`
	wantIgnored := []string{
		p + "tls_certificate_certificate_provider_instance: deprecated; tls_certificate_provider_instance is set and used",
		p + "combined_validation_context.validation_context_certificate_provider_instance: deprecated; ca_certificate_provider_instance is set and used",
	}
	if diff := cmp.Diff(tbl.Ignored(), wantIgnored); diff != "" {
		t.Errorf("Ignored() (-got, +want):\n%s", diff)
	}
}

// TestDownstreamTLSIgnoredOnce: a TLS config shared by several chains is
// listed once in Ignored, under the first chain using it.
func TestDownstreamTLSIgnoredOnce(t *testing.T) {
	d := mtlsContext()
	d.CommonTlsContext.AlpnProtocols = []string{"h2"}
	l := withTLS(d)
	second := chain("b", &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}})
	second.TransportSocket = l.FilterChains[0].TransportSocket
	l.FilterChains = append(l.FilterChains, second)
	tbl, err := filterchain.Compile(l, filterchain.Options{CertProviderInstances: tlsInstances})
	if err != nil {
		t.Fatalf("Compile() failed: %v", err)
	}
	want := []string{`filter_chains[0] "a": transport_socket.typed_config.common_tls_context.alpn_protocols: a gRPC server always negotiates h2 (gRFC A29)`}
	if diff := cmp.Diff(tbl.Ignored(), want); diff != "" {
		t.Errorf("Ignored() (-got, +want):\n%s", diff)
	}
}
