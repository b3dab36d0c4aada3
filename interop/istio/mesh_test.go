package istio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"text/template"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	xdsfake "istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/constants"
	"istio.io/istio/pkg/istio-agent/grpcxds"
	agentmodel "istio.io/istio/pkg/model"
	"k8s.io/apimachinery/pkg/runtime"
)

// workload is a pod of the tests' mesh: the server under test ("echo") or
// one of its clients.
type workload struct {
	name, namespace, serviceAccount string
	// ip is the pod IP. The echo server listens on it; for clients it only
	// identifies the pod to istiod.
	ip netip.Addr
}

// The mesh's workloads. Each has its own namespace and service account, so
// that AuthorizationPolicies can tell them apart by principal or namespace.
var (
	echoPod   = workload{name: "echo-0", namespace: "echo", serviceAccount: "echo", ip: netip.MustParseAddr("127.0.1.1")}
	clientPod = workload{name: "client-0", namespace: "client", serviceAccount: "client", ip: netip.MustParseAddr("127.0.2.1")}
	otherPod  = workload{name: "other-0", namespace: "other", serviceAccount: "other", ip: netip.MustParseAddr("127.0.3.1")}
)

// echoServicePort is the port of the echo Kubernetes Service; clients dial
// xds:///echo.echo.svc.cluster.local:7070 and are sent to the pod's
// (ephemeral) target port by EDS.
const echoServicePort = 7070

// echoTarget is the xds:/// target of the echo service.
var echoTarget = "xds:///echo.echo.svc.cluster.local:" + strconv.Itoa(echoServicePort)

// nodeID is the xDS node ID istio-agent gives a proxyless pod.
func (w workload) nodeID() string {
	return fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", w.ip, w.name, w.namespace, w.namespace)
}

// trustDomain is the mesh's trust domain (istio's default).
const trustDomain = "cluster.local"

// spiffeID is the identity in the workload's certificate, as istio's CA
// issues it.
func (w workload) spiffeID() string {
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", trustDomain, w.namespace, w.serviceAccount)
}

// meshSpec is what a test declares to istiod.
type meshSpec struct {
	// echoLabels are labels of the echo pod besides app=echo, e.g. the
	// security.istio.io/tlsMode label.
	echoLabels map[string]string
	// config is Istio resources (PeerAuthentication, AuthorizationPolicy,
	// DestinationRule, ...) in YAML, applied before any workload connects.
	config string
	// server, if set, is the pod of the server under test instead of
	// echoPod, with kubeObjects as the cluster's Kubernetes objects instead
	// of kubeTemplate's, and serverPort the port the server listens on
	// (0: an ephemeral one).
	server      *workload
	serverPort  int
	kubeObjects func(port int) []runtime.Object
	// listenHost, if set, is the host the server listens on instead of
	// its pod's IP (e.g. 0.0.0.0).
	listenHost string
}

// mesh is one istiod, in process, and the Kubernetes cluster it watches:
// the echo Deployment's pod, Service and EndpointSlice, and the client pods.
type mesh struct {
	ds *xdsfake.FakeDiscoveryServer
	// xdsAddr is istiod's ADS address (plaintext gRPC, on loopback).
	xdsAddr string
	// ca is istiod's CA: it issues every workload's certificate.
	ca *meshCA
	// echoLis is the echo server's listener, opened before istiod starts
	// because the pod's port must be in the Kubernetes objects.
	echoLis net.Listener
	// server is the pod the echo server runs as: echoPod unless the
	// meshSpec says otherwise.
	server workload
	// nodeMeta, if set, completes a workload's node metadata before
	// istio's generator writes the bootstrap, with what istio-agent reads
	// from the pod (its labels, its workload's name).
	nodeMeta func(w workload, md *agentmodel.NodeMetadata)
}

