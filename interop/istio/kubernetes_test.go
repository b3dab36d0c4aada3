package istio

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	securitypb "istio.io/api/security/v1beta1"
	"istio.io/istio/pkg/config"
	kubeconv "istio.io/istio/pkg/config/kube"
	kubelib "istio.io/istio/pkg/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/proxyless-grpc/xds"
)

// manifestsDir holds the Kubernetes manifests of the greeter that
// TestKubernetesManifests loads, relative to this module.
const manifestsDir = "../../examples/kubernetes"

// grpcAgentBootstrap is where istio-agent writes the gRPC bootstrap in a pod
// injected with the grpc-agent template (istio's
// manifests/charts/istio-control/istio-discovery/files/grpc-agent.yaml sets
// GRPC_XDS_BOOTSTRAP to it in every application container).
const grpcAgentBootstrap = "/etc/istio/proxy/grpc-bootstrap.json"

// manifests is what the files of manifestsDir declare.
type manifests struct {
	namespaces      []*corev1.Namespace
	serviceAccounts []*corev1.ServiceAccount
	// deployment is the greeter's (the one the Service selects), frontend
	// its client's (frontend.yaml).
	deployment, frontend *appsv1.Deployment
	service              *corev1.Service
	networkPolicies      []*networkingv1.NetworkPolicy
	// istio is the Istio resources (PeerAuthentication, AuthorizationPolicy,
	// DestinationRule), as YAML documents.
	istio string
	// configs is istio parsed by istio's own CRD conversion.
	configs []config.Config
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadManifests reads every *.yaml file of manifestsDir: Kubernetes objects
// are decoded with the codec istiod's Kubernetes client uses, Istio
// resources with istio's CRD conversion.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifest in %s (%v)", manifestsDir, err)
	}
	mf := &manifests{}
	var istioDocs []string
	var deployments []*appsv1.Deployment
	decode := kubelib.IstioCodec.UniversalDeserializer().Decode
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docSeparator.Split(string(data), -1) {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v\n%s", f, err, doc)
			}
			if tm.Kind == "" {
				continue // only comments
			}
			if strings.HasSuffix(tm.GroupVersionKind().Group, "istio.io") {
				istioDocs = append(istioDocs, strings.TrimSpace(doc))
				continue
			}
			obj, _, err := decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s: decoding %s: %v", f, tm.Kind, err)
			}
			switch o := obj.(type) {
			case *corev1.Namespace:
				mf.namespaces = append(mf.namespaces, o)
			case *corev1.ServiceAccount:
				mf.serviceAccounts = append(mf.serviceAccounts, o)
			case *appsv1.Deployment:
				deployments = append(deployments, o)
			case *networkingv1.NetworkPolicy:
				mf.networkPolicies = append(mf.networkPolicies, o)
			case *corev1.Service:
				if mf.service != nil {
					t.Fatalf("%s: a second Service; the test expects one", f)
				}
				mf.service = o
			default:
				t.Fatalf("%s: %T: the test does not know what to do with it", f, obj)
			}
		}
	}
	if mf.service == nil || len(deployments) != 2 {
		t.Fatalf("%s: want a Service and two Deployments (the greeter and its frontend), got %d", manifestsDir, len(deployments))
	}
	for _, d := range deployments {
		if d.Namespace == mf.service.Namespace && labels.SelectorFromSet(mf.service.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			mf.deployment = d
		} else {
			mf.frontend = d
		}
	}
	if mf.deployment == nil || mf.frontend == nil {
		t.Fatalf("%s: want one Deployment the Service selects (the greeter) and one it does not (the frontend)", manifestsDir)
	}
	mf.istio = strings.Join(istioDocs, "\n---\n")
	mf.configs = parseConfigs(t, mf.istio)
	return mf
}

