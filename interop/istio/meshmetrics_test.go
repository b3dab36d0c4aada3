package istio

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	agentmodel "istio.io/istio/pkg/model"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

// podMeta gives a workload's node metadata what istio-agent reads from its
// pod: the workload's name (its Deployment, the pod's name without its
// suffix) and the pod's labels, canonical ones included (the injector adds
// them from app and version).
func podMeta(w workload, md *agentmodel.NodeMetadata) {
	app := strings.TrimSuffix(w.name, "-0")
	md.WorkloadName = app
	md.Labels = map[string]string{"app": app, "version": "v1",
		"service.istio.io/canonical-name": app, "service.istio.io/canonical-revision": "v1"}
}

// sidecarHeader is the x-envoy-peer-metadata an Envoy sidecar of w would
// send: its node metadata's exchanged keys, as a deterministically
// serialized Struct in padded base64 (istio/proxy's metadata exchange).
func sidecarHeader(t *testing.T, m *mesh, w workload) string {
	t.Helper()
	var boot struct {
		Node struct {
			Metadata map[string]any `json:"metadata"`
		} `json:"node"`
	}
	if err := json.Unmarshal(m.bootstrap(t, w, t.TempDir()), &boot); err != nil {
		t.Fatal(err)
	}
	exchanged := map[string]any{"NAME": w.name, "IDENTITY": w.spiffeID()}
	for _, k := range []string{"NAMESPACE", "WORKLOAD_NAME", "CLUSTER_ID", "LABELS", "OWNER"} {
		if v, ok := boot.Node.Metadata[k]; ok {
			exchanged[k] = v
		}
	}
	s, err := structpb.NewStruct(exchanged)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// TestMeshMetricsKiali: the echo server, its bootstrap from istio-agent's
// generator with the pod's labels, records Istio's standard metrics with
// xds.MeshMetrics; grpc-go's xDS client, running as the client workload
// over the mesh's mTLS, sends the header its sidecar would. /metrics,
// parsed with Prometheus' parser, has the reporter="destination" series
// Kiali's graph draws an edge from: every label it requires, none unknown.
func TestMeshMetricsKiali(t *testing.T) {
	m := newMesh(t, meshSpec{config: mtlsMesh})
	m.nodeMeta = podMeta
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m.startEcho(t, xds.MeterProvider(mp), xds.MeshMetrics())

	cc := m.xdsClient(t, clientPod)
	ctx := metadata.AppendToOutgoingContext(testContext(t), "x-envoy-peer-metadata", sidecarHeader(t, m, clientPod),
		"x-envoy-peer-metadata-id", clientPod.nodeID())
	if r, err := call(ctx, cc, unaryCall); r.code != codes.OK {
		t.Fatalf("UnaryCall from the client workload: %v (%v)", r, err)
	}

	want := map[string]string{
		"reporter": "destination", "request_protocol": "grpc", "response_code": "200", "response_flags": "-", "grpc_response_status": "0",
		"source_workload": "client", "source_workload_namespace": "client", "source_canonical_service": "client", "source_canonical_revision": "v1",
		"source_app": "client", "source_version": "v1", "source_cluster": "Kubernetes", "source_principal": clientPod.spiffeID(),
		"destination_workload": "echo", "destination_workload_namespace": "echo", "destination_canonical_service": "echo",
		"destination_canonical_revision": "v1", "destination_app": "echo", "destination_version": "v1", "destination_cluster": "Kubernetes",
		"destination_service": "echo.echo.svc.cluster.local", "destination_service_name": "echo", "destination_service_namespace": "echo",
		"destination_principal": echoPod.spiffeID(), "connection_security_policy": "mutual_tls",
	}
	testutils.WaitFor(ctx, t, "Kiali's series in /metrics", func() error {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
		if err != nil {
			t.Fatalf("parsing /metrics: %v", err)
		}
		var seen []map[string]string
		for _, mt := range families["istio_requests_total"].GetMetric() {
			got := map[string]string{}
			for _, l := range mt.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			seen = append(seen, got)
			ok := mt.GetCounter().GetValue() >= 1
			for k, v := range want {
				ok = ok && got[k] == v
			}
			if ok {
				return nil
			}
		}
		return fmt.Errorf("istio_requests_total series: %v", seen)
	})
}
