package istio

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"testing"
	"time"

	"istio.io/istio/pkg/config/constants"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/security/pkg/cmd"
	"istio.io/istio/security/pkg/pki/ca"
	"istio.io/istio/security/pkg/pki/util"
)

// meshCA is istiod's CA, istio's own code (security/pkg/pki/ca) as istiod
// runs it in a cluster without a plugged-in cacerts Secret: a self-signed
// root (trust domain cluster.local as its organization), its key kept in
// the istio-ca-secret Secret of istio-system in the cluster istiod watches.
// It issues every workload's certificate; its root is the mesh's trust
// bundle (root-cert.pem).
type meshCA struct {
	ca *ca.IstioCA
	// rootPEM is the root certificate of the CA's key-cert bundle, what
	// istiod gives istio-agent as the trust bundle.
	rootPEM []byte
	// pool holds rootPEM's certificates.
	pool *x509.CertPool
}

// Defaults of istiod's environment that istio keeps as literals, not
// constants: CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE (pilot/pkg/bootstrap), and
// istio-agent's SECRET_TTL, the lifetime it asks for, and
// WORKLOAD_RSA_KEY_SIZE (pilot/cmd/pilot-agent/options).
const (
	caRSAKeySize       = 2048
	workloadCertTTL    = 24 * time.Hour
	workloadRSAKeySize = 2048
)

// newMeshCA makes the CA as istiod does at start (ca.NewSelfSignedIstioCAOptions
// with istiod's defaults, then ca.NewIstioCA), with client as its
// Kubernetes client. The root rotator is off (a check interval of 0): the
// tests run far within the root's lifetime, and no goroutine is left
// running.
func newMeshCA(t *testing.T, client kube.Client) *meshCA {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	opts, err := ca.NewSelfSignedIstioCAOptions(ctx,
		cmd.DefaultRootCertGracePeriodPercentile, cmd.DefaultSelfSignedCACertTTL, 0, /* root cert check interval: no rotator */
		cmd.DefaultWorkloadCertTTL, cmd.DefaultMaxWorkloadCertTTL,
		trustDomain /* the root's organization */, false /* USE_CACERTS_FOR_SELF_SIGNED_CA */, true, /* dual use */
		constants.IstioSystemNamespace, client.Kube().CoreV1(), "" /* no extra root file */, false /* jitter */, caRSAKeySize)
	if err != nil {
		t.Fatalf("istio's ca.NewSelfSignedIstioCAOptions: %v", err)
	}
	c, err := ca.NewIstioCA(opts)
	if err != nil {
		t.Fatalf("istio's ca.NewIstioCA: %v", err)
	}
	root := c.GetCAKeyCertBundle().GetRootCertPem()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(root) {
		t.Fatalf("the CA's root certificate is not PEM:\n%s", root)
	}
	return &meshCA{ca: c, rootPEM: root, pool: pool}
}

// workloadCert is a workload's certificate chain and key as istio-agent
// writes them (cert-chain.pem, key.pem).
type workloadCert struct {
	chainPEM, keyPEM []byte
	// leaf is the chain's first certificate.
	leaf *x509.Certificate
	tls  tls.Certificate
}

// issue returns a certificate for spiffeID obtained as istio-agent obtains
// one: it makes a key and a CSR naming the identity (util.GenCSR, with the
// options of its secret cache's defaults: RSA 2048, PKCS#1 key), and
// istiod's CA server has the CA sign it for the caller's identity
// (SignWithCertChain; the SAN is the identity, not what the CSR says).
func (c *meshCA) issue(t *testing.T, spiffeID string) *workloadCert {
	t.Helper()
	csrPEM, keyPEM, err := util.GenCSR(util.CertOptions{Host: spiffeID, RSAKeySize: workloadRSAKeySize})
	if err != nil {
		t.Fatalf("istio's util.GenCSR for %s: %v", spiffeID, err)
	}
	chain, err := c.ca.SignWithCertChain(csrPEM, ca.CertOpts{SubjectIDs: []string{spiffeID}, TTL: workloadCertTTL})
	if err != nil {
		t.Fatalf("istio's CA signing %s: %v", spiffeID, err)
	}
	w := &workloadCert{keyPEM: keyPEM}
	for _, pemCert := range chain {
		w.chainPEM = append(w.chainPEM, pemCert...)
	}
	block, _ := pem.Decode(w.chainPEM)
	if block == nil {
		t.Fatalf("istio's CA signed %s: not PEM:\n%s", spiffeID, w.chainPEM)
	}
	if w.leaf, err = x509.ParseCertificate(block.Bytes); err != nil {
		t.Fatalf("istio's CA signed %s: %v", spiffeID, err)
	}
	if w.tls, err = tls.X509KeyPair(w.chainPEM, w.keyPEM); err != nil {
		t.Fatalf("key pair of %s: %v", spiffeID, err)
	}
	return w
}

// verifyChain checks that chain (leaf first, as a TLS peer presents it)
// chains to roots for usage and that its leaf names exactly id, as a
// certificate of istio's CA does (one URI SAN).
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool, id string, usage x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return errors.New("no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return err
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id {
		return fmt.Errorf("certificate's URI SANs are %v, want only %s", leaf.URIs, id)
	}
	return nil
}