// newMesh starts an istiod configured by spec. It and everything it started
// stop when the test ends.
func newMesh(t *testing.T, spec meshSpec) *mesh {
	t.Helper()
	server := echoPod
	if spec.server != nil {
		server = *spec.server
	}
	host := server.ip.String()
	if spec.listenHost != "" {
		host = spec.listenHost
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(spec.serverPort)))
	if err != nil {
		t.Fatalf("listening for the server under test (is the port taken by another process?): %v", err)
	}
	t.Cleanup(func() { lis.Close() })
	port := lis.Addr().(*net.TCPAddr).Port
	opts := xdsfake.FakeOptions{
		ConfigString:    spec.config,
		ListenerBuilder: func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") },
	}
	if spec.kubeObjects != nil {
		opts.KubernetesObjects = spec.kubeObjects(port)
	} else {
		opts.KubernetesObjectString = kubeObjects(t, spec.echoLabels, port)
	}
	ds := xdsfake.NewFakeDiscoveryServer(t, opts)
	return &mesh{ds: ds, xdsAddr: ds.Listener.Addr().String(), ca: newMeshCA(t, ds.KubeClient()), echoLis: lis, server: server}
}

// kubeTemplate is the cluster's Kubernetes objects: three namespaces, a pod
// in each, and the echo Service with the EndpointSlice the endpoints
// controller would write for it.
var kubeTemplate = template.Must(template.New("kube").Parse(`
{{- range .Pods }}
apiVersion: v1
kind: Namespace
metadata:
  name: {{ .W.Namespace }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .W.ServiceAccount }}
  namespace: {{ .W.Namespace }}
---
apiVersion: v1
kind: Pod
metadata:
  name: {{ .W.Name }}
  namespace: {{ .W.Namespace }}
  labels:
    {{- range $k, $v := .Labels }}
    {{ $k }}: {{ $v }}
    {{- end }}
spec:
  serviceAccountName: {{ .W.ServiceAccount }}
  containers:
  - name: app
    image: app
    {{- if .Port }}
    ports:
    - name: grpc
      containerPort: {{ .Port }}
    {{- end }}
status:
  phase: Running
  podIP: {{ .W.IP }}
  podIPs:
  - ip: {{ .W.IP }}
  conditions:
  - type: Ready
    status: "True"
---
{{ end -}}
apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: echo
spec:
  clusterIP: 10.96.0.10
  selector:
    app: echo
  ports:
  - name: grpc
    port: {{ .ServicePort }}
    targetPort: {{ .Port }}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-1
  namespace: echo
  labels:
    kubernetes.io/service-name: echo
addressType: IPv4
endpoints:
- addresses:
  - {{ .Echo.IP }}
  conditions:
    ready: true
  targetRef:
    kind: Pod
    name: {{ .Echo.Name }}
    namespace: {{ .Echo.Namespace }}
ports:
- name: grpc
  port: {{ .Port }}
  protocol: TCP
`))

// templateWorkload is a workload as the templates see it.
type templateWorkload struct {
	Name, Namespace, ServiceAccount, IP string
}

func (w workload) forTemplate() templateWorkload {
	return templateWorkload{Name: w.name, Namespace: w.namespace, ServiceAccount: w.serviceAccount, IP: w.ip.String()}
}

// kubeObjects renders kubeTemplate; echoPort is the echo pod's port.
func kubeObjects(t *testing.T, echoLabels map[string]string, echoPort int) string {
	t.Helper()
	type pod struct {
		W      templateWorkload
		Labels map[string]string
		Port   int
	}
	labels := map[string]string{"app": "echo"}
	for k, v := range echoLabels {
		labels[k] = v
	}
	data := struct {
		Pods              []pod
		Echo              templateWorkload
		Port, ServicePort int
	}{
		Pods: []pod{
			{W: echoPod.forTemplate(), Labels: labels, Port: echoPort},
			{W: clientPod.forTemplate(), Labels: map[string]string{"app": "client"}},
			{W: otherPod.forTemplate(), Labels: map[string]string{"app": "other"}},
		},
		Echo:        echoPod.forTemplate(),
		Port:        echoPort,
		ServicePort: echoServicePort,
	}
	var b bytes.Buffer
	if err := kubeTemplate.Execute(&b, data); err != nil {
		t.Fatalf("rendering the Kubernetes objects: %v", err)
	}
	return b.String()
}

