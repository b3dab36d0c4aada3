package xdsclient_test

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
	"os"
	"path/filepath"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// testCA issues certificates for the TLS test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
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
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key valid for 127.0.0.1.
func (ca *testCA) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("leaf-%d", serial)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startTLSServer starts a management server behind a TLS listener that
// requires a client certificate signed by ca.
func startTLSServer(t *testing.T, ca *testCA) *e2e.ManagementServer {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, 2, x509.ExtKeyUsageServerAuth)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsLis := tls.NewListener(lis, &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{"h2"},
	})
	return e2e.StartManagementServer(t, e2e.ManagementServerOptions{Listener: tlsLis})
}

// tlsBootstrap is a bootstrap with "tls" channel credentials (gRFC A65).
func tlsBootstrap(t *testing.T, addr, caFile, certFile, keyFile string) *bootstrap.Config {
	t.Helper()
	js := fmt.Sprintf(`{
		"xds_servers": [{
			"server_uri": %q,
			"channel_creds": [{"type": "tls", "config": {"ca_certificate_file": %q, "certificate_file": %q, "private_key_file": %q}}],
			"server_features": ["xds_v3"]
		}],
		"node": {"id": "tls-node"}
	}`, addr, caFile, certFile, keyFile)
	cfg, err := bootstrap.Parse([]byte(js))
	if err != nil {
		t.Fatalf("bootstrap.Parse: %v", err)
	}
	return cfg
}

// A management server reached over mTLS with the bootstrap's files works; a
// CA that did not sign the server's certificate makes a connection error.
func TestTLSChannelCreds(t *testing.T) {
	ctx := testContext(t)
	ca := newTestCA(t, "ca")
	ms := startTLSServer(t, ca)
	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})

	dir := t.TempDir()
	certPEM, keyPEM := ca.issue(t, 3, x509.ExtKeyUsageClientAuth)
	caFile := writeFile(t, dir, "ca.pem", ca.pem)
	certFile := writeFile(t, dir, "cert.pem", certPEM)
	keyFile := writeFile(t, dir, "key.pem", keyPEM)

	c, err := xdsclient.New(tlsBootstrap(t, ms.Address, caFile, certFile, keyFile), xdsclient.Options{Backoff: fastBackoff})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	w.wantData(ctx, t, l)

	otherCA := writeFile(t, dir, "other-ca.pem", newTestCA(t, "other").pem)
	c2, err := xdsclient.New(tlsBootstrap(t, ms.Address, otherCA, certFile, keyFile), xdsclient.Options{Backoff: fastBackoff})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c2.Close()
	w2 := newTestWatcher()
	defer c2.WatchResource(listenerType, "lis", w2)()
	select {
	case <-w2.connErrs:
	case <-ctx.Done():
		t.Fatal("no connection error with an unknown CA")
	}
	w2.wantNothing(t)
}
