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
	// IdentityCertName is that instance's certificate_name: file_watcher
	// ignores it; a plugin of grpc-go's registry is built with it
	// (BuildOptions.CertName).
	IdentityCertName string
	// RootInstance is the certificate provider instance that supplies the
	// roots that verify client certificates (ca_certificate_provider_instance
	// of the validation context). Empty when the chain has no validation
	// context: the server then does not ask for a client certificate (TLS,
	// not mTLS).
	RootInstance string
	// RootCertName is RootInstance's certificate_name, used as
	// IdentityCertName is.
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
// DownstreamTlsContext. Fields that are accepted but have no effect are
// reported to ignore, relative to the DownstreamTlsContext.
func validateDownstreamTLS(d *tlspb.DownstreamTlsContext, instances map[string]bool, ignore func(field, why string)) (*Security, error) {
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
	sec, err := validateCommonTLS(ctc, instances, func(field, why string) { ignore("common_tls_context."+field, why) })
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
	// A29 "The following fields in an LDS update are ignored".
	if d.GetSessionTicketKeysType() != nil {
		ignore("session_ticket_keys", "session tickets are gRPC's own (gRFC A29)")
	}
	if d.GetSessionTimeout() != nil {
		ignore("session_timeout", "gRPC's TLS stack sets it (gRFC A29)")
	}
	return sec, nil
}

// instanceRef is a certificate provider instance named by a TLS context,
// and the field that named it (for errors).
type instanceRef struct {
	field          string
	name, certName string
}

// validateCommonTLS checks a server's CommonTlsContext (gRFC A29,
// "CommonTlsContext Processing"). The returned Security has
// RequireClientCert unset.
func validateCommonTLS(ctc *tlspb.CommonTlsContext, instances map[string]bool, ignore func(field, why string)) (*Security, error) {
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
	if len(ctc.GetAlpnProtocols()) > 0 {
		ignore("alpn_protocols", "a gRPC server always negotiates h2 (gRFC A29)")
	}
	id, err := identityInstance(ctc, ignore)
	if err != nil {
		return nil, err
	}
	if err := checkInstance(id.name, instances); err != nil {
		return nil, inField(id.field+".instance_name", err)
	}
	sec := &Security{IdentityInstance: id.name, IdentityCertName: id.certName}
	root, err := rootInstance(ctc, ignore)
	if err != nil || root == nil {
		return sec, err // no root: A29 TLS without a client certificate
	}
	if err := checkInstance(root.name, instances); err != nil {
		return nil, inField(root.field+".instance_name", err)
	}
	sec.RootInstance, sec.RootCertName = root.name, root.certName
	return sec, nil
}

// identityInstance returns the identity certificate provider instance:
// tls_certificate_provider_instance (gRFC A29), or when it is unset the
// deprecated tls_certificate_certificate_provider_instance, which means the
// same (istiod sets both; grpc-go reads the second when the first is unset).
// The deprecated inline tls_certificate_certificate_provider names no
// instance: it is ignored next to an instance and NACKed alone.
func identityInstance(ctc *tlspb.CommonTlsContext, ignore func(field, why string)) (instanceRef, error) {
	cur := ctc.GetTlsCertificateProviderInstance()
	dep := ctc.GetTlsCertificateCertificateProviderInstance()
	switch {
	case cur != nil:
		if dep != nil {
			ignore("tls_certificate_certificate_provider_instance", "deprecated; tls_certificate_provider_instance is set and used")
		}
		if ctc.GetTlsCertificateCertificateProvider() != nil {
			ignore("tls_certificate_certificate_provider", "deprecated; tls_certificate_provider_instance is set and used")
		}
		return instanceRef{field: "tls_certificate_provider_instance", name: cur.GetInstanceName(), certName: cur.GetCertificateName()}, nil
	case dep != nil:
		if ctc.GetTlsCertificateCertificateProvider() != nil {
			ignore("tls_certificate_certificate_provider", "deprecated; tls_certificate_certificate_provider_instance is set and used")
		}
		return instanceRef{field: "tls_certificate_certificate_provider_instance", name: dep.GetInstanceName(), certName: dep.GetCertificateName()}, nil
	case ctc.GetTlsCertificateCertificateProvider() != nil:
		return instanceRef{}, fieldErrorf("tls_certificate_certificate_provider", "an inline certificate provider is not supported, want tls_certificate_provider_instance")
	}
	return instanceRef{}, fieldErrorf("tls_certificate_provider_instance", "is missing: a server needs an identity certificate provider instance")
}

