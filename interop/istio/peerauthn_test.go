package istio

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// tlsModeLabel is the pod label by which istio's sidecar injector marks a
// workload that accepts istio mTLS; istiod reads it to make a PERMISSIVE
// proxyless server STRICT.
const tlsModeLabel = "security.istio.io/tlsMode"

// peerAuthentication is a namespace-wide PeerAuthentication of the echo
// namespace with the given mTLS mode.
func peerAuthentication(mode string) string {
	return fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: default
  namespace: echo
spec:
  mtls:
    mode: %s
`, mode)
}

// istioMutual is the DestinationRule that makes clients of the echo
// service use istio mTLS: istiod gives proxyless clients an
// UpstreamTlsContext only when one says so.
const istioMutual = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: echo
  namespace: echo
spec:
  host: echo.echo.svc.cluster.local
  trafficPolicy:
    tls:
      mode: ISTIO_MUTUAL
`

// yamlDocs joins YAML documents.
func yamlDocs(docs ...string) string { return strings.Join(docs, "---\n") }

// Results a client observes of UnaryCall.
var (
	// mtlsFromClient: the RPC succeeded over mTLS; the handler saw the
	// client pod's identity, the client saw the echo pod's.
	mtlsFromClient = result{code: codes.OK, clientID: clientPod.spiffeID(), security: "mtls", serverID: echoPod.spiffeID()}
	// plaintextOK: the RPC succeeded over a plaintext connection.
	plaintextOK = result{code: codes.OK, security: "plaintext"}
	// refused: the connection was refused (a failed TLS handshake, or TLS
	// where the server speaks plaintext), so the RPC failed UNAVAILABLE.
	refused = result{code: codes.Unavailable}
)

// TestPeerAuthentication: for each mTLS mode a PeerAuthentication can give
// the echo namespace (and the tlsMode pod label, and a DestinationRule for
// the clients), what each kind of client observes when it calls the
// server: grpc-go's xDS client configured by the same istiod, and clients
// that dial the pod's address directly in plaintext, in TLS without a
// certificate, with a certificate of a CA outside the mesh, and with a mesh
// certificate.
func TestPeerAuthentication(t *testing.T) {
	tests := []struct {
		desc string
		spec meshSpec
		// What UnaryCall returns to each client.
		xds, plaintext, tlsNoCert, foreignCert, meshCert result
	}{
		{
			desc:        "STRICT",
			spec:        meshSpec{config: yamlDocs(peerAuthentication("STRICT"), istioMutual)},
			xds:         mtlsFromClient,
			plaintext:   refused,
			tlsNoCert:   refused,
			foreignCert: refused,
			meshCert:    mtlsFromClient,
		},
		{
			// grpc-go's client does mTLS only when its Cluster says so.
			desc:        "STRICT, no DestinationRule",
			spec:        meshSpec{config: peerAuthentication("STRICT")},
			xds:         refused,
			plaintext:   refused,
			tlsNoCert:   refused,
			foreignCert: refused,
			meshCert:    mtlsFromClient,
		},
		{
			// istiod makes PERMISSIVE plaintext for proxyless servers: gRPC
			// cannot tell TLS from plaintext on one port.
			desc:        "PERMISSIVE without the tlsMode label",
			spec:        meshSpec{config: peerAuthentication("PERMISSIVE")},
			xds:         plaintextOK,
			plaintext:   plaintextOK,
			tlsNoCert:   refused,
			foreignCert: refused,
			meshCert:    refused,
		},
		{
			// With the label, clients with auto mTLS would use TLS, so
			// istiod makes it STRICT.
			desc: "PERMISSIVE with the tlsMode label",
			spec: meshSpec{
				echoLabels: map[string]string{tlsModeLabel: "istio"},
				config:     yamlDocs(peerAuthentication("PERMISSIVE"), istioMutual),
			},
			xds:         mtlsFromClient,
			plaintext:   refused,
			tlsNoCert:   refused,
			foreignCert: refused,
			meshCert:    mtlsFromClient,
		},
		{
			// ... but proxyless clients get no auto mTLS: without a
			// DestinationRule they send plaintext and are refused.
			desc: "PERMISSIVE with the tlsMode label, no DestinationRule",
			spec: meshSpec{
				echoLabels: map[string]string{tlsModeLabel: "istio"},
				config:     peerAuthentication("PERMISSIVE"),
			},
			xds:         refused,
			plaintext:   refused,
			tlsNoCert:   refused,
			foreignCert: refused,
			meshCert:    mtlsFromClient,
		},
		{
			// The mesh default (no PeerAuthentication) is PERMISSIVE.
			desc:        "no PeerAuthentication",
			spec:        meshSpec{},
			xds:         plaintextOK,
			plaintext:   plaintextOK,
			tlsNoCert:   refused,
			foreignCert: refused,
			meshCert:    refused,
		},
		{
			desc:        "DISABLE",
			spec:        meshSpec{config: peerAuthentication("DISABLE")},
			xds:         plaintextOK,
			plaintext:   plaintextOK,
			tlsNoCert:   refused,
			foreignCert: refused,
			meshCert:    refused,
		},
		{
			// The client does TLS where the server speaks plaintext.
			desc:        "DISABLE with an ISTIO_MUTUAL DestinationRule",
			spec:        meshSpec{config: yamlDocs(peerAuthentication("DISABLE"), istioMutual)},
			xds:         refused,
			plaintext:   plaintextOK,
			tlsNoCert:   refused,
			foreignCert: refused,
			meshCert:    refused,
		},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			m := newMesh(t, test.spec)
			es := m.startEcho(t)
			clientCert := m.ca.issue(t, clientPod.spiffeID()).tls
			foreign := testcerts.NewCA(t, "not the mesh CA").Issue(t, testcerts.LeafOptions{URIs: []string{clientPod.spiffeID()}}).TLS
			clients := []struct {
				name string
				want result
				cc   func() *grpc.ClientConn
			}{
				{"grpc-go xDS client", test.xds, func() *grpc.ClientConn { return m.xdsClient(t, clientPod) }},
				{"direct plaintext", test.plaintext, func() *grpc.ClientConn { return es.directPlaintext(t) }},
				{"direct TLS, no client certificate", test.tlsNoCert, func() *grpc.ClientConn { return m.directTLS(t, es, nil) }},
				{"direct mTLS, certificate of another CA", test.foreignCert, func() *grpc.ClientConn { return m.directTLS(t, es, &foreign) }},
				{"direct mTLS, mesh certificate", test.meshCert, func() *grpc.ClientConn { return m.directTLS(t, es, &clientCert) }},
			}
			for _, c := range clients {
				// Each client is closed after its call, so that the
				// connections the server accepts meanwhile are its own.
				before := es.lis.accepted.Load()
				cc := c.cc()
				got, err := call(testContext(t), cc, unaryCall)
				cc.Close()
				if got != c.want {
					t.Errorf("%s: UnaryCall got %v (%v), want %v", c.name, got, err, c.want)
				}
				if es.lis.accepted.Load() == before {
					t.Errorf("%s: never connected to the server, so its result says nothing about the server", c.name)
				}
			}
		})
	}
}
