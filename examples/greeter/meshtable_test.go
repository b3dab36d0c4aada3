package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// nodeKind is the greeter's node metadata.
type nodeKind int

const (
	nodeComplete    nodeKind = iota // what istio-agent writes (pilotAgentMetadata)
	nodeNoClusterID                 // without CLUSTER_ID
	nodeNoLabels                    // without LABELS (the pod's labels)
)

func (n nodeKind) String() string {
	return [...]string{"complete node metadata", "no CLUSTER_ID", "no LABELS"}[n]
}

func (n nodeKind) metadata() map[string]any {
	md := maps.Clone(pilotAgentMetadata)
	switch n {
	case nodeNoClusterID:
		delete(md, "CLUSTER_ID")
	case nodeNoLabels:
		delete(md, "LABELS")
	}
	return md
}

// wantLabels is the table of docs/observability.md ("What Kiali sees"):
// the labels of an RPC from a caller sending h over c to a greeter with
// node metadata n, as Prometheus stores them (an empty label is absent).
// What Envoy's istio_stats would write is said where the greeter differs
// (envoyproxy/envoy contrib/istio/filters/http/istio_stats, the inbound
// side; an Envoy sidecar reads Istio's keys of the header only).
func wantLabels(n nodeKind, h headerKind, c connKind) map[string]string {
	l := map[string]string{
		"reporter": "destination", "request_protocol": "grpc", "response_flags": "-", "response_code": "200", "grpc_response_status": "0",
		// The :authority, as a sidecar's inbound cluster names the service.
		"destination_service": svcHost, "destination_service_name": "greeter", "destination_service_namespace": "default",
		// WORKLOAD_NAME, NAMESPACE.
		"destination_workload": "greeter", "destination_workload_namespace": "default",
		// Without LABELS: app and version unknown (Envoy: empty); the
		// canonical service is the workload's name and the revision
		// "latest", Istio's own defaults (pkg/kube/labels CanonicalService),
		// where Envoy writes them empty and Kiali would skip the series
		// ("missing expected TS labels").
		"destination_app": "greeter", "destination_version": "v1",
		"destination_canonical_service": "greeter", "destination_canonical_revision": "v1",
		// CLUSTER_ID; without it absent, as Envoy writes it: present and
		// "unknown", Kiali would drop the series (IsBadDestTelemetry case 2)
		// whenever the source's cluster is unknown too.
		"destination_cluster": "Kubernetes",
		// The SPIFFE ID of the greeter's certificate on TLS.
		"destination_principal": "unknown",
		// mutual_tls when the client presented a certificate. (Envoy: only
		// when both certificates have a URI SAN, so "none" for mTLS without
		// a SPIFFE ID.)
		"connection_security_policy": "none",
	}
	switch n {
	case nodeNoLabels:
		l["destination_app"], l["destination_version"] = "unknown", "unknown"
		l["destination_canonical_service"], l["destination_canonical_revision"] = "greeter", "latest"
	case nodeNoClusterID:
		delete(l, "destination_cluster")
	}
	if c != connPlain {
		l["destination_principal"] = greeterID
	}
	if c == connMTLS || c == connMTLSNoSPIFFE {
		l["connection_security_policy"] = "mutual_tls"
	}

	// The source: unknown, revision latest, unless the header says.
	src := map[string]string{"workload": "unknown", "workload_namespace": "unknown", "app": "unknown", "version": "unknown",
		"canonical_service": "unknown", "canonical_revision": "latest", "cluster": "unknown", "principal": "unknown"}
	if c == connMTLS {
		// The certificate's SPIFFE ID.
		src["principal"] = clientID(h.name())
	}
	switch h {
	case hdrIstio:
		maps.Copy(src, map[string]string{"workload": "sleep", "workload_namespace": "client-ns", "app": "sleep", "version": "v1",
			"canonical_service": "sleep", "canonical_revision": "v1", "cluster": "Kubernetes"})
	case hdrCSMGKE:
		// The plugin's keys: workload, namespace, canonical service,
		// cluster; no app or version. (Envoy reads none of them: its
		// series would be unknown, and over mTLS dropped by Kiali's case 1.)
		maps.Copy(src, map[string]string{"workload": csmGKEWorkload, "workload_namespace": "client-ns",
			"canonical_service": csmGKECanonical, "cluster": csmGKECluster})
	case hdrCSMOff:
		src["canonical_service"] = csmOffCanonical
		if c == connMTLS {
			// The namespace from the SPIFFE ID, as Envoy takes it. Its
			// cluster is not said: Envoy writes "unknown", which Kiali's
			// IsBadSourceTelemetry case 2 drops. The client is in the
			// greeter's trust domain: the greeter's own cluster, else
			// (no CLUSTER_ID) absent.
			src["workload_namespace"] = "client-ns"
			src["cluster"] = "Kubernetes"
			if n == nodeNoClusterID {
				src["cluster"] = ""
			}
		}
	}
	// hdrNone, hdrMalformed over mTLS: the SPIFFE ID names client-ns, but
	// without workload or canonical service Kiali would drop a known
	// namespace (IsBadSourceTelemetry case 1): unknown, where Envoy writes
	// client-ns.
	for k, v := range src {
		if v != "" {
			l["source_"+k] = v
		}
	}
	return l
}

