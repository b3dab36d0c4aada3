package main

// Kiali's graph, as its source builds it from Istio's standard metrics, to
// check that it keeps every series the greeter writes. From kiali/kiali
// (commit d733a096e02eea357a274edcbbde8314e80786f4):
//
//   - graph/telemetry/istio/istio.go, buildNamespaceTrafficMap: the
//     namespace graph's queries (kialiNamespaceQuery) and populateTrafficMap,
//     which reads each series and skips the ones kialiEdge skips;
//   - graph/telemetry/istio/util/util.go: HandleClusters, HandleDestination,
//     IsBadSourceTelemetry and IsBadDestTelemetry (the drop rules);
//   - graph/types.go, Id: the node IDs of the graph (an error skips the
//     series too); graph/util.go, IsOK and PromQuery (which wraps every
//     query in round(..., 0.001)); graph/options.go: the defaults (a
//     workload graph of the last 10m, idle edges left out, ambient traffic
//     "total").

import (
	"fmt"
	"regexp"
	"strings"
)

// kialiGroupBy is the "by" clause of the namespace graph's request queries
// (buildNamespaceTrafficMap, "HTTP/GRPC request traffic"): 17 labels.
var kialiGroupBy = []string{
	"source_cluster", "source_workload_namespace", "source_workload", "source_canonical_service", "source_canonical_revision",
	"destination_cluster", "destination_service_namespace", "destination_service", "destination_service_name",
	"destination_workload_namespace", "destination_workload", "destination_canonical_service", "destination_canonical_revision",
	"request_protocol", "response_code", "grpc_response_status", "response_flags",
}

// kialiNamespaceQuery is query 2 of buildNamespaceTrafficMap, the one that
// finds the requests a namespace's workloads received (reporter as
// util.GetReporter writes it: `reporter=~"waypoint|destination"` with the
// default ambient traffic "total", `reporter="destination"` with "none"),
// over duration, idle edges left out, wrapped as PromQuery wraps it.
func kialiNamespaceQuery(reporter, namespace, duration string) string {
	q := fmt.Sprintf(`sum(rate(istio_requests_total{%s,destination_workload_namespace="%s"} [%s])) by (%s) > 0`,
		reporter, namespace, duration, strings.Join(kialiGroupBy, ","))
	return fmt.Sprintf("round(%s,0.001)", q)
}

const kialiUnknown = "unknown" // graph.Unknown

// kialiOK is graph.IsOK.
func kialiOK(v string) bool { return v != "" && v != kialiUnknown }

// badServiceMatcher is util.badServiceMatcher: an IP address, maybe with a
// port.
var badServiceMatcher = regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+(:\d+)?$`)

// kialiEdge is what populateTrafficMap and addTraffic make of one series of
// a request query, m its labels as Prometheus stores them (a label whose
// value is empty is not stored): the edge of the workload graph it adds
// to, "source node ID -> destination node ID", or an error saying which of
// Kiali's rules skips it.
func kialiEdge(m map[string]string) (string, error) {
	get := func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok && v != ""
	}
	for _, k := range []string{"source_workload_namespace", "source_workload", "source_canonical_service", "source_canonical_revision",
		"destination_service_namespace", "destination_service", "destination_service_name", "destination_workload_namespace",
		"destination_workload", "destination_canonical_service", "destination_canonical_revision", "response_flags"} {
		if _, ok := get(k); !ok {
			return "", fmt.Errorf("missing expected TS label %s", k)
		}
	}
	sourceNs, sourceWl, sourceApp := m["source_workload_namespace"], m["source_workload"], m["source_canonical_service"]
	destSvcNs, destSvc, destSvcName := m["destination_service_namespace"], m["destination_service"], m["destination_service_name"]
	destWlNs, destWl, destApp := m["destination_workload_namespace"], m["destination_workload"], m["destination_canonical_service"]

	// HandleClusters: a cluster label not given is unknown.
	sourceCluster, sourceClusterOK := get("source_cluster")
	if !sourceClusterOK {
		sourceCluster = kialiUnknown
	}
	destCluster, destClusterOK := get("destination_cluster")
	if !destClusterOK {
		destCluster = kialiUnknown
	}
	// IsBadSourceTelemetry.
	if kialiOK(sourceNs) && !kialiOK(sourceWl) && !kialiOK(sourceApp) {
		return "", fmt.Errorf("bad source telemetry, case 1: namespace %q without workload or canonical service", sourceNs)
	}
	if kialiOK(sourceNs) && sourceClusterOK && !kialiOK(sourceCluster) {
		return "", fmt.Errorf("bad source telemetry, case 2: namespace %q with source_cluster %q", sourceNs, sourceCluster)
	}
	// HandleDestination (the egress gateway case aside): an unknown
	// destination cluster is taken to be the source's (istio/istio#29373).
	if !kialiOK(destCluster) && kialiOK(sourceCluster) && kialiOK(destSvcNs) {
		destCluster = sourceCluster
	}
	// IsBadDestTelemetry.
	if !kialiOK(destWl) && kialiOK(destSvc) && kialiOK(destSvcName) && destSvc == destSvcName && badServiceMatcher.MatchString(destSvcName) {
		return "", fmt.Errorf("bad dest telemetry, case 1: no workload, service %q", destSvc)
	}
	if kialiOK(destSvcNs) && destClusterOK && !kialiOK(destCluster) {
		return "", fmt.Errorf("bad dest telemetry, case 2: service namespace %q with destination_cluster %q", destSvcNs, destCluster)
	}
	for _, k := range []string{"request_protocol", "response_code"} {
		if _, ok := get(k); !ok {
			return "", fmt.Errorf("missing expected HTTP/GRPC TS label %s", k)
		}
	}
	// addTraffic: the source node (no service), then the destination's.
	src, err := kialiNodeID(sourceCluster, sourceNs, "", sourceNs, sourceWl, sourceApp)
	if err != nil {
		return "", err
	}
	dst, err := kialiNodeID(destCluster, destSvcNs, destSvcName, destWlNs, destWl, destApp)
	if err != nil {
		return "", err
	}
	return src + " -> " + dst, nil
}

// kialiNodeID is graph.Id for the workload graph, Kiali's default.
func kialiNodeID(cluster, serviceNs, service, workloadNs, workload, app string) (string, error) {
	namespace := workloadNs
	if !kialiOK(namespace) {
		namespace = serviceNs
	}
	if namespace == kialiUnknown && workload == kialiUnknown && app == kialiUnknown && service == "" {
		return cluster + "_unknown_source", nil
	}
	if workload == kialiUnknown && app == kialiUnknown && service == kialiUnknown {
		return fmt.Sprintf("svc_%s_%s_unknown", cluster, namespace), nil
	}
	if !kialiOK(workload) && !kialiOK(app) && !kialiOK(service) {
		return "", fmt.Errorf("failed ID gen1: cluster=[%s] namespace=[%s] workload=[%s] app=[%s] service=[%s]", cluster, namespace, workload, app, service)
	}
	if !kialiOK(workload) {
		if kialiOK(service) {
			return fmt.Sprintf("svc_%s_%s_%s", cluster, namespace, service), nil
		}
		return fmt.Sprintf("svc_%s_%s_unknown", cluster, namespace), nil
	}
	return fmt.Sprintf("wl_%s_%s_%s", cluster, namespace, workload), nil
}
