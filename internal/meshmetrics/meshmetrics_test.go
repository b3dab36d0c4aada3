package meshmetrics

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// encode serializes m as a header value: deterministically, in padded
// (Envoy) or unpadded (grpc-go CSM plugin) base64.
func encode(t *testing.T, m map[string]any, padded bool) string {
	return testutils.PeerMetadata(t, m, padded)
}

// istioNode is node metadata as pilot-agent writes it (and an Envoy
// sidecar sends as its peer metadata).
func istioNode(ns, workload string) map[string]any {
	return map[string]any{
		"NAME": workload + "-6d4b9c-x2x", "NAMESPACE": ns, "WORKLOAD_NAME": workload, "CLUSTER_ID": "Kubernetes",
		"OWNER": "kubernetes://apis/apps/v1/namespaces/" + ns + "/deployments/" + workload, "MESH_ID": "cluster.local",
		"LABELS": map[string]any{"app": workload, "version": "v1", "service.istio.io/canonical-name": workload + "-svc",
			"service.istio.io/canonical-revision": "v1"},
	}
}

func TestDecodePeer(t *testing.T) {
	istio := Workload{Name: "sleep", Namespace: "client-ns", App: "sleep", Version: "v1", CanonicalService: "sleep-svc", CanonicalRevision: "v1", Cluster: "Kubernetes"}
	unknown := unknownWorkload()
	long := encode(t, map[string]any{"NAMESPACE": strings.Repeat("n", maxHeader)}, true)
	for _, c := range []struct {
		desc   string
		header string
		want   Workload
		wantOK bool
	}{
		{"Istio keys, padded base64", encode(t, istioNode("client-ns", "sleep"), true), istio, true},
		{"Istio keys, unpadded base64", encode(t, istioNode("client-ns", "sleep"), false), istio, true},
		{"Istio keys, no canonical labels: app.kubernetes.io labels first", encode(t, map[string]any{"NAMESPACE": "ns", "WORKLOAD_NAME": "w",
			"LABELS": map[string]any{"app": "a", "app.kubernetes.io/name": "k", "version": "v1", "app.kubernetes.io/version": "v2"}}, true),
			Workload{Name: "w", Namespace: "ns", App: "k", Version: "v2", CanonicalService: "k", CanonicalRevision: "v2", Cluster: Unknown}, true},
		{"CSM keys (GKE)", encode(t, map[string]any{"type": "gcp_kubernetes_engine", "canonical_service": "csm-client", "workload_name": "client-wl",
			"namespace_name": "client-ns", "cluster_name": "c1", "location": "us-east1-b", "project_id": "p"}, false),
			Workload{Name: "client-wl", Namespace: "client-ns", App: Unknown, Version: Unknown, CanonicalService: "csm-client", CanonicalRevision: "latest", Cluster: "c1"}, true},
		{"CSM keys outside GKE", encode(t, map[string]any{"type": "unknown", "canonical_service": "csm-client"}, false),
			Workload{Name: Unknown, Namespace: Unknown, App: Unknown, Version: Unknown, CanonicalService: "csm-client", CanonicalRevision: "latest", Cluster: Unknown}, true},
		{"empty", "", unknown, false},
		{"not base64", "!!!", unknown, false},
		{"not a Struct", base64.StdEncoding.EncodeToString([]byte{0xff, 0xff, 0xff}), unknown, false},
		{"neither dialect", encode(t, map[string]any{"foo": "bar"}, true), unknown, false},
		{"too large", long, unknown, false},
	} {
		got, ok := DecodePeer(c.header)
		if ok != c.wantOK || got != c.want {
			t.Errorf("%s: DecodePeer = %+v, %v; want %+v, %v", c.desc, got, ok, c.want, c.wantOK)
		}
	}
}