// pod is the workload of one pod of the Deployment.
func (mf *manifests) pod() workload {
	return workload{
		name:           mf.deployment.Name + "-0",
		namespace:      mf.deployment.Namespace,
		serviceAccount: mf.deployment.Spec.Template.Spec.ServiceAccountName,
		ip:             echoPod.ip,
	}
}

// container is the Deployment's one container.
func (mf *manifests) container(t *testing.T) *corev1.Container {
	t.Helper()
	cs := mf.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(cs))
	}
	return &cs[0]
}

// containerPort returns the number of c's port named name.
func containerPort(t *testing.T, c *corev1.Container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, name)
	return 0
}

// kubeObjects is the cluster as istiod would see it once the Deployment's
// first pod runs on the pod's IP: the files' Namespaces, ServiceAccounts and
// Service, the pod (the Deployment's pod template, labels and annotations
// included), and the EndpointSlice the endpoints controller writes.
func (mf *manifests) kubeObjects(t *testing.T, pod workload, clients ...workload) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	clientNS := map[string]bool{}
	for _, c := range clients {
		objs = append(objs, clientObjects(c)...)
		clientNS[c.namespace] = true
	}
	// A client's Namespace and ServiceAccount (the frontend's) are among
	// clientObjects already.
	for _, ns := range mf.namespaces {
		if !clientNS[ns.Name] {
			objs = append(objs, ns.DeepCopy())
		}
	}
	for _, sa := range mf.serviceAccounts {
		if !clientNS[sa.Namespace] {
			objs = append(objs, sa.DeepCopy())
		}
	}
	tmpl := mf.deployment.Spec.Template
	objs = append(objs, &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        pod.name,
			Namespace:   pod.namespace,
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
		},
		Spec: *tmpl.Spec.DeepCopy(),
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      pod.ip.String(),
			PodIPs:     []corev1.PodIP{{IP: pod.ip.String()}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	})
	svc := mf.service.DeepCopy()
	if svc.Spec.ClusterIP == "" {
		svc.Spec.ClusterIP = "10.96.0.20" // as the API server would assign
	}
	objs = append(objs, svc)
	slice := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      svc.Name + "-1",
			Namespace: svc.Namespace,
			Labels:    map[string]string{discoveryv1.LabelServiceName: svc.Name},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{pod.ip.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod.name, Namespace: pod.namespace},
		}},
	}
	for _, p := range svc.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{
			Name:     new(p.Name),
			Port:     new(int32(mf.targetPort(t, p))),
			Protocol: new(corev1.ProtocolTCP),
		})
	}
	return append(objs, slice)
}

// clientObjects are the Namespace, ServiceAccount and running pod of a
// client workload c.
func clientObjects(c workload) []runtime.Object {
	return []runtime.Object{
		&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: c.namespace}},
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: c.serviceAccount, Namespace: c.namespace}},
		&corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: c.namespace, Labels: map[string]string{"app": c.serviceAccount}},
			Spec:       corev1.PodSpec{ServiceAccountName: c.serviceAccount, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
			Status: corev1.PodStatus{
				Phase:      corev1.PodRunning,
				PodIP:      c.ip.String(),
				PodIPs:     []corev1.PodIP{{IP: c.ip.String()}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			},
		},
	}
}

// targetPort resolves p's target port (a number or the name of a container
// port) to the pod's port number.
func (mf *manifests) targetPort(t *testing.T, p corev1.ServicePort) int {
	t.Helper()
	if p.TargetPort.StrVal != "" {
		return containerPort(t, mf.container(t), p.TargetPort.StrVal)
	}
	if p.TargetPort.IntVal == 0 {
		return int(p.Port)
	}
	return p.TargetPort.IntValue()
}

