package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// demoPKI is the demo's certificates, made when it starts: a CA, the
// server's certificate and key (written to files, which the server's
// certificate provider reads, as istio-agent's files would be), and a
// client certificate for alice.
type demoPKI struct {
	dir    string // cert.pem, key.pem and ca.pem of the server
	roots  *x509.CertPool
	client tls.Certificate
}

func newDemoPKI() (*demoPKI, error) {
	dir, err := os.MkdirTemp("", "xds-quickstart-")
	if err != nil {
		return nil, err
	}
	p := &demoPKI{dir: dir, roots: x509.NewCertPool()}
	caKey, caCert, err := issue("quickstart CA", nil, nil, nil)
	if err != nil {
		return nil, err
	}
	p.roots.AddCert(caCert)
	srvKey, srvCert, err := issue("quickstart server", &x509.Certificate{
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		URIs:        []*url.URL{{Scheme: "spiffe", Host: "quickstart.example", Path: "/greeter"}},
	}, caKey, caCert)
	if err != nil {
		return nil, err
	}
	cliKey, cliCert, err := issue("alice", &x509.Certificate{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{{Scheme: "spiffe", Host: "quickstart.example", Path: "/alice"}},
	}, caKey, caCert)
	if err != nil {
		return nil, err
	}
	p.client = tls.Certificate{Certificate: [][]byte{cliCert.Raw}, PrivateKey: cliKey, Leaf: cliCert}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	for name, block := range map[string]*pem.Block{
		"cert.pem": {Type: "CERTIFICATE", Bytes: srvCert.Raw},
		"key.pem":  {Type: "PRIVATE KEY", Bytes: keyDER},
		"ca.pem":   {Type: "CERTIFICATE", Bytes: caCert.Raw},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// file returns the path of one of the server's files.
func (p *demoPKI) file(name string) string { return filepath.Join(p.dir, name) }

// remove deletes the server's files.
func (p *demoPKI) remove() { os.RemoveAll(p.dir) }

// issue makes a key and a certificate for cn from template (nil: a CA),
// signed by the parent (nil: self-signed).
func issue(cn string, template *x509.Certificate, parentKey *ecdsa.PrivateKey, parent *x509.Certificate) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	if template == nil {
		template = &x509.Certificate{IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	} else {
		template.KeyUsage = x509.KeyUsageDigitalSignature
	}
	template.SerialNumber = serial
	template.Subject = pkix.Name{CommonName: cn}
	template.NotBefore = time.Now().Add(-time.Minute)
	template.NotAfter = time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate for %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}