// The server's reply carries both dialects in one Struct, and decodes as
// its own workload.
func TestLocalReply(t *testing.T) {
	l := NewLocal("sidecar~10.0.0.1~greeter-1.ns~ns.svc.cluster.local", mustStruct(t, istioNode("server-ns", "greeter")))
	want := Workload{Name: "greeter", Namespace: "server-ns", App: "greeter", Version: "v1", CanonicalService: "greeter-svc", CanonicalRevision: "v1", Cluster: "Kubernetes"}
	if l.Workload != want {
		t.Errorf("local workload = %+v, want %+v", l.Workload, want)
	}
	raw, err := base64.StdEncoding.DecodeString(l.Reply())
	if err != nil {
		t.Fatalf("the reply is not padded base64: %v", err)
	}
	// The CSM plugin decodes unpadded base64 only: the reply has no '='.
	if _, err := base64.RawStdEncoding.DecodeString(l.Reply()); err != nil {
		t.Errorf("the reply is not unpadded base64: %v", err)
	}
	var s structpb.Struct
	if err := proto.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k, v := range s.Fields {
		got[k] = v.GetStringValue()
	}
	for k, v := range map[string]string{"NAMESPACE": "server-ns", "WORKLOAD_NAME": "greeter", "CLUSTER_ID": "Kubernetes",
		"type": "gcp_kubernetes_engine", "canonical_service": "greeter-svc", "workload_name": "greeter", "namespace_name": "server-ns", "cluster_name": "Kubernetes"} {
		if got[k] != v {
			t.Errorf("reply[%q] = %q, want %q", k, got[k], v)
		}
	}
	if w, ok := DecodePeer(l.Reply()); !ok || w != want {
		t.Errorf("the reply decodes as %+v, %v; want %+v", w, ok, want)
	}
	// Twice the same: deterministic.
	if again := NewLocal(l.NodeID, mustStruct(t, istioNode("server-ns", "greeter"))).Reply(); again != l.Reply() {
		t.Error("two replies of the same metadata differ")
	}
	// Whatever the metadata's length, the reply needs no padding.
	for n := 1; n <= 6; n++ {
		r := NewLocal("", mustStruct(t, istioNode("ns", strings.Repeat("w", n)))).Reply()
		if r == "" || strings.Contains(r, "=") {
			t.Errorf("reply for a workload name of %d bytes: %q, want base64 without padding", n, r)
		}
	}
	// No metadata: all unknown, revision latest.
	if w := NewLocal("", nil).Workload; w != unknownWorkload() {
		t.Errorf("workload of no metadata = %+v", w)
	}
}

// TestSource: the client's side as Envoy's istio_stats writes it, except
// where Kiali's IsBadSourceTelemetry would drop the series (kiali
// graph/telemetry/istio/util): case 1, a known namespace with neither
// workload nor canonical service; case 2, a known namespace with a cluster
// present but unknown.
func TestSource(t *testing.T) {
	local := Workload{Name: "greeter", Namespace: "server-ns", CanonicalService: "greeter", Cluster: "Kubernetes"}
	istio := encode(t, istioNode("client-ns", "sleep"), true)
	noCluster := encode(t, map[string]any{"NAMESPACE": "client-ns", "WORKLOAD_NAME": "sleep"}, true)
	csmOff := encode(t, map[string]any{"type": "unknown", "canonical_service": "c"}, false)
	for _, c := range []struct {
		desc                     string
		header, peerTD, peerNS   string
		localCluster, localTD    string
		wantNS, wantName, wantCS string
		wantCluster              string
	}{
		{"the header, no certificate", istio, "", "", "Kubernetes", "td", "client-ns", "sleep", "sleep-svc", "Kubernetes"},
		{"the certificate's namespace before the header's (Envoy's order)", istio, "td", "other", "Kubernetes", "td", "other", "sleep", "sleep-svc", "Kubernetes"},
		{"a certificate alone: case 1, the namespace stays unknown", "", "td", "other", "Kubernetes", "td", Unknown, Unknown, Unknown, Unknown},
		{"a CSM header off Google Cloud over mTLS in the server's trust domain: case 2, the server's cluster", csmOff, "td", "other", "Kubernetes", "td", "other", Unknown, "c", "Kubernetes"},
		{"the same from another trust domain: case 2, the cluster absent", csmOff, "td2", "other", "Kubernetes", "td", "other", Unknown, "c", Absent},
		{"the same, the server without CLUSTER_ID: the cluster absent", csmOff, "td", "other", Unknown, "td", "other", Unknown, "c", Absent},
		{"the same, the server without a SPIFFE ID: the cluster absent", csmOff, "td", "other", "Kubernetes", "", "other", Unknown, "c", Absent},
		{"a CSM header off Google Cloud in plaintext: no namespace, the cluster unknown as Envoy has it", csmOff, "", "", "Kubernetes", "", Unknown, Unknown, "c", Unknown},
		{"an Istio header without CLUSTER_ID in plaintext: the cluster absent", noCluster, "", "", "Kubernetes", "", "client-ns", "sleep", "sleep", Absent},
		{"a malformed header in plaintext: all unknown", "!!!", "", "", "Kubernetes", "", Unknown, Unknown, Unknown, Unknown},
	} {
		l := local
		l.Cluster = c.localCluster
		w := source(c.header, c.peerTD, c.peerNS, l, c.localTD)
		if w.Namespace != c.wantNS || w.Name != c.wantName || w.CanonicalService != c.wantCS || w.Cluster != c.wantCluster {
			t.Errorf("%s: %+v; want namespace %q, workload %q, canonical service %q, cluster %q", c.desc, w, c.wantNS, c.wantName, c.wantCS, c.wantCluster)
		}
	}
}