// checkShape checks what the manifests must say for the greeter to run
// proxyless, and returns the greeter's xDS port (the Service's target port)
// and its admin gRPC port (the readiness probe's).
func (mf *manifests) checkShape(t *testing.T) (xdsHost string, xdsPort, probePort int) {
	t.Helper()
	tmpl := mf.deployment.Spec.Template
	if got := tmpl.Annotations["inject.istio.io/templates"]; got != "grpc-agent" {
		t.Errorf("pod annotation inject.istio.io/templates = %q, want grpc-agent", got)
	}
	var proxyConfig struct {
		HoldApplicationUntilProxyStarts *bool `json:"holdApplicationUntilProxyStarts"`
	}
	if err := yaml.Unmarshal([]byte(tmpl.Annotations["proxy.istio.io/config"]), &proxyConfig); err != nil || proxyConfig.HoldApplicationUntilProxyStarts == nil || !*proxyConfig.HoldApplicationUntilProxyStarts {
		t.Errorf("pod annotation proxy.istio.io/config = %q (%v), want holdApplicationUntilProxyStarts: true", tmpl.Annotations["proxy.istio.io/config"], err)
	}
	for k, v := range mf.deployment.Spec.Selector.MatchLabels {
		if tmpl.Labels[k] != v {
			t.Errorf("the Deployment's selector %s=%s does not select its pods (labels %v)", k, v, tmpl.Labels)
		}
	}
	for k, v := range mf.service.Spec.Selector {
		if tmpl.Labels[k] != v {
			t.Errorf("the Service's selector %s=%s does not select the Deployment's pods (labels %v)", k, v, tmpl.Labels)
		}
	}
	if !slices.ContainsFunc(mf.serviceAccounts, func(sa *corev1.ServiceAccount) bool {
		return sa.Name == tmpl.Spec.ServiceAccountName && sa.Namespace == mf.deployment.Namespace
	}) {
		t.Errorf("the pod's service account %q is not among the manifests' ServiceAccounts", tmpl.Spec.ServiceAccountName)
	}

	c := mf.container(t)
	bootstrap := ""
	for _, e := range c.Env {
		if e.Name == "GRPC_XDS_BOOTSTRAP" {
			bootstrap = e.Value
		}
	}
	if bootstrap != grpcAgentBootstrap {
		t.Errorf("GRPC_XDS_BOOTSTRAP = %q, want %q (where istio-agent writes it)", bootstrap, grpcAgentBootstrap)
	}
	// grpc-go's logger prints only errors by default; what docs/istio.md
	// tells operators to look for in the logs is warnings.
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "GRPC_GO_LOG_SEVERITY_LEVEL" && (e.Value == "warning" || e.Value == "info")
	}) {
		t.Errorf("container %s does not set GRPC_GO_LOG_SEVERITY_LEVEL to warning or info: warnings would not print", c.Name)
	}

	if len(mf.service.Spec.Ports) != 1 {
		t.Fatalf("the Service has %d ports, want 1: the greeter's xDS-managed port", len(mf.service.Spec.Ports))
	}
	sp := mf.service.Spec.Ports[0]
	if proto := kubeconv.ConvertProtocol(sp.Port, sp.Name, sp.Protocol, sp.AppProtocol); !proto.IsGRPC() {
		t.Errorf("Istio takes the Service port %q for %v, want gRPC", sp.Name, proto)
	}
	xdsPort = mf.targetPort(t, sp)

	if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil {
		t.Fatalf("container %s has no gRPC readiness probe", c.Name)
	}
	probePort = int(c.ReadinessProbe.GRPC.Port)
	httpPort := containerPort(t, c, "http-admin")
	for _, p := range []int{xdsPort, probePort, httpPort} {
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return int(cp.ContainerPort) == p }) {
			t.Errorf("container %s does not declare port %d", c.Name, p)
		}
	}
	// Prometheus (and Istio's metrics merging) scrape the greeter's
	// /metrics, with its mesh metrics, on the admin HTTP port.
	for k, want := range map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(httpPort), "prometheus.io/path": "/metrics"} {
		if got := tmpl.Annotations[k]; got != want {
			t.Errorf("pod annotation %s = %q, want %q", k, got, want)
		}
	}
	if slices.Contains(c.Args, "-mesh-metrics=false") {
		t.Errorf("container %s's args turn the mesh metrics off", c.Name)
	}
	// The greeter's flags listen where the manifests say.
	xdsHost = "0.0.0.0"
	for _, arg := range []string{
		fmt.Sprintf("-addr=%s:%d", xdsHost, xdsPort),
		fmt.Sprintf("-admin-grpc-addr=0.0.0.0:%d", probePort),
		fmt.Sprintf("-admin-http-addr=0.0.0.0:%d", httpPort),
		// Istio's access log on the pod's log, as a sidecar's.
		"-access-log-file=/dev/stdout",
	} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("container %s's args %q lack %q", c.Name, c.Args, arg)
		}
	}
	return xdsHost, xdsPort, probePort
}

