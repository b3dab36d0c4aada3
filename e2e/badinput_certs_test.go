package e2e_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/codes"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// expiredLeaf returns PEM files contents of a server certificate signed by
// ca that expired an hour ago.
func expiredLeaf(t *testing.T, ca *testcerts.CA) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "expired"},
		NotBefore:    time.Now().Add(-2 * time.Hour),
		NotAfter:     time.Now().Add(-time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"server.test"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestBadInputCerts: certificate problems of the identity of an mTLS chain
// (issue 9, item 2). The Listener has a plaintext chain for 127.0.0.2 and
// an mTLS chain for 127.0.0.1 on the same port. Each problem must fail the
// mTLS handshakes, be logged, and change nothing else: the serving mode
// stays SERVING and the plaintext chain keeps working.
func TestBadInputCerts(t *testing.T) {
	tests := []struct {
		desc string
		// files writes the identity files into dir and returns the
		// certificate and key paths the provider reads.
		files func(t *testing.T, pki *testPKI, dir string) (cert, key string)
		// rotate, if set, breaks the files after the server served a good
		// mTLS connection.
		rotate func(t *testing.T, cert, key string)
		// keepsOld: the broken files are ignored and the previous pair
		// keeps serving (a half-done rotation keeps the previous pair).
		keepsOld bool
		// wantLog is a distinctive part of the failed handshake's log line.
		wantLog string
	}{
		{desc: "expired identity certificate", files: func(t *testing.T, pki *testPKI, dir string) (string, string) {
			c, k := expiredLeaf(t, pki.ca)
			writeFile(t, filepath.Join(dir, "cert.pem"), c)
			writeFile(t, filepath.Join(dir, "key.pem"), k)
			return filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		}, wantLog: "bad certificate"},
		{desc: "key does not match the certificate", files: func(t *testing.T, pki *testPKI, dir string) (string, string) {
			a := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "a", DNSNames: []string{"server.test"}})
			b := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "b", DNSNames: []string{"server.test"}})
			writeFile(t, filepath.Join(dir, "cert.pem"), a.CertPEM)
			writeFile(t, filepath.Join(dir, "key.pem"), b.KeyPEM)
			return filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		}, wantLog: "private_key_file"},
		{desc: "missing files", files: func(_ *testing.T, _ *testPKI, dir string) (string, string) {
			return filepath.Join(dir, "nope.pem"), filepath.Join(dir, "nope.key")
		}, wantLog: "no such file"},
		{desc: "unreadable files", files: func(t *testing.T, _ *testPKI, dir string) (string, string) {
			// Directories: unreadable as files even by root.
			for _, d := range []string{"cert.pem", "key.pem"} {
				if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			return filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		}, wantLog: "is a directory"},
		{desc: "rotated to garbage", files: func(t *testing.T, pki *testPKI, dir string) (string, string) {
			f := testcerts.WriteFiles(t, dir, pki.server, nil)
			return f.Cert, f.Key
		}, rotate: func(t *testing.T, cert, key string) {
			writeFile(t, key, []byte("garbage key"))
			writeFile(t, cert, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"))
		}, keepsOld: true},
		{desc: "rotated to the key of another certificate", files: func(t *testing.T, pki *testPKI, dir string) (string, string) {
			f := testcerts.WriteFiles(t, dir, pki.server, nil)
			return f.Cert, f.Key
		}, rotate: func(t *testing.T, cert, key string) {
			other := testcerts.NewCA(t, "x").Issue(t, testcerts.LeafOptions{CommonName: "x"})
			writeFile(t, key, other.KeyPEM)
		}, keepsOld: true},
	}
	for _, tc := range tests {
		t.Run(strings.ReplaceAll(tc.desc, " ", "_"), func(t *testing.T) {
			ctx := testContext(t)
			pki := newTestPKI(t)
			dir := t.TempDir()
			cert, key := tc.files(t, pki, dir)
			ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
			nodeID := "node-" + testutils.RunName(t)
			env := &testEnv{ms: ms, nodeID: nodeID, bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
				ServerURIs:                         []string{ms.Address},
				NodeID:                             nodeID,
				ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
				CertificateProviders: map[string]json.RawMessage{
					instServer: fileWatcher(map[string]string{"certificate_file": cert, "private_key_file": key}, 50*time.Millisecond),
					instRoots:  fileWatcher(map[string]string{"ca_certificate_file": pki.serverFiles.CA}, 50*time.Millisecond),
				},
			})}
			lis, _ := listen(t, "127.0.0.1")
			s, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
				l := testListener(a, []chainSpec{
					{name: "plain", match: &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}},
					{name: "mtls", match: &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.1/32")}}},
				}, nil)
				return withTransportSocket(t, l, "mtls", downstreamTLS(true, true))
			})
			client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client"})
			logs := warningsOf("[listener " + addr.String() + "]")
			plain := newClient(t, addr, "127.0.0.2", 0)
			if got := plain.chainOf(ctx, t, "plain", "mtls"); got != "plain" {
				t.Fatalf("plaintext client served by chain %q, want plain", got)
			}
			if tc.rotate != nil {
				good := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
				// Retried: under -race on busy cores a first handshake can
				// time out; the question is only whether the pair serves.
				waitForCode(ctx, t, "mTLS before the rotation", codes.OK, good.emptyCallNoOpts)
				good.Close()
				tc.rotate(t, cert, key)
				// The provider warns, naming the files, when a re-read
				// fails and it keeps the previous pair: then it has read
				// the rotated files.
				warningsOf(cert).waitCount(ctx, t, 1, "re-reading the identity files failed")
			}
			if tc.keepsOld {
				// The previous pair keeps serving new handshakes.
				c := newClient(t, addr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
				waitForCode(ctx, t, "mTLS after the rotation", codes.OK, c.emptyCallNoOpts)
				if got, want := c.serverCertSerial(ctx, t), pki.server.Cert.SerialNumber.String(); got != want {
					t.Errorf("after a rotation to garbage the server presents %s, want the previous %s", got, want)
				}
			} else {
				before := logs.count("TLS handshake", `"mtls"`, tc.wantLog)
				for range 2 {
					dialFails(ctx, t, addr, "127.0.0.1", tlsClientCreds(pki.ca.Pool, client))
				}
				logs.waitCount(ctx, t, before+1, "TLS handshake", `"mtls"`, tc.wantLog)
				t.Logf("logged: %s", lastMatching(logs.all(), "TLS handshake"))
			}
			// Nothing else changed.
			if got := plain.chainOf(ctx, t, "plain", "mtls"); got != "plain" {
				t.Errorf("plaintext client served by chain %q after the certificate problem, want plain", got)
			}
			if got := newClient(t, addr, "127.0.0.2", 0).emptyCall(ctx); got != codes.OK {
				t.Errorf("new plaintext client after the certificate problem: %v, want OK", got)
			}
			s.modes.expectNoneBy(ctx, t, env.ms, addr)
		})
	}
}

func lastMatching(lines []string, sub string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return fmt.Sprintf("(no line with %q)", sub)
}
