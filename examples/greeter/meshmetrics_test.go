package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/proxyless-grpc/xds/internal/meshmetrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

// pilotAgentMetadata is the node metadata istio-agent writes into a
// proxyless gRPC pod's bootstrap (pkg/istio-agent/grpcxds), here for the
// tests' bootstrap.
var pilotAgentMetadata = map[string]any{
	"NAME": "greeter-7f9c-abcde", "NAMESPACE": "default", "WORKLOAD_NAME": "greeter", "CLUSTER_ID": "Kubernetes",
	"SERVICE_ACCOUNT": "greeter", "MESH_ID": "cluster.local", "GENERATOR": "grpc",
	"OWNER": "kubernetes://apis/apps/v1/namespaces/default/deployments/greeter",
	"LABELS": map[string]any{"app": "greeter", "version": "v1",
		"service.istio.io/canonical-name": "greeter", "service.istio.io/canonical-revision": "v1"},
}

// istioLabels are the 25 labels of Istio's standard metrics.
var istioLabels = []string{
	"reporter", "source_workload", "source_workload_namespace", "source_principal", "source_app", "source_version",
	"source_canonical_service", "source_canonical_revision", "source_cluster", "destination_workload",
	"destination_workload_namespace", "destination_principal", "destination_app", "destination_version",
	"destination_service", "destination_service_name", "destination_service_namespace", "destination_canonical_service",
	"destination_canonical_revision", "destination_cluster", "request_protocol", "response_flags",
	"connection_security_policy", "response_code", "grpc_response_status",
}

// kialiRequired are the labels Kiali's graph skips a series without
// (kiali graph/telemetry/istio).
var kialiRequired = []string{
	"source_workload_namespace", "source_workload", "source_canonical_service", "source_canonical_revision",
	"destination_service_namespace", "destination_service", "destination_service_name", "destination_workload_namespace",
	"destination_workload", "destination_canonical_service", "destination_canonical_revision", "response_flags",
	"request_protocol", "response_code",
}

// sidecarHeader is x-envoy-peer-metadata as an Envoy sidecar sends it:
// padded base64 of a deterministically serialized Struct, Istio's keys.
func sidecarHeader(t *testing.T) string {
	return testutils.PeerMetadata(t, map[string]any{
		"NAME": "sleep-5d8c-xyz", "NAMESPACE": "client-ns", "WORKLOAD_NAME": "sleep", "CLUSTER_ID": "Kubernetes",
		"OWNER": "kubernetes://apis/apps/v1/namespaces/client-ns/deployments/sleep",
		"LABELS": map[string]any{"app": "sleep", "version": "v1", "service.istio.io/canonical-name": "sleep",
			"service.istio.io/canonical-revision": "v1"},
	}, true)
}

// scrape parses the greeter's /metrics with Prometheus' parser.
func (g *greeterRun) scrape(ctx context.Context, t *testing.T) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	text := httpGet(ctx, t, g.adminHTTP+"/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families, text
}