// checkFrontend checks frontend.yaml's Deployment: a proxyless pod (the
// grpc-agent template, the bootstrap where istio-agent writes it) whose
// identity is the AuthorizationPolicy's principal and whose -target is the
// Service's xds:/// name; and returns its workload.
func (mf *manifests) checkFrontend(t *testing.T, principal, target string) workload {
	t.Helper()
	d := mf.frontend
	tmpl := d.Spec.Template
	w := workload{name: d.Name + "-0", namespace: d.Namespace, serviceAccount: tmpl.Spec.ServiceAccountName}
	if got := fmt.Sprintf("cluster.local/ns/%s/sa/%s", w.namespace, w.serviceAccount); got != principal {
		t.Errorf("the frontend runs as %s, want the AuthorizationPolicy's principal %s", got, principal)
	}
	if !slices.ContainsFunc(mf.serviceAccounts, func(sa *corev1.ServiceAccount) bool {
		return sa.Name == w.serviceAccount && sa.Namespace == w.namespace
	}) ||
		!slices.ContainsFunc(mf.namespaces, func(ns *corev1.Namespace) bool { return ns.Name == w.namespace }) {
		t.Errorf("the frontend's namespace %q and service account %q are not both in the manifests", w.namespace, w.serviceAccount)
	}
	if got := tmpl.Annotations["inject.istio.io/templates"]; got != "grpc-agent" {
		t.Errorf("frontend: pod annotation inject.istio.io/templates = %q, want grpc-agent", got)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if tmpl.Labels[k] != v {
			t.Errorf("the frontend's selector %s=%s does not select its pods (labels %v)", k, v, tmpl.Labels)
		}
	}
	cs := tmpl.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("the frontend has %d containers, want 1", len(cs))
	}
	if !slices.Contains(cs[0].Env, corev1.EnvVar{Name: "GRPC_XDS_BOOTSTRAP", Value: grpcAgentBootstrap}) {
		t.Errorf("frontend: GRPC_XDS_BOOTSTRAP is not %q (where istio-agent writes it): %v", grpcAgentBootstrap, cs[0].Env)
	}
	if !slices.Contains(cs[0].Args, "-target="+target) {
		t.Errorf("frontend: args %q lack -target=%s, the greeter Service's xds:/// name", cs[0].Args, target)
	}
	return w
}

