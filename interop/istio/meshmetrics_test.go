package istio

import (
	"context"
	"crypto/x509"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
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
	return testutils.PeerMetadata(t, exchanged, true)
}

// TestMeshMetricsKiali: the echo server, its bootstrap from istio-agent's
// generator with the pod's labels, records Istio's standard metrics with
// xds.MeshMetrics; grpc-go's xDS client, running as the client workload
// over the mesh's mTLS, sends the header its sidecar would. /metrics,
// parsed with Prometheus' parser, has the reporter="destination" series
// Kiali's graph draws an edge from: every label it requires, none unknown.
// Both workloads' certificates are istiod's CA's: the test checks the chains
// the two peers presented on the connection against that CA's root, so the
// principals in the series are identities istio's CA issued.
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
	// The certificate chain the client presented, as the server's
	// handlers see it.
	clientChain := make(chan []*x509.Certificate, 1)
	m.startEcho(t, xds.MeterProvider(mp), xds.MeshMetrics(), grpc.ChainUnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			var chain []*x509.Certificate
			if p, ok := peer.FromContext(ctx); ok {
				if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
					chain = info.State.PeerCertificates
				}
			}
			select {
			case clientChain <- chain:
			default:
			}
			return handler(ctx, req)
		}))

	cc := m.xdsClient(t, clientPod)
	ctx := metadata.AppendToOutgoingContext(testContext(t), "x-envoy-peer-metadata", sidecarHeader(t, m, clientPod),
		"x-envoy-peer-metadata-id", clientPod.nodeID())
	var server peer.Peer
	if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Peer(&server)); err != nil {
		t.Fatalf("UnaryCall from the client workload: %v", err)
	}
	// The principals below come from these certificates: both issued by
	// istio's CA, each naming only its workload's SPIFFE ID.
	select {
	case chain := <-clientChain:
		if err := verifyChain(chain, m.ca.pool, clientPod.spiffeID(), x509.ExtKeyUsageClientAuth); err != nil {
			t.Errorf("the client's certificate, as the server received it, against istio's CA root: %v", err)
		}
	default:
		t.Fatal("the server's interceptor did not see the UnaryCall")
	}
	if info, ok := server.AuthInfo.(credentials.TLSInfo); !ok {
		t.Errorf("the client's connection is not TLS: %T", server.AuthInfo)
	} else if err := verifyChain(info.State.PeerCertificates, m.ca.pool, echoPod.spiffeID(), x509.ExtKeyUsageServerAuth); err != nil {
		t.Errorf("the server's certificate, as the client received it, against istio's CA root: %v", err)
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