// waitSeries scrapes until a series of name has the labels want, and
// returns its labels. The server records an RPC as it ends, which may be
// after the client has its answer.
func (g *greeterRun) waitSeries(ctx context.Context, t *testing.T, name string, want map[string]string) map[string]string {
	t.Helper()
	var got map[string]string
	testutils.WaitFor(ctx, t, fmt.Sprintf("a %s series with %v", name, want), func() error {
		families, _ := g.scrape(ctx, t)
		var seen []map[string]string
	series:
		for _, m := range families[name].GetMetric() {
			l := labelsOf(m)
			seen = append(seen, l)
			for k, v := range want {
				if l[k] != v {
					continue series
				}
			}
			got = l
			return nil
		}
		return fmt.Errorf("series: %v", seen)
	})
	return got
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestMeshMetricsPrometheus: the greeter (mesh metrics on by default)
// serves Istio's standard metrics at /metrics under Istio's exact names and
// types, with Envoy's buckets and the labels Kiali's graph needs, from a
// client that sends the header an Envoy sidecar sends.
func TestMeshMetricsPrometheus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ms, bs := managementServer(t)
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second})
	g.publish(ctx, t, ms)
	g.hello(ctx, t)

	hctx := metadata.AppendToOutgoingContext(ctx, meshmetrics.HeaderMetadata, sidecarHeader(t),
		meshmetrics.HeaderMetadataID, "sidecar~10.0.0.9~sleep-5d8c-xyz.client-ns~client-ns.svc.cluster.local")
	// As a client in the mesh dials it: the service's name.
	sidecar, err := grpc.NewClient(g.addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("greeter.default.svc.cluster.local:50051"))
	if err != nil {
		t.Fatal(err)
	}
	defer sidecar.Close()
	var hdr metadata.MD
	if _, err := testgrpc.NewTestServiceClient(sidecar).EmptyCall(hctx, &testgrpc.Empty{}, grpc.Header(&hdr)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	// gRPC's OpenTelemetry plugin (without CSM) wraps the streams too: one
	// reply, ours.
	if v := hdr.Get(meshmetrics.HeaderMetadata); len(v) != 1 {
		t.Fatalf("%d %s values in the reply, want 1", len(v), meshmetrics.HeaderMetadata)
	} else if w, ok := meshmetrics.DecodePeer(v[0]); !ok || w.Name != "greeter" {
		t.Errorf("the reply decodes as %+v, %v; want the greeter's workload", w, ok)
	}

	g.waitSeries(ctx, t, "istio_requests_total", map[string]string{"source_workload": "sleep"})
	families, text := g.scrape(ctx, t)
	for name, typ := range map[string]dto.MetricType{
		"istio_requests_total":                dto.MetricType_COUNTER,
		"istio_request_duration_milliseconds": dto.MetricType_HISTOGRAM,
		"istio_request_bytes":                 dto.MetricType_HISTOGRAM,
		"istio_response_bytes":                dto.MetricType_HISTOGRAM,
		"istio_request_messages_total":        dto.MetricType_COUNTER,
		"istio_response_messages_total":       dto.MetricType_COUNTER,
	} {
		mf, ok := families[name]
		if !ok {
			t.Errorf("/metrics has no %s", name)
			continue
		}
		if mf.GetType() != typ {
			t.Errorf("%s is a %v, want a %v", name, mf.GetType(), typ)
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				var bounds []float64
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) {
						bounds = append(bounds, b.GetUpperBound())
					}
				}
				if !slices.Equal(bounds, meshmetrics.Buckets) {
					t.Errorf("%s buckets %v, want Envoy's %v", name, bounds, meshmetrics.Buckets)
				}
			}
		}
	}
	for name := range families {
		if strings.HasPrefix(name, "istio_") && (strings.HasSuffix(name, "_total_total") || strings.Contains(name, "milliseconds_milliseconds") || strings.HasSuffix(name, "bytes_bytes")) {
			t.Errorf("/metrics has %s: a suffix added twice", name)
		}
	}

	var fromSidecar, fromPlain bool
	for _, m := range families["istio_requests_total"].GetMetric() {
		l := labelsOf(m)
		for _, k := range istioLabels {
			if _, ok := l[k]; !ok {
				t.Errorf("series %v has no %s", l, k)
			}
		}
		for _, k := range kialiRequired {
			if l[k] == "" {
				t.Errorf("series %v: %s empty", l, k)
			}
		}
		if l["reporter"] != "destination" || l["destination_workload"] != "greeter" || l["destination_workload_namespace"] != "default" ||
			l["destination_canonical_service"] != "greeter" || l["destination_canonical_revision"] != "v1" || l["response_code"] != "200" {
			t.Errorf("series %v: not the greeter's destination labels", l)
		}
		switch l["source_workload"] {
		case "sleep":
			fromSidecar = l["source_workload_namespace"] == "client-ns" && l["source_canonical_service"] == "sleep" && l["source_canonical_revision"] == "v1" &&
				l["destination_service"] == "greeter.default.svc.cluster.local" && l["destination_service_name"] == "greeter" && l["destination_service_namespace"] == "default"
		case "unknown":
			// Kiali keeps an unknown source unless its namespace is known.
			fromPlain = l["source_workload_namespace"] == "unknown" && l["source_canonical_service"] == "unknown"
		}
	}
	if !fromSidecar || !fromPlain {
		t.Errorf("istio_requests_total: from the sidecar client %v, from the plain one %v; want both", fromSidecar, fromPlain)
	}
	// The excerpt docs/observability.md shows.
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "istio_requests_total{") && strings.Contains(line, `source_workload="sleep"`) {
			t.Logf("%s", line)
		}
	}
}

// With -mesh-metrics=false: no Istio metric, no reply.
func TestMeshMetricsFlagOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ms, bs := managementServer(t)
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second, noMeshMetrics: true})
	g.publish(ctx, t, ms)
	var hdr metadata.MD
	hctx := metadata.AppendToOutgoingContext(ctx, meshmetrics.HeaderMetadata, sidecarHeader(t))
	if _, err := testgrpc.NewTestServiceClient(g.conn).EmptyCall(hctx, &testgrpc.Empty{}, grpc.WaitForReady(true), grpc.Header(&hdr)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	if v := hdr.Get(meshmetrics.HeaderMetadata); len(v) != 0 {
		t.Errorf("reply %q with -mesh-metrics=false", v)
	}
	families, _ := g.scrape(ctx, t)
	if _, ok := families["grpc_server_call_started_total"]; !ok {
		t.Error("/metrics has no gRPC metric: the scrape is not the greeter's")
	}
	for name := range families {
		if strings.HasPrefix(name, "istio_") {
			t.Errorf("/metrics has %s with -mesh-metrics=false", name)
		}
	}
}