// checkNetworkPolicy checks networkpolicy.yaml: it selects the greeter's
// pods, admits anyone to the xDS port only, and admits the metrics port
// only from named sources. Whether a CNI enforces it is not tested.
func (mf *manifests) checkNetworkPolicy(t *testing.T, xdsPort, probePort, httpPort int) {
	t.Helper()
	var np *networkingv1.NetworkPolicy
	for _, p := range mf.networkPolicies {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", p.Name, err)
		}
		if p.Namespace == mf.deployment.Namespace && sel.Matches(labels.Set(mf.deployment.Spec.Template.Labels)) {
			np = p
		}
	}
	if np == nil {
		t.Fatal("no NetworkPolicy selects the greeter's pods: its admin ports are open to every pod")
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy %s: policyTypes %v lack Ingress", np.Name, np.Spec.PolicyTypes)
	}
	xdsOpen, metricsFromSome := false, false
	for i, r := range np.Spec.Ingress {
		if len(r.Ports) == 0 && len(r.From) == 0 {
			t.Errorf("NetworkPolicy %s: ingress rule %d admits every port from everywhere", np.Name, i)
		}
		for _, p := range r.Ports {
			if p.Port == nil {
				t.Errorf("NetworkPolicy %s: ingress rule %d admits every port", np.Name, i)
				continue
			}
			switch port := p.Port.IntValue(); {
			case len(r.From) == 0 && port == xdsPort:
				xdsOpen = true
			case len(r.From) == 0:
				t.Errorf("NetworkPolicy %s: port %d is open to every pod (want only the xDS port %d; the admin ports %d and %d bypass mTLS and the AuthorizationPolicy)", np.Name, port, xdsPort, probePort, httpPort)
			case port == httpPort:
				metricsFromSome = true
			}
		}
	}
	if !xdsOpen {
		t.Errorf("NetworkPolicy %s: the xDS port %d is not open to clients", np.Name, xdsPort)
	}
	if !metricsFromSome {
		t.Errorf("NetworkPolicy %s: the metrics port %d is not admitted from Prometheus", np.Name, httpPort)
	}
}

// allowRule returns the principal and the path of the manifests' one ALLOW
// AuthorizationPolicy, as istio parsed them.
func (mf *manifests) allowRule(t *testing.T) (principal, path string) {
	t.Helper()
	for _, c := range mf.configs {
		ap, ok := c.Spec.(*securitypb.AuthorizationPolicy)
		if !ok || ap.GetAction() != securitypb.AuthorizationPolicy_ALLOW {
			continue
		}
		r := ap.GetRules()
		if len(r) != 1 || len(r[0].GetFrom()) != 1 || len(r[0].GetTo()) != 1 ||
			len(r[0].GetFrom()[0].GetSource().GetPrincipals()) != 1 || len(r[0].GetTo()[0].GetOperation().GetPaths()) != 1 {
			t.Fatalf("AuthorizationPolicy %s/%s: want one rule with one principal and one path", c.Namespace, c.Name)
		}
		return r[0].GetFrom()[0].GetSource().GetPrincipals()[0], r[0].GetTo()[0].GetOperation().GetPaths()[0]
	}
	t.Fatal("no ALLOW AuthorizationPolicy in the manifests")
	return "", ""
}