// destination_cluster is CLUSTER_ID, else absent (empty), as Envoy writes it.
func TestDestinationCluster(t *testing.T) {
	md := istioNode("server-ns", "greeter")
	delete(md, "CLUSTER_ID")
	for _, c := range []struct {
		local *Local
		want  string
	}{
		{NewLocal("n", mustStruct(t, istioNode("server-ns", "greeter"))), "Kubernetes"},
		{NewLocal("n", mustStruct(t, md)), Absent},
		{NewLocal("n", nil), Absent},
	} {
		set := attribute.NewSet(baseAttrs(c.local, "", unknownWorkload(), "", false, "a")...)
		if v, ok := set.Value(LabelDestinationCluster); !ok || v.AsString() != c.want {
			t.Errorf("destination_cluster of %+v = %q, %v; want %q", c.local.Workload, v.AsString(), ok, c.want)
		}
	}
}

func TestSpiffeID(t *testing.T) {
	u, _ := url.Parse("spiffe://cluster.local/ns/default/sa/sleep")
	d, _ := url.Parse("https://example.com/ns/x")
	id, ns := SpiffeID(&x509.Certificate{URIs: []*url.URL{d, u}})
	if id != "spiffe://cluster.local/ns/default/sa/sleep" || ns != "default" {
		t.Errorf("SpiffeID = %q, %q", id, ns)
	}
	if id, ns := SpiffeID(nil); id != "" || ns != "" {
		t.Errorf("SpiffeID(nil) = %q, %q", id, ns)
	}
}

func TestServiceOf(t *testing.T) {
	for _, c := range []struct{ authority, svc, name, ns string }{
		{"greeter.prod.svc.cluster.local:50051", "greeter.prod.svc.cluster.local", "greeter", "prod"},
		{"greeter.prod.svc", "greeter.prod.svc", "greeter", "prod"},
		{"greeter.prod:80", "greeter.prod", "greeter", "prod"},
		{"greeter", "greeter", "greeter", "own"},
		{"10.0.0.1:8080", "10.0.0.1", "10.0.0.1", "own"},
		{"[::1]:8080", "::1", "::1", "own"},
		{"", Unknown, Unknown, "own"},
	} {
		svc, name, ns := serviceOf(c.authority, "own")
		if diff := cmp.Diff([]string{c.svc, c.name, c.ns}, []string{svc, name, ns}); diff != "" {
			t.Errorf("serviceOf(%q) (-want +got):\n%s", c.authority, diff)
		}
	}
}