// apply creates or replaces the Istio resources of yamlDocs in istiod's
// config store, as kubectl apply would; istiod pushes the change to every
// connected workload.
func (m *mesh) apply(t *testing.T, yamlDocs string) {
	t.Helper()
	for _, c := range parseConfigs(t, yamlDocs) {
		store := m.ds.Store()
		var err error
		if store.Get(c.GroupVersionKind, c.Name, c.Namespace) != nil {
			_, err = store.Update(c)
		} else {
			_, err = store.Create(c)
		}
		if err != nil {
			t.Fatalf("applying %v %s/%s: %v", c.GroupVersionKind.Kind, c.Namespace, c.Name, err)
		}
	}
}

// remove deletes the Istio resources of yamlDocs from istiod's config store.
func (m *mesh) remove(t *testing.T, yamlDocs string) {
	t.Helper()
	for _, c := range parseConfigs(t, yamlDocs) {
		if err := m.ds.Store().Delete(c.GroupVersionKind, c.Name, c.Namespace, nil); err != nil {
			t.Fatalf("deleting %v %s/%s: %v", c.GroupVersionKind.Kind, c.Namespace, c.Name, err)
		}
	}
}

func parseConfigs(t *testing.T, yamlDocs string) []config.Config {
	t.Helper()
	cfgs, _, err := crd.ParseInputs(yamlDocs)
	if err != nil {
		t.Fatalf("parsing Istio resources: %v\n%s", err, yamlDocs)
	}
	if len(cfgs) == 0 {
		t.Fatalf("no Istio resource in:\n%s", yamlDocs)
	}
	return cfgs
}

// workloadCerts writes w's certificate chain and key, issued by istiod's CA
// for w's SPIFFE ID, and the CA's root, into a new directory under the
// names istio-agent uses, and returns the directory.
func (m *mesh) workloadCerts(t *testing.T, w workload) string {
	t.Helper()
	return writeCertDir(t, m.ca.issue(t, w.spiffeID()), m.ca.rootPEM)
}

// writeCertDir writes cert and roots as cert-chain.pem, key.pem and
// root-cert.pem into a new directory.
func writeCertDir(t *testing.T, cert *workloadCert, roots []byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{"cert-chain.pem": cert.chainPEM, "key.pem": cert.keyPEM, "root-cert.pem": roots} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// bootstrap returns the gRPC bootstrap istio-agent writes for w (istio's own
// generator), with its certificates in certDir. The one difference from a
// pod's: server_uri is istiod's address, since no agent runs here to proxy
// the ADS stream over its unix socket.
func (m *mesh) bootstrap(t *testing.T, w workload, certDir string) []byte {
	t.Helper()
	j, err := json.Marshal(m.bootstrapConfig(t, w, certDir))
	if err != nil {
		t.Fatalf("encoding the bootstrap: %v", err)
	}
	return j
}

// bootstrapConfig is bootstrap before it is encoded.
func (m *mesh) bootstrapConfig(t *testing.T, w workload, certDir string) *grpcxds.Bootstrap {
	t.Helper()
	md := agentmodel.NodeMetadata{
		Namespace:      w.namespace,
		Generator:      "grpc",
		ClusterID:      constants.DefaultClusterName,
		InstanceIPs:    []string{w.ip.String()},
		ServiceAccount: w.serviceAccount,
		// The version of the pinned istio tree (its VERSION file), as an
		// agent of that version reports it.
		IstioVersion: "1.31.0",
	}
	if m.nodeMeta != nil {
		m.nodeMeta(w, &md)
	}
	b, err := grpcxds.GenerateBootstrap(grpcxds.GenerateBootstrapOptions{
		Node: &agentmodel.Node{
			ID: w.nodeID(),
			Metadata: &agentmodel.BootstrapNodeMetadata{
				NodeMetadata: md,
				InstanceName: w.name,
			},
		},
		DiscoveryAddress: m.xdsAddr,
		CertDir:          certDir,
	})
	if err != nil {
		t.Fatalf("istio's GenerateBootstrap: %v", err)
	}
	return b
}