// TestKubernetesManifests: the greeter's manifests (examples/kubernetes),
// fed to istiod as they are (the pod's labels and annotations, the
// Service's ports, the PeerAuthentication, AuthorizationPolicy and
// DestinationRule), give a server that is ready on the probe's port, serves
// mTLS clients with a mesh identity only, and lets only the principal the
// AuthorizationPolicy names call the method it names.
func TestKubernetesManifests(t *testing.T) {
	mf := loadManifests(t)
	xdsHost, xdsPort, probePort := mf.checkShape(t)
	if t.Failed() {
		t.FailNow()
	}
	pod := mf.pod()
	principal, path := mf.allowRule(t)
	target := fmt.Sprintf("xds:///%s.%s.svc.cluster.local:%d", mf.service.Name, mf.service.Namespace, mf.service.Spec.Ports[0].Port)
	// The allowed client, frontend.yaml's pod: grpc-go's xDS client runs as
	// it below.
	frontend := mf.checkFrontend(t, principal, target)
	frontend.ip = clientPod.ip
	mf.checkNetworkPolicy(t, xdsPort, probePort, containerPort(t, mf.container(t), "http-admin"))
	m := newMesh(t, meshSpec{
		config:     mf.istio,
		server:     &pod,
		serverPort: xdsPort,
		// The greeter's -addr host. The greeter listens on "tcp4" there
		// (named 0.0.0.0:<port>); the test listens on "tcp", which Go
		// reports as [::]:<port> on a dual-stack host, so the server
		// watches xds.istio.io/grpc/lds/inbound/[::]:<port>: istiod builds
		// the Listener for any host of a Service's target port, both names
		// included.
		listenHost: xdsHost,
		kubeObjects: func(port int) []runtime.Object {
			if port != xdsPort {
				t.Fatalf("the server listens on %d, want the manifests' %d", port, xdsPort)
			}
			return mf.kubeObjects(t, pod, frontend)
		},
	})

	// The readiness probe's port serves the health service the server
	// reports to.
	ap := startAdminPortOn(t, netip.AddrPortFrom(pod.ip, uint16(probePort)).String())
	es := m.startEcho(t, xds.ReadinessHealth(ap.hs, xds.ReadinessOptions{}))
	watch, err := ap.health.Watch(testContext(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Health.Watch on the probe's port %d: %v", probePort, err)
	}
	for {
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("the readiness probe on port %d: %v, want SERVING", probePort, err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}

	var allowed, denied rpc
	for _, r := range []rpc{unaryCall, emptyCall} {
		if "/grpc.testing.TestService/"+string(r) == path {
			allowed = r
		} else {
			denied = r
		}
	}
	if allowed == "" {
		t.Fatalf("the AuthorizationPolicy allows %q, not a method of the greeter's grpc.testing.TestService the test calls", path)
	}
	allowedID := "spiffe://" + principal
	allowedCert := m.ca.issue(t, allowedID).tls
	// Same trust domain and namespace, another service account.
	otherID := allowedID[:strings.LastIndex(allowedID, "/")+1] + "not-" + allowedID[strings.LastIndex(allowedID, "/")+1:]
	otherCert := m.ca.issue(t, otherID).tls
	served := result{code: codes.OK, clientID: allowedID, security: "mtls", serverID: pod.spiffeID()}
	if allowed != unaryCall {
		served.clientID, served.security = "", ""
	}

	// grpc-go's xDS client of the Service, as the allowed workload: istiod
	// gives it the Service's port and, with the manifests' DestinationRule,
	// mTLS.
	t.Run("grpc-go xDS client to "+target, func(t *testing.T) {
		cc := m.xdsClientTo(t, frontend, target)
		awaitResult(t, cc, allowed, served)
		expect(t, cc, denied, result{code: codes.PermissionDenied})
	})

	for _, c := range []struct {
		desc   string
		method rpc
		want   result
		cc     func() *grpc.ClientConn
	}{
		{"mTLS as " + allowedID + ", allowed method", allowed, served, func() *grpc.ClientConn { return m.directTLS(t, es, &allowedCert) }},
		{"mTLS as " + allowedID + ", another method", denied, result{code: codes.PermissionDenied}, func() *grpc.ClientConn { return m.directTLS(t, es, &allowedCert) }},
		{"mTLS as " + otherID + ", allowed method", allowed, result{code: codes.PermissionDenied}, func() *grpc.ClientConn { return m.directTLS(t, es, &otherCert) }},
		{"plaintext", allowed, result{code: codes.Unavailable}, func() *grpc.ClientConn { return es.directPlaintext(t) }},
		{"TLS without a client certificate", allowed, result{code: codes.Unavailable}, func() *grpc.ClientConn { return m.directTLS(t, es, nil) }},
	} {
		t.Run(c.desc, func(t *testing.T) {
			accepted := es.lis.accepted.Load()
			got, err := call(testContext(t), c.cc(), c.method)
			if got != c.want {
				t.Errorf("%s: got %v (%v), want %v; Listener:\n%s", c.method, got, err, c.want, listenerStatus(t))
			}
			if es.lis.accepted.Load() == accepted {
				t.Errorf("the client never reached the server")
			}
		})
	}
}