// TestMeshMetricsKialiTable: every combination of the peer metadata a
// caller sends (none, an Envoy sidecar's, grpc-go's CSM plugin's on GKE and
// off Google Cloud, a malformed one), its connection (plaintext, TLS, mTLS
// with and without a SPIFFE ID) and the greeter's node metadata (complete,
// without CLUSTER_ID, without LABELS): a real greeter, real grpc-go clients
// (the CSM plugin for real), real TLS with certificates made now. Each
// RPC's istio_requests_total series, scraped from /metrics, has the labels
// of wantLabels, and Kiali's graph keeps it (kialiEdge: Kiali's drop rules,
// source and destination cases 1 and 2).
func TestMeshMetricsKialiTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pki := newMeshPKI(t)
	nodes := []nodeKind{nodeComplete, nodeNoClusterID, nodeNoLabels}
	// The CSM plugin's clients first: before any server exists.
	md := startMetadataStandIn(t)
	csm := map[headerKind][][]*caller{
		hdrCSMOff: csmCallers(ctx, t, pki, md, false, len(nodes)),
		hdrCSMGKE: csmCallers(ctx, t, pki, md, true, len(nodes)),
	}
	for i, n := range nodes {
		t.Run(n.String(), func(t *testing.T) {
			ms, bs := managementServerFor(t, n.metadata(), pki.providers)
			g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second})
			g.publishListener(ctx, t, ms, meshListener(t, uint32(g.addr.Port)))
			g.waitServing(ctx, t)
			var counts map[string]float64
			for _, h := range headerKinds {
				for j, c := range connKinds {
					var cl *caller
					if callers, ok := csm[h]; ok {
						cl = callers[i][j]
						cl.point(g)
					} else {
						cl = newCaller(t, pki, g, h, c)
					}
					var got map[string]string
					got, counts = g.seriesOf(ctx, t, counts, func() error { return cl.call(ctx) })
					// The exporter's label of the instrumentation scope aside.
					if got["otel_scope_name"] != "github.com/proxyless-grpc/xds/mesh" {
						t.Errorf("%v, %v: otel_scope_name %q, want the mesh metrics'", h, c, got["otel_scope_name"])
					}
					delete(got, "otel_scope_name")
					want := wantLabels(n, h, c)
					if !maps.Equal(got, want) {
						t.Errorf("%v, %v: labels differ:\n%s", h, c, labelDiff(want, got))
					}
					edge, err := kialiEdge(got)
					if err != nil {
						t.Errorf("%v, %v: Kiali drops the series: %v\n%v", h, c, err, got)
						continue
					}
					t.Logf("%v, %v: edge %s", h, c, edge)
				}
			}
		})
	}
}

// labelDiff lists the labels of want and got that differ.
func labelDiff(want, got map[string]string) string {
	keys := slices.Sorted(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	var s string
	for _, k := range keys {
		w, wok := want[k]
		g, gok := got[k]
		if w != g || wok != gok {
			s += fmt.Sprintf("  %s: want %q (present %v), got %q (present %v)\n", k, w, wok, g, gok)
		}
	}
	return s
}
