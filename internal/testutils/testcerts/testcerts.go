// Package testcerts makes certificate authorities and certificates at test
// time (ECDSA P-256, crypto/x509), SPIFFE bundle maps and JWTs, so that no
// key, certificate or token is committed. Only tests import it.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate in PEM form (a ca_certificate_file).
	PEM []byte
	// Pool holds the CA certificate.
	Pool *x509.CertPool
}

// NewCA returns a new CA named name, valid for an hour.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	return NewCAUntil(t, name, time.Now().Add(time.Hour))
}

// NewCAUntil returns a new CA named name, valid from a minute ago until
// notAfter.
func NewCAUntil(t testing.TB, name string, notAfter time.Time) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("testcerts: creating CA %q: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcerts: parsing CA %q: %v", name, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Pool: pool}
}

// Leaf is a certificate issued by a CA, with its key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte // a certificate_file
	KeyPEM  []byte // a private_key_file
	TLS     tls.Certificate
}

// LeafOptions describe a certificate to issue. It is valid for both server
// and client authentication.
type LeafOptions struct {
	CommonName string
	DNSNames   []string
	URIs       []string // e.g. "spiffe://example.org/client"
	IPs        []string
	// NotBefore and NotAfter bound the validity; zero values mean a minute
	// ago and an hour from now.
	NotBefore, NotAfter time.Time
}

// Issue returns a certificate signed by ca, valid for an hour unless o says
// otherwise.
func (ca *CA) Issue(t testing.TB, o LeafOptions) *Leaf {
	t.Helper()
	key := newKey(t)
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Minute)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     o.DNSNames,
	}
	for _, u := range o.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatalf("testcerts: URI %q: %v", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	for _, ip := range o.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(mustAddr(t, ip)))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatalf("testcerts: issuing %q: %v", o.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testcerts: encoding key: %v", err)
	}
	l := &Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	if l.Cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatalf("testcerts: parsing %q: %v", o.CommonName, err)
	}
	if l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		t.Fatalf("testcerts: key pair %q: %v", o.CommonName, err)
	}
	return l
}

// Files are the paths of a file_watcher's files.
type Files struct {
	Cert, Key, CA string
}

// WriteFiles writes leaf (if not nil) and the roots (if not nil) into dir as
// cert.pem, key.pem and ca.pem, each replaced atomically (write, then
// rename), as a certificate rotation should be done.
func WriteFiles(t testing.TB, dir string, leaf *Leaf, roots []byte) Files {
	t.Helper()
	f := Files{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem"), CA: filepath.Join(dir, "ca.pem")}
	if leaf != nil {
		writeAtomic(t, f.Key, leaf.KeyPEM)
		writeAtomic(t, f.Cert, leaf.CertPEM)
	}
	if roots != nil {
		writeAtomic(t, f.CA, roots)
	}
	return f
}

func writeAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatalf("testcerts: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("testcerts: %v", err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testcerts: generating key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("testcerts: serial: %v", err)
	}
	return n
}

func mustAddr(t testing.TB, s string) []byte {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("testcerts: IP %q: %v", s, err)
	}
	return a.AsSlice()
}

// SPIFFEBundleMap returns the JSON of a SPIFFE trust bundle map (gRFC A87)
// in which each trust domain's bundle holds the certificates of its CAs as
// "x509-svid" JWKs (kty EC, crv P-256, the key's coordinates and the
// certificate in x5c), as SPIRE publishes them.
func SPIFFEBundleMap(t testing.TB, domains map[string][]*CA) []byte {
	t.Helper()
	type jwk struct {
		Use string   `json:"use"`
		Kty string   `json:"kty"`
		Crv string   `json:"crv"`
		X   string   `json:"x"`
		Y   string   `json:"y"`
		X5c []string `json:"x5c"`
	}
	type bundle struct {
		Keys     []jwk `json:"keys"`
		Sequence int   `json:"spiffe_sequence"`
	}
	m := map[string]map[string]bundle{"trust_domains": {}}
	for td, cas := range domains {
		b := bundle{Keys: []jwk{}, Sequence: 1}
		for _, ca := range cas {
			point, err := ca.Key.PublicKey.Bytes() // 0x04 || X || Y
			if err != nil {
				t.Fatalf("testcerts: encoding the key of %q: %v", ca.Cert.Subject.CommonName, err)
			}
			n := (len(point) - 1) / 2
			b.Keys = append(b.Keys, jwk{
				Use: "x509-svid", Kty: "EC", Crv: "P-256",
				X:   base64.RawURLEncoding.EncodeToString(point[1 : 1+n]),
				Y:   base64.RawURLEncoding.EncodeToString(point[1+n:]),
				X5c: []string{base64.StdEncoding.EncodeToString(ca.Cert.Raw)},
			})
		}
		m["trust_domains"][td] = b
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatalf("testcerts: encoding the bundle map: %v", err)
	}
	return out
}

// WriteFile writes data to path atomically (write, then rename), as a
// rotation should be done.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	writeAtomic(t, path, data)
}

// JWT returns a JWT with claims, signed with HS256 and key, as a JWT token
// file holds it. Only a management server that knows key can verify it.
func JWT(t testing.TB, key []byte, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("testcerts: encoding JWT: %v", err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signed := enc(map[string]string{"alg": "HS256", "typ": "JWT"}) + "." + enc(claims)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// VerifyJWT checks an HS256 JWT made by JWT: its signature with key and
// its exp claim against now. It returns the claims.
func VerifyJWT(token string, key []byte, now time.Time) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWT")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return nil, errors.New("bad signature")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("payload: %v", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		return nil, fmt.Errorf("payload: %v", err)
	}
	exp, ok := claims["exp"].(float64)
	if !ok || !now.Before(time.Unix(int64(exp), 0)) {
		return nil, errors.New("expired or no exp")
	}
	return claims, nil
}
