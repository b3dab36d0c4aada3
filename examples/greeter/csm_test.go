package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/stats/opentelemetry/csm"

	"github.com/proxyless-grpc/xds/internal/meshmetrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

// csmClient is a grpc-go client with grpc-go's CSM observability plugin
// enabled as a CSM program enables it (csm.EnableObservability), recording
// into a manual reader. Its target has the xds scheme, which is what makes
// the plugin exchange metadata; its manual resolver under that scheme
// points it at the greeter once r.UpdateState gives the address. With
// keepGlobal false the plugin's global options are removed once the client
// exists, so that servers created afterwards run without it. The plugin
// must be enabled before any server is created (gRPC's global options are
// not synchronized): call this before runGreeter.
func csmClient(ctx context.Context, t *testing.T, keepGlobal bool) (testgrpc.TestServiceClient, *sdkmetric.ManualReader, *manual.Resolver) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	noMetadataServer(t)
	detect, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cleanup := csm.EnableObservability(detect, opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp}})
	if keepGlobal {
		t.Cleanup(cleanup)
	}
	r := manual.NewBuilderWithScheme("xds")
	cc, err := grpc.NewClient("xds:///greeter.default.svc.cluster.local:50051", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if !keepGlobal {
		cleanup()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc), reader, r
}

// noMetadataServer keeps the plugin's GCP resource detector on loopback.
// Left alone, it probes the metadata server at 169.254.169.254, which a
// test must never reach: on a network where that address is black-holed,
// the probe outlives the test and its connection is reported as a leak.
// GCE_METADATA_HOST sends every metadata request to a loopback server that
// defines nothing (404, as the real one answers for an unknown key), so the
// detector finds no GCP resource, as on any machine off Google Cloud. This
// server is a stand-in: no real metadata server runs on loopback.
func noMetadataServer(t *testing.T) {
	t.Helper()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.NotFound(w, r)
	}))
	t.Setenv("GCE_METADATA_HOST", srv.Listener.Addr().String())
	t.Cleanup(func() {
		srv.Close()
		if asked.Load() == 0 {
			t.Error("the GCP detector never asked the loopback metadata server: where did it look?")
		}
	})
}

// pointAt gives the client of r the greeter's address.
func pointAt(r *manual.Resolver, g *greeterRun) {
	r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: g.addr.String()}}})
}

// remoteLabels returns the attributes of the client's
// grpc.client.attempt.duration points.
func remoteLabels(t *testing.T, reader *sdkmetric.ManualReader) (map[string]string, error) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "grpc.client.attempt.duration" {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok || len(h.DataPoints) == 0 {
				continue
			}
			out := map[string]string{}
			for _, kv := range h.DataPoints[0].Attributes.ToSlice() {
				out[string(kv.Key)] = kv.Value.Emit()
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("no grpc.client.attempt.duration recorded")
}

// csmEnv is the environment the CSM plugin reads its own labels from.
func csmEnv(t *testing.T) {
	t.Setenv("CSM_CANONICAL_SERVICE_NAME", "csm-client")
	t.Setenv("CSM_WORKLOAD_NAME", "csm-client-wl")
	t.Setenv("CSM_MESH_ID", "mesh-1")
}

// TestCSMClient: grpc-go's own CSM observability plugin, for real, on a
// client of the greeter (mesh metrics on, CSM off on the server): the
// greeter's Istio metrics take the source from the client's metadata, and
// the client's CSM metrics get the greeter's labels, from the bootstrap's
// node metadata, back.
func TestCSMClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	csmEnv(t)
	client, reader, r := csmClient(ctx, t, false)
	ms, bs := managementServer(t)
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second})
	g.publish(ctx, t, ms)
	pointAt(r, g)
	if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	testutils.WaitFor(ctx, t, "the CSM client's metrics to carry the greeter's labels", func() error {
		got, err := remoteLabels(t, reader)
		if err != nil {
			return err
		}
		for k, v := range map[string]string{
			"csm.remote_workload_type": "gcp_kubernetes_engine", "csm.remote_workload_canonical_service": "greeter",
			"csm.remote_workload_name": "greeter", "csm.remote_workload_namespace_name": "default",
			"csm.remote_workload_cluster_name": "Kubernetes", "csm.workload_canonical_service": "csm-client",
		} {
			if got[k] != v {
				return fmt.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
			}
		}
		return nil
	})
	l := g.waitSeries(ctx, t, "istio_requests_total", map[string]string{"source_canonical_service": "csm-client"})
	// Outside GKE the plugin sends no workload or namespace: the series
	// keeps an unknown namespace, which Kiali does not drop.
	if l["source_workload_namespace"] != "unknown" || l["source_canonical_revision"] != "latest" || l["destination_service"] != "greeter.default.svc.cluster.local" {
		t.Errorf("series from the CSM client: %v", l)
	}
}

// TestCSMServer: csm.EnableObservability on in the greeter's process, as
// in a CSM server: every connection's server gets the plugin's global
// server options, the plugin answers the header itself, and the greeter
// does not add a second value (which would make the client's labels
// unknown). Its Istio metrics still record.
func TestCSMServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	csmEnv(t)
	both, bothReader, r := csmClient(ctx, t, true)
	ms, bs := managementServer(t)
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second})
	g.publish(ctx, t, ms)
	pointAt(r, g)
	var hdr metadata.MD
	if _, err := both.EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true), grpc.Header(&hdr)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	if v := hdr.Get(meshmetrics.HeaderMetadata); len(v) != 1 {
		t.Fatalf("%d %s values with both plugins on the server, want 1", len(v), meshmetrics.HeaderMetadata)
	}
	testutils.WaitFor(ctx, t, "the CSM client's metrics to carry the CSM plugin's labels", func() error {
		got, err := remoteLabels(t, bothReader)
		if err != nil {
			return err
		}
		// The plugin's own answer (from the environment), not unknown.
		if got["csm.remote_workload_canonical_service"] != "csm-client" {
			return fmt.Errorf("csm.remote_workload_canonical_service = %q, want the server plugin's csm-client (all: %v)", got["csm.remote_workload_canonical_service"], got)
		}
		return nil
	})
	g.waitSeries(ctx, t, "istio_requests_total", map[string]string{"source_canonical_service": "csm-client", "destination_workload": "greeter"})
}
