package accesslog

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"strings"
)

// tlsCommands are the operators on the connection's TLS: its version and
// cipher, and the certificates of the client (peer) and the server
// (local). Each has no value ("-") in plaintext, or when the value is
// empty (a certificate without URI SANs has no %DOWNSTREAM_PEER_URI_SAN%),
// as in Envoy.
var tlsCommands = map[string]command{
	"DOWNSTREAM_TLS_VERSION": {build: constant(strOp(tlsVersion))},
	"DOWNSTREAM_TLS_CIPHER":  {build: constant(strOp(cipherName))},

	"DOWNSTREAM_PEER_URI_SAN":   {build: certOp(peerLeaf, uriSANs)},
	"DOWNSTREAM_PEER_DNS_SAN":   {build: certOp(peerLeaf, dnsSANs)},
	"DOWNSTREAM_PEER_IP_SAN":    {build: certOp(peerLeaf, ipSANs)},
	"DOWNSTREAM_PEER_EMAIL_SAN": {build: certOp(peerLeaf, emailSANs)},
	"DOWNSTREAM_PEER_SUBJECT":   {build: certOp(peerLeaf, func(c *x509.Certificate) string { return c.Subject.String() })},
	"DOWNSTREAM_PEER_ISSUER":    {build: certOp(peerLeaf, func(c *x509.Certificate) string { return c.Issuer.String() })},
	"DOWNSTREAM_PEER_SERIAL":    {build: certOp(peerLeaf, serial)},
	"DOWNSTREAM_PEER_CERT":      {build: certOp(peerLeaf, urlEncodedPEM)},

	"DOWNSTREAM_PEER_FINGERPRINT_256": {build: certOp(peerLeaf, sha256Hex)},
	"DOWNSTREAM_PEER_FINGERPRINT_1":   {build: certOp(peerLeaf, sha1Hex)},

	"DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_256": {build: chainOp(sha256Hex)},
	"DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_1":   {build: chainOp(sha1Hex)},
	"DOWNSTREAM_PEER_CHAIN_SERIALS":          {build: chainOp(serial)},

	"DOWNSTREAM_PEER_CERT_V_START": {syntax: paramsOptional, build: buildTime(peerCertStart, false)},
	"DOWNSTREAM_PEER_CERT_V_END":   {syntax: paramsOptional, build: buildTime(peerCertEnd, false)},

	"DOWNSTREAM_LOCAL_URI_SAN":   {build: certOp(localCert, uriSANs)},
	"DOWNSTREAM_LOCAL_DNS_SAN":   {build: certOp(localCert, dnsSANs)},
	"DOWNSTREAM_LOCAL_IP_SAN":    {build: certOp(localCert, ipSANs)},
	"DOWNSTREAM_LOCAL_EMAIL_SAN": {build: certOp(localCert, emailSANs)},
	"DOWNSTREAM_LOCAL_SUBJECT":   {build: certOp(localCert, func(c *x509.Certificate) string { return c.Subject.String() })},
}

// tlsVersion names the TLS version as OpenSSL does ("TLSv1.3").
func tlsVersion(r *Record) string {
	switch r.TLSVersion {
	case tls.VersionTLS10:
		return "TLSv1"
	case tls.VersionTLS11:
		return "TLSv1.1"
	case tls.VersionTLS12:
		return "TLSv1.2"
	case tls.VersionTLS13:
		return "TLSv1.3"
	case 0:
		return ""
	}
	return "unknown"
}

// opensslCiphers are OpenSSL's names of the TLS 1.2 cipher suites Go
// implements (Envoy prints these); TLS 1.3 suites have one name.
var opensslCiphers = map[uint16]string{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:       "ECDHE-ECDSA-AES128-GCM-SHA256",
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256:         "ECDHE-RSA-AES128-GCM-SHA256",
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384:       "ECDHE-ECDSA-AES256-GCM-SHA384",
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384:         "ECDHE-RSA-AES256-GCM-SHA384",
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: "ECDHE-ECDSA-CHACHA20-POLY1305",
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:   "ECDHE-RSA-CHACHA20-POLY1305",
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA:          "ECDHE-ECDSA-AES128-SHA",
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA:            "ECDHE-RSA-AES128-SHA",
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA:          "ECDHE-ECDSA-AES256-SHA",
	tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA:            "ECDHE-RSA-AES256-SHA",
	tls.TLS_RSA_WITH_AES_128_GCM_SHA256:               "AES128-GCM-SHA256",
	tls.TLS_RSA_WITH_AES_256_GCM_SHA384:               "AES256-GCM-SHA384",
	tls.TLS_RSA_WITH_AES_128_CBC_SHA:                  "AES128-SHA",
	tls.TLS_RSA_WITH_AES_256_CBC_SHA:                  "AES256-SHA",
}

// cipherName names the cipher suite as OpenSSL does.
func cipherName(r *Record) string {
	if r.TLSVersion == 0 {
		return ""
	}
	if n, ok := opensslCiphers[r.CipherSuite]; ok {
		return n
	}
	return tls.CipherSuiteName(r.CipherSuite)
}

// peerLeaf returns the client's certificate, nil when it sent none.
func peerLeaf(r *Record) *x509.Certificate {
	if len(r.PeerCertificates) == 0 {
		return nil
	}
	return r.PeerCertificates[0]
}

func localCert(r *Record) *x509.Certificate { return r.LocalCertificate }

// certOp builds an operator printing f of a certificate of the record.
func certOp(which func(*Record) *x509.Certificate, f func(*x509.Certificate) string) func(*compiler, string, int) (operator, error) {
	return constant(strOp(func(r *Record) string {
		if c := which(r); c != nil {
			return f(c)
		}
		return ""
	}))
}

// chainOp builds an operator printing f of each certificate of the
// client's chain, joined with ",".
func chainOp(f func(*x509.Certificate) string) func(*compiler, string, int) (operator, error) {
	return constant(strOp(func(r *Record) string {
		parts := make([]string, len(r.PeerCertificates))
		for i, c := range r.PeerCertificates {
			parts[i] = f(c)
		}
		return strings.Join(parts, ",")
	}))
}

func uriSANs(c *x509.Certificate) string {
	parts := make([]string, len(c.URIs))
	for i, u := range c.URIs {
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

func dnsSANs(c *x509.Certificate) string { return strings.Join(c.DNSNames, ",") }

func emailSANs(c *x509.Certificate) string { return strings.Join(c.EmailAddresses, ",") }

func ipSANs(c *x509.Certificate) string {
	parts := make([]string, len(c.IPAddresses))
	for i, ip := range c.IPAddresses {
		parts[i] = ip.String()
	}
	return strings.Join(parts, ",")
}

// serial prints a certificate's serial number as Envoy does (BoringSSL's
// BN_bn2hex): lower-case hex, two digits a byte.
func serial(c *x509.Certificate) string {
	if c.SerialNumber == nil {
		return ""
	}
	b := c.SerialNumber.Bytes()
	if len(b) == 0 {
		return "0"
	}
	return hex.EncodeToString(b)
}

func sha256Hex(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

func sha1Hex(c *x509.Certificate) string {
	sum := sha1.Sum(c.Raw)
	return hex.EncodeToString(sum[:])
}

// pemEscaper URL-encodes a PEM certificate as Envoy does for
// %DOWNSTREAM_PEER_CERT%: newline, space, '+', '/' and '='.
var pemEscaper = strings.NewReplacer("\n", "%0A", " ", "%20", "+", "%2B", "/", "%2F", "=", "%3D")

func urlEncodedPEM(c *x509.Certificate) string {
	return pemEscaper.Replace(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})))
}
