package filterchain

import (
	"errors"
	"fmt"

	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// Security is the validated server-side TLS configuration of a filter chain:
// its DownstreamTlsContext reduced to what gRFC A29 lets a gRPC server honour.
// Certificates come from certificate provider instances of the bootstrap's
// certificate_providers. Immutable.
type Security struct {
	// IdentityInstance is the certificate provider instance that supplies the
	// server's certificate chain and private key
	// (common_tls_context.tls_certificate_provider_instance). Never empty.
	IdentityInstance string
	// IdentityCertName is that instance's certificate_name (informational:
	// file_watcher ignores it).
	IdentityCertName string
	// RootInstance is the certificate provider instance that supplies the
	// roots that verify client certificates (ca_certificate_provider_instance
	// of the validation context). Empty when the chain has no validation
	// context: the server then does not ask for a client certificate (TLS,
	// not mTLS).
	RootInstance string
	// RootCertName is RootInstance's certificate_name (informational).
	RootCertName string
	// RequireClientCert is require_client_certificate: a client must present
	// a certificate that chains to RootInstance's roots. When false and
	// RootInstance is set, a client certificate is asked for and verified if
	// given. Only true when RootInstance is set.
	RequireClientCert bool
}

// MutualTLS reports whether the server asks clients for a certificate.
func (s *Security) MutualTLS() bool { return s.RootInstance != "" }

// validateDownstreamTLS checks a DownstreamTlsContext against gRFC A29 ("LDS
// for Server Side Security", "CommonTlsContext Processing") and reduces it to
// a Security. instances, when not nil, maps every certificate provider
// instance name of the bootstrap to whether its plugin is supported; names
// are then checked against it. Errors are fieldErrors relative to the
// DownstreamTlsContext.
func validateDownstreamTLS(d *tlspb.DownstreamTlsContext, instances map[string]bool) (*Security, error) {
	// A29: require_sni true cannot be honoured; ignoring it would accept
	// connections the control plane wants refused.
	if d.GetRequireSni().GetValue() {
		return nil, fieldErrorf("require_sni", "is true, which gRPC does not support")
	}
	// A29: any OCSP stapling policy other than LENIENT_STAPLING is NACKed.
	if p := d.GetOcspStaplePolicy(); p != tlspb.DownstreamTlsContext_LENIENT_STAPLING {
		return nil, fieldErrorf("ocsp_staple_policy", "is %v, want LENIENT_STAPLING", p)
	}
	ctc := d.GetCommonTlsContext()
	if ctc == nil {
		return nil, fieldErrorf("common_tls_context", "is missing, want a tls_certificate_provider_instance")
	}
	sec, err := validateCommonTLS(ctc, instances)
	if err != nil {
		return nil, inField("common_tls_context", err)
	}
	// A29: require_client_certificate without a CertificateValidationContext
	// is NACKed: there would be nothing to verify the certificate with.
	if d.GetRequireClientCertificate().GetValue() {
		if sec.RootInstance == "" {
			return nil, fieldErrorf("require_client_certificate", "is true but common_tls_context has no validation context to verify client certificates with")
		}
		sec.RequireClientCert = true
	}
	return sec, nil
}

// validateCommonTLS checks a server's CommonTlsContext (gRFC A29,
// "CommonTlsContext Processing"). The returned Security has
// RequireClientCert unset.
func validateCommonTLS(ctc *tlspb.CommonTlsContext, instances map[string]bool) (*Security, error) {
	// A29: tls_params and custom_handshaker are NACKed, since ignoring them
	// compromises security.
	if ctc.GetTlsParams() != nil {
		return nil, fieldErrorf("tls_params", "is not supported")
	}
	if ctc.GetCustomHandshaker() != nil {
		return nil, fieldErrorf("custom_handshaker", "is not supported")
	}
	// A29: gRPC gets the identity only from a certificate provider instance;
	// the other ways to configure it (and SDS) are NACKed.
	if len(ctc.GetTlsCertificates()) > 0 {
		return nil, fieldErrorf("tls_certificates", "is not supported, want tls_certificate_provider_instance")
	}
	if len(ctc.GetTlsCertificateSdsSecretConfigs()) > 0 {
		return nil, fieldErrorf("tls_certificate_sds_secret_configs", "SDS is not supported, want tls_certificate_provider_instance")
	}
	if ctc.GetCustomTlsCertificateSelector() != nil {
		return nil, fieldErrorf("custom_tls_certificate_selector", "is not supported, want tls_certificate_provider_instance")
	}
	if ctc.GetTlsCertificateCertificateProvider() != nil || ctc.GetTlsCertificateCertificateProviderInstance() != nil {
		return nil, fieldErrorf("tls_certificate_certificate_provider_instance", "deprecated fields are not supported, want tls_certificate_provider_instance")
	}
	id := ctc.GetTlsCertificateProviderInstance()
	if id == nil {
		return nil, fieldErrorf("tls_certificate_provider_instance", "is missing: a server needs an identity certificate provider instance")
	}
	if err := checkInstance(id.GetInstanceName(), instances); err != nil {
		return nil, inField("tls_certificate_provider_instance.instance_name", err)
	}
	sec := &Security{IdentityInstance: id.GetInstanceName(), IdentityCertName: id.GetCertificateName()}

	var vc *tlspb.CertificateValidationContext
	var vcField string
	switch v := ctc.GetValidationContextType().(type) {
	case nil:
		return sec, nil // A29: no validation context, no client certificate asked for
	case *tlspb.CommonTlsContext_ValidationContext:
		vc, vcField = v.ValidationContext, "validation_context"
	case *tlspb.CommonTlsContext_CombinedValidationContext:
		cvc := v.CombinedValidationContext
		if cvc.GetValidationContextSdsSecretConfig() != nil {
			return nil, fieldErrorf("combined_validation_context.validation_context_sds_secret_config", "SDS is not supported")
		}
		if cvc.GetValidationContextCertificateProvider() != nil || cvc.GetValidationContextCertificateProviderInstance() != nil {
			return nil, fieldErrorf("combined_validation_context.validation_context_certificate_provider_instance", "deprecated fields are not supported, want default_validation_context.ca_certificate_provider_instance")
		}
		vc, vcField = cvc.GetDefaultValidationContext(), "combined_validation_context.default_validation_context"
	case *tlspb.CommonTlsContext_ValidationContextSdsSecretConfig:
		// A29: SDS is not supported.
		return nil, fieldErrorf("validation_context_sds_secret_config", "SDS is not supported")
	case *tlspb.CommonTlsContext_ValidationContextCertificateProvider, *tlspb.CommonTlsContext_ValidationContextCertificateProviderInstance:
		return nil, fieldErrorf("validation_context_certificate_provider_instance", "deprecated fields are not supported, want validation_context.ca_certificate_provider_instance")
	default:
		return nil, fieldErrorf("validation_context_type", "unsupported %T", v)
	}
	if vc == nil {
		// A combined context without a default validation context has
		// nothing to verify clients with.
		return nil, fieldErrorf(vcField, "is missing, want a ca_certificate_provider_instance")
	}
	if err := validateValidationContext(vc, instances); err != nil {
		return nil, inField(vcField, err)
	}
	root := vc.GetCaCertificateProviderInstance()
	sec.RootInstance, sec.RootCertName = root.GetInstanceName(), root.GetCertificateName()
	return sec, nil
}

// validateValidationContext checks a server's CertificateValidationContext
// (gRFC A29, "CommonTlsContext Processing").
func validateValidationContext(vc *tlspb.CertificateValidationContext, instances map[string]bool) error {
	// A29: these fields cannot be ignored without compromising security.
	switch {
	case len(vc.GetVerifyCertificateSpki()) > 0:
		return fieldErrorf("verify_certificate_spki", "is not supported")
	case len(vc.GetVerifyCertificateHash()) > 0:
		return fieldErrorf("verify_certificate_hash", "is not supported")
	case vc.GetRequireSignedCertificateTimestamp() != nil:
		return fieldErrorf("require_signed_certificate_timestamp", "is not supported")
	case vc.GetCrl() != nil:
		return fieldErrorf("crl", "is not supported")
	case vc.GetCustomValidatorConfig() != nil:
		return fieldErrorf("custom_validator_config", "is not supported")
	}
	// A29 lets a server support match_subject_alt_names or NACK it; this
	// server leaves client authorization to RBAC (gRFC A41) and NACKs it,
	// with its typed successor.
	if len(vc.GetMatchSubjectAltNames()) > 0 {
		return fieldErrorf("match_subject_alt_names", "is not supported on a server (authorize clients with RBAC)")
	}
	if len(vc.GetMatchTypedSubjectAltNames()) > 0 {
		return fieldErrorf("match_typed_subject_alt_names", "is not supported on a server (authorize clients with RBAC)")
	}
	// A29: the roots come from a certificate provider instance, required.
	root := vc.GetCaCertificateProviderInstance()
	if root == nil {
		return fieldErrorf("ca_certificate_provider_instance", "is missing: verifying client certificates needs a root certificate provider instance")
	}
	if err := checkInstance(root.GetInstanceName(), instances); err != nil {
		return inField("ca_certificate_provider_instance.instance_name", err)
	}
	return nil
}

var errEmptyInstance = errors.New("is empty")

// checkInstance checks that a certificate provider instance name is in the
// bootstrap (gRFC A29) with a supported plugin; instances nil skips that.
func checkInstance(name string, instances map[string]bool) error {
	if name == "" {
		return errEmptyInstance
	}
	if instances == nil {
		return nil
	}
	supported, ok := instances[name]
	if !ok {
		return fmt.Errorf("certificate provider instance %q is not in the bootstrap's certificate_providers", name)
	}
	if !supported {
		return fmt.Errorf("certificate provider instance %q uses a plugin this server does not support (only file_watcher)", name)
	}
	return nil
}