// rootInstance returns the certificate provider instance of the roots that
// verify client certificates, or nil when the context has no validation
// context (gRFC A29: TLS, no client certificate asked for). The roots come
// from ca_certificate_provider_instance of validation_context or of
// combined_validation_context.default_validation_context (A29), or when it
// is unset from the deprecated validation_context_certificate_provider_instance,
// standalone or in combined_validation_context, which means the same.
func rootInstance(ctc *tlspb.CommonTlsContext, ignore func(field, why string)) (*instanceRef, error) {
	switch v := ctc.GetValidationContextType().(type) {
	case nil:
		return nil, nil
	case *tlspb.CommonTlsContext_ValidationContext:
		return validationContextRoot("validation_context", v.ValidationContext, nil, ignore)
	case *tlspb.CommonTlsContext_CombinedValidationContext:
		cvc := v.CombinedValidationContext
		const field = "combined_validation_context"
		if cvc.GetValidationContextSdsSecretConfig() != nil {
			return nil, fieldErrorf(field+".validation_context_sds_secret_config", "SDS is not supported")
		}
		var dep *instanceRef
		if p := cvc.GetValidationContextCertificateProviderInstance(); p != nil {
			dep = &instanceRef{field: field + ".validation_context_certificate_provider_instance", name: p.GetInstanceName(), certName: p.GetCertificateName()}
		}
		if cvc.GetValidationContextCertificateProvider() != nil {
			if dep == nil && cvc.GetDefaultValidationContext().GetCaCertificateProviderInstance() == nil {
				return nil, fieldErrorf(field+".validation_context_certificate_provider", "an inline certificate provider is not supported, want default_validation_context.ca_certificate_provider_instance")
			}
			ignore(field+".validation_context_certificate_provider", "deprecated; a certificate provider instance is set and used")
		}
		dvc := cvc.GetDefaultValidationContext()
		if dvc == nil && dep == nil {
			// Nothing to verify clients with.
			return nil, fieldErrorf(field+".default_validation_context", "is missing, want a ca_certificate_provider_instance")
		}
		return validationContextRoot(field+".default_validation_context", dvc, dep, ignore)
	case *tlspb.CommonTlsContext_ValidationContextSdsSecretConfig:
		// A29: SDS is not supported.
		return nil, fieldErrorf("validation_context_sds_secret_config", "SDS is not supported")
	case *tlspb.CommonTlsContext_ValidationContextCertificateProviderInstance:
		p := v.ValidationContextCertificateProviderInstance
		return &instanceRef{field: "validation_context_certificate_provider_instance", name: p.GetInstanceName(), certName: p.GetCertificateName()}, nil
	case *tlspb.CommonTlsContext_ValidationContextCertificateProvider:
		return nil, fieldErrorf("validation_context_certificate_provider", "an inline certificate provider is not supported, want validation_context.ca_certificate_provider_instance")
	default:
		return nil, fieldErrorf("validation_context_type", "unsupported %T", v)
	}
}

// validationContextRoot checks a server's CertificateValidationContext
// (gRFC A29, "CommonTlsContext Processing"), at field, and returns its
// ca_certificate_provider_instance, else dep (a deprecated instance field
// beside it), else an error. vc may be nil when dep is not.
func validationContextRoot(field string, vc *tlspb.CertificateValidationContext, dep *instanceRef, ignore func(field, why string)) (*instanceRef, error) {
	if err := validateValidationContext(vc, func(f, why string) { ignore(field+"."+f, why) }); err != nil {
		return nil, inField(field, err)
	}
	if root := vc.GetCaCertificateProviderInstance(); root != nil {
		if dep != nil {
			ignore(dep.field, "deprecated; ca_certificate_provider_instance is set and used")
		}
		return &instanceRef{field: field + ".ca_certificate_provider_instance", name: root.GetInstanceName(), certName: root.GetCertificateName()}, nil
	}
	if dep != nil {
		return dep, nil
	}
	// A29: the roots come from a certificate provider instance, required.
	return nil, fieldErrorf(field+".ca_certificate_provider_instance", "is missing: verifying client certificates needs a root certificate provider instance")
}

// validateValidationContext checks the fields of a server's
// CertificateValidationContext other than its roots (gRFC A29,
// "CommonTlsContext Processing"). vc may be nil.
func validateValidationContext(vc *tlspb.CertificateValidationContext, ignore func(field, why string)) error {
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
	// with its typed successor: ignoring them would accept clients the
	// control plane wants refused.
	if len(vc.GetMatchSubjectAltNames()) > 0 {
		return fieldErrorf("match_subject_alt_names", "is not supported on a server (authorize clients with RBAC)")
	}
	if len(vc.GetMatchTypedSubjectAltNames()) > 0 {
		return fieldErrorf("match_typed_subject_alt_names", "is not supported on a server (authorize clients with RBAC)")
	}
	// A29 "The following fields from CertificateValidationContext are
	// ignored".
	if vc.GetTrustedCa() != nil {
		ignore("trusted_ca", "the roots come from ca_certificate_provider_instance (gRFC A29)")
	}
	if vc.GetWatchedDirectory() != nil {
		ignore("watched_directory", "certificate providers watch their own files (gRFC A29)")
	}
	if vc.GetAllowExpiredCertificate() {
		ignore("allow_expired_certificate", "expired client certificates are refused (gRFC A29)")
	}
	if vc.GetTrustChainVerification() != tlspb.CertificateValidationContext_VERIFY_TRUST_CHAIN {
		ignore("trust_chain_verification", "client certificates are always verified (gRFC A29)")
	}
	return nil
}

var errEmptyInstance = errors.New("is empty")

// checkInstance checks that a certificate provider instance name is in the
// bootstrap (gRFC A29) with a plugin this server can run: its own
// file_watcher, or one registered with grpc-go's certprovider registry.
// instances nil skips that.
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
		return fmt.Errorf("certificate provider instance %q uses a plugin that is not registered in this process "+
			"(built in: file_watcher; register others with google.golang.org/grpc/credentials/tls/certprovider.Register)", name)
	}
	return nil
}