// Every one of Istio's 25 labels, once.
func TestLabels(t *testing.T) {
	l := NewLocal("n", mustStruct(t, istioNode("server-ns", "greeter")))
	set := withCodes(baseAttrs(l, "spiffe://a/server", unknownWorkload(), "", true, "greeter.server-ns.svc:1"), 14)
	if set.Len() != 25 {
		t.Errorf("%d labels, want 25: %v", set.Len(), set.Encoded(nil))
	}
	for k, want := range map[string]string{LabelGRPCResponseStatus: "14", LabelResponseCode: "200", LabelReporter: "destination",
		LabelConnectionSecurityPolicy: "mutual_tls", LabelDestinationPrincipal: "spiffe://a/server", LabelDestinationServiceName: "greeter"} {
		if v, ok := set.Value(attributeKey(k)); !ok || v.AsString() != want {
			t.Errorf("label %s = %q, want %q", k, v.AsString(), want)
		}
	}
}

func attributeKey(k string) attribute.Key { return attribute.Key(k) }

// Label sets beyond MaxSeries, which a client could make by varying its
// header, go to one overflow series: memory stays bounded.
func TestMaxSeries(t *testing.T) {
	r, err := New(noop.NewMeterProvider(), "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	base := baseAttrs(r.local, "", unknownWorkload(), "", false, "a")
	var last *codeOpts
	for i := range MaxSeries + 5 {
		b := append(base[:len(base):len(base)], attribute.Int("i", i))
		last = newCodeOpts(r, b, 0)
	}
	if len(r.series) != MaxSeries+1 {
		t.Errorf("%d series, want MaxSeries+1 (the overflow's)", len(r.series))
	}
	if last != r.overflow || r.overflow == nil {
		t.Error("a label set beyond MaxSeries did not go to the overflow series")
	}
	// A label set already known keeps its series.
	if o := newCodeOpts(r, append(base[:len(base):len(base)], attribute.Int("i", 3)), 0); o == r.overflow {
		t.Error("a known label set went to the overflow series")
	}
}

// Label sets are cached per client workload, not per connection: two
// connections whose certificates name one SPIFFE ID share theirs, so that
// a server with many connections keeps a few; and the cache is bounded
// whatever headers clients send.
func TestLabelCache(t *testing.T) {
	r, err := New(noop.NewMeterProvider(), "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{r: r, entries: make(map[entryKey]*entry)}
	certOf := func(id string) *x509.Certificate {
		u, err := url.Parse(id)
		if err != nil {
			t.Fatal(err)
		}
		return &x509.Certificate{URIs: []*url.URL{u}}
	}
	connCtx := func(cert *x509.Certificate) context.Context {
		info := credentials.TLSInfo{}
		if cert != nil {
			info.State.PeerCertificates = []*x509.Certificate{cert}
		}
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: info})
	}
	const sleep = "spiffe://td/ns/client-ns/sa/sleep"
	a := h.lookup(keyOf(connCtx(certOf(sleep)), "svc", ""))
	b := h.lookup(keyOf(connCtx(certOf(sleep)), "svc", ""))
	if a != b {
		t.Error("two connections of one workload got label sets of their own")
	}
	other := h.lookup(keyOf(connCtx(certOf("spiffe://td/ns/other/sa/x")), "svc", ""))
	noCert := h.lookup(keyOf(connCtx(nil), "svc", ""))
	plain := h.lookup(keyOf(context.Background(), "svc", ""))
	if other == a || noCert == a || plain == a || noCert == plain {
		t.Error("different identities or security share a label set")
	}
	set := attribute.NewSet(a.base...)
	if v, _ := set.Value(LabelSourcePrincipal); v.AsString() != sleep {
		t.Errorf("source_principal = %q, want %q", v.AsString(), sleep)
	}
	if v, _ := set.Value(LabelConnectionSecurityPolicy); v.AsString() != "mutual_tls" {
		t.Errorf("connection_security_policy = %q, want mutual_tls", v.AsString())
	}
	for i := range maxEntries + 10 {
		h.lookup(keyOf(context.Background(), "svc", strconv.Itoa(i)))
	}
	if n := len(h.entries); n > maxEntries {
		t.Errorf("%d cached label sets, want at most %d", n, maxEntries)
	}
}
