package meshmetrics

import (
	"crypto/x509"
	"encoding/base64"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Unknown is Istio's value for a label it cannot tell.
const Unknown = "unknown"

// The 25 labels of Istio's standard metrics.
const (
	LabelReporter                     = "reporter"
	LabelSourceWorkload               = "source_workload"
	LabelSourceWorkloadNamespace      = "source_workload_namespace"
	LabelSourcePrincipal              = "source_principal"
	LabelSourceApp                    = "source_app"
	LabelSourceVersion                = "source_version"
	LabelSourceCanonicalService       = "source_canonical_service"
	LabelSourceCanonicalRevision      = "source_canonical_revision"
	LabelSourceCluster                = "source_cluster"
	LabelDestinationWorkload          = "destination_workload"
	LabelDestinationWorkloadNamespace = "destination_workload_namespace"
	LabelDestinationPrincipal         = "destination_principal"
	LabelDestinationApp               = "destination_app"
	LabelDestinationVersion           = "destination_version"
	LabelDestinationService           = "destination_service"
	LabelDestinationServiceName       = "destination_service_name"
	LabelDestinationServiceNamespace  = "destination_service_namespace"
	LabelDestinationCanonicalService  = "destination_canonical_service"
	LabelDestinationCanonicalRevision = "destination_canonical_revision"
	LabelDestinationCluster           = "destination_cluster"
	LabelRequestProtocol              = "request_protocol"
	LabelResponseFlags                = "response_flags"
	LabelConnectionSecurityPolicy     = "connection_security_policy"
	LabelResponseCode                 = "response_code"
	LabelGRPCResponseStatus           = "grpc_response_status"
)

// The pod labels Istio reads for a workload's app, version and canonical
// service and revision.
const (
	labelCanonicalName     = "service.istio.io/canonical-name"
	labelCanonicalRevision = "service.istio.io/canonical-revision"
	labelK8sName           = "app.kubernetes.io/name"
	labelK8sVersion        = "app.kubernetes.io/version"
	labelApp               = "app"
	labelVersion           = "version"
)

// Peer metadata header names (Istio's HTTP metadata exchange).
const (
	HeaderMetadata   = "x-envoy-peer-metadata"
	HeaderMetadataID = "x-envoy-peer-metadata-id"
)

// maxHeader bounds the peer metadata header this package decodes; a larger
// one is ignored (its labels are unknown). Envoy's own are well under 2 KiB.
const maxHeader = 8 << 10

// Workload is what the metrics say about one side of an RPC. Every field
// is Unknown when it cannot be told, except CanonicalRevision ("latest")
// and, on the source side, a Cluster that Kiali must not see as unknown
// (Absent; see source).
type Workload struct {
	Name, Namespace, App, Version, CanonicalService, CanonicalRevision, Cluster string
}

func unknownWorkload() Workload {
	return Workload{Name: Unknown, Namespace: Unknown, App: Unknown, Version: Unknown,
		CanonicalService: Unknown, CanonicalRevision: "latest", Cluster: Unknown}
}

// Local is the server's own side: its workload (from the bootstrap's node
// metadata), its node ID, and the metadata exchange reply built from them.
type Local struct {
	Workload Workload
	NodeID   string
	// reply is the header value the server answers with: padded base64 of
	// a deterministically serialized Struct carrying both Istio's keys and
	// grpc-go CSM plugin's.
	reply string
}

// NewLocal reads the node metadata pilot-agent writes into a proxyless
// gRPC bootstrap (NAMESPACE, WORKLOAD_NAME, CLUSTER_ID, LABELS, ...).
// A nil md gives a workload that is all unknown.
func NewLocal(nodeID string, md *structpb.Struct) *Local {
	f := md.GetFields()
	str := func(k string) string {
		if v, ok := f[k]; ok {
			if s, ok := v.GetKind().(*structpb.Value_StringValue); ok && s.StringValue != "" {
				return s.StringValue
			}
		}
		return ""
	}
	labels := podLabels(f)
	w := workloadOf(str("WORKLOAD_NAME"), str("NAMESPACE"), str("CLUSTER_ID"), labels)
	l := &Local{Workload: w, NodeID: nodeID}

	// The reply: Istio's keys as pilot-agent has them, then the CSM
	// plugin's. Keys either parser does not know are ignored by it.
	fields := map[string]*structpb.Value{}
	for _, k := range []string{"NAME", "NAMESPACE", "WORKLOAD_NAME", "CLUSTER_ID", "OWNER", "SERVICE_ACCOUNT", "MESH_ID"} {
		if s := str(k); s != "" {
			fields[k] = structpb.NewStringValue(s)
		}
	}
	if len(labels) > 0 {
		ls := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range labels {
			ls.Fields[k] = structpb.NewStringValue(v)
		}
		fields["LABELS"] = structpb.NewStructValue(ls)
	}
	csmType := Unknown
	if w.Namespace != Unknown {
		// A Kubernetes workload: the CSM type that carries names and
		// namespaces. (Location and project are not known here.)
		csmType = "gcp_kubernetes_engine"
	}
	for k, v := range map[string]string{
		"type":              csmType,
		"canonical_service": w.CanonicalService,
		"workload_name":     w.Name,
		"namespace_name":    w.Namespace,
		"cluster_name":      w.Cluster,
		"location":          Unknown,
		"project_id":        Unknown,
	} {
		fields[k] = structpb.NewStringValue(v)
	}
	// Envoy writes and reads padded base64, the CSM plugin unpadded only
	// (it refuses '='): a serialized Struct whose length is a multiple of 3
	// encodes the same either way, so a filler key that neither parser
	// reads makes it one.
	for n := 0; n < 4; n++ {
		if n > 0 {
			fields[padKey] = structpb.NewStringValue(strings.Repeat("0", n))
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&structpb.Struct{Fields: fields})
		if err != nil {
			return l
		}
		if len(b)%3 == 0 {
			l.reply = base64.StdEncoding.EncodeToString(b)
			return l
		}
	}
	return l // cannot happen: one of 4 consecutive lengths is a multiple of 3
}

// padKey is the filler key of the reply (NewLocal).
const padKey = "x-pad"

// Reply returns the value of the server's x-envoy-peer-metadata answer.
func (l *Local) Reply() string { return l.reply }

// podLabels returns the string values of the LABELS struct of Istio's
// node metadata keys f (the pod's labels).
func podLabels(f map[string]*structpb.Value) map[string]string {
	labels := map[string]string{}
	for k, v := range f["LABELS"].GetStructValue().GetFields() {
		if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
			labels[k] = s.StringValue
		}
	}
	return labels
}

// workloadOf applies Istio's rules for app, version and canonical service
// and revision to a workload's labels.
func workloadOf(name, namespace, cluster string, labels map[string]string) Workload {
	w := unknownWorkload()
	set := func(dst *string, vals ...string) {
		for _, v := range vals {
			if v != "" {
				*dst = v
				return
			}
		}
	}
	set(&w.Name, name)
	set(&w.Namespace, namespace)
	set(&w.Cluster, cluster)
	set(&w.App, labels[labelK8sName], labels[labelApp])
	set(&w.Version, labels[labelK8sVersion], labels[labelVersion])
	set(&w.CanonicalService, labels[labelCanonicalName], labels[labelK8sName], labels[labelApp], name)
	set(&w.CanonicalRevision, labels[labelCanonicalRevision], labels[labelK8sVersion], labels[labelVersion])
	return w
}

// DecodePeer decodes an x-envoy-peer-metadata value, in either dialect:
// Istio's keys (as an Envoy sidecar sends them) or grpc-go CSM plugin's;
// base64 padded or not. ok is false for a value too large or malformed,
// or one that carries neither dialect's keys.
func DecodePeer(v string) (w Workload, ok bool) {
	w = unknownWorkload()
	if len(v) == 0 || len(v) > maxHeader {
		return w, false
	}
	raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(v, "="))
	if err != nil {
		return w, false
	}
	var s structpb.Struct
	if err := proto.Unmarshal(raw, &s); err != nil {
		return w, false
	}
	f := s.GetFields()
	str := func(k string) string {
		if v, ok := f[k]; ok {
			if s, ok := v.GetKind().(*structpb.Value_StringValue); ok && s.StringValue != Unknown {
				return s.StringValue
			}
		}
		return ""
	}
	if _, istio := f["NAMESPACE"]; istio || f["WORKLOAD_NAME"] != nil || f["LABELS"] != nil {
		return workloadOf(str("WORKLOAD_NAME"), str("NAMESPACE"), str("CLUSTER_ID"), podLabels(f)), true
	}
	if f["type"] != nil || f["canonical_service"] != nil {
		// grpc-go's CSM plugin: no app or version labels.
		cs := str("canonical_service")
		w := workloadOf(str("workload_name"), str("namespace_name"), str("cluster_name"), nil)
		if cs != "" {
			w.CanonicalService = cs
		}
		return w, true
	}
	return w, false
}

// SpiffeID returns the first spiffe:// URI SAN of cert, its namespace (the
// path's "ns" segment, Istio's form spiffe://td/ns/NS/sa/SA), or "", "".
func SpiffeID(cert *x509.Certificate) (id, namespace string) {
	if u := spiffeURI(cert); u != nil {
		return spiffeIDOf(u)
	}
	return "", ""
}

// spiffeURI returns the first spiffe:// URI SAN of cert; nil if none.
func spiffeURI(cert *x509.Certificate) *url.URL {
	if cert == nil {
		return nil
	}
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			return u
		}
	}
	return nil
}

// spiffeIDOf returns the SPIFFE ID u and the namespace it names (the
// segment after "ns"), if any.
func spiffeIDOf(u *url.URL) (id, namespace string) {
	id = u.String()
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	for i := 0; i+1 < len(segs); i += 2 {
		if segs[i] == "ns" {
			return id, segs[i+1]
		}
	}
	return id, ""
}

// principal is the value of a principal label: the SPIFFE ID, as Istio
// shows it, or Unknown.
func principal(id string) string {
	if id == "" {
		return Unknown
	}
	return id
}

// Absent is the value of a cluster label that Kiali must read as not given:
// an empty label, which Prometheus does not store. Envoy's istio_stats writes
// destination_cluster so when the node metadata has no CLUSTER_ID; Kiali
// reads a missing cluster as unknown (HandleClusters), while it drops a
// series whose namespace is known and whose cluster label is present but
// "unknown" (IsBadSourceTelemetry and IsBadDestTelemetry, case 2, kiali
// graph/telemetry/istio/util).
const Absent = ""

// source is the client's side of one connection and header, as Envoy's
// istio_stats writes it on the inbound side, except where Kiali would drop
// the series:
//
//   - workload, app, version, canonical service and revision, and cluster
//     from the peer metadata header when it is valid (Istio's or the CSM
//     plugin's keys);
//   - the namespace from the client certificate's SPIFFE ID (peerNS), else
//     from the header: Envoy's order, the certificate being authenticated;
//   - Kiali's case 1 (a known namespace, neither workload nor canonical
//     service): the namespace is unknown too, so the source is shown as
//     unknown instead of being lost;
//   - Kiali's case 2 (a known namespace, the cluster unknown): the
//     server's own cluster when the client's SPIFFE ID is in the server's
//     own trust domain (peerTD == localTD: the same mesh), which is the
//     assumption Kiali makes itself for an unknown destination cluster
//     (HandleDestination, istio/istio#29373); else Absent.
func source(peerHeader, peerTD, peerNS string, local Workload, localTD string) Workload {
	w, ok := DecodePeer(peerHeader)
	if !ok {
		w = unknownWorkload()
	}
	if peerNS != "" {
		w.Namespace = peerNS
	}
	if w.Name == Unknown && w.CanonicalService == Unknown {
		w.Namespace = Unknown
	}
	if w.Namespace != Unknown && w.Cluster == Unknown {
		w.Cluster = Absent
		if peerTD != "" && peerTD == localTD && local.Cluster != Unknown {
			w.Cluster = local.Cluster
		}
	}
	return w
}

// serviceOf splits the RPC's :authority into Istio's destination_service,
// _service_name and _service_namespace: the host without its port; for a
// Kubernetes service host (name.namespace.svc...), its name and namespace;
// otherwise the host and the server's own namespace.
func serviceOf(authority, ownNamespace string) (svc, name, namespace string) {
	host := authority
	if h, _, err := net.SplitHostPort(authority); err == nil {
		host = h
	}
	if host == "" {
		return Unknown, Unknown, ownNamespace
	}
	parts := strings.SplitN(host, ".", 4)
	if len(parts) >= 3 && parts[2] == "svc" {
		return host, parts[0], parts[1]
	}
	if _, err := netip.ParseAddr(host); len(parts) == 2 && err != nil {
		return host, parts[0], parts[1]
	}
	return host, host, ownNamespace
}

// baseAttrs returns the labels of an RPC but its codes, in a fixed order.
func baseAttrs(local *Local, localPrincipal string, src Workload, srcPrincipal string, mtls bool, authority string) []attribute.KeyValue {
	d := local.Workload
	svc, svcName, svcNS := serviceOf(authority, d.Namespace)
	policy := "none"
	if mtls {
		policy = "mutual_tls"
	}
	return []attribute.KeyValue{
		attribute.String(LabelReporter, "destination"),
		attribute.String(LabelSourceWorkload, src.Name),
		attribute.String(LabelSourceWorkloadNamespace, src.Namespace),
		attribute.String(LabelSourcePrincipal, principal(srcPrincipal)),
		attribute.String(LabelSourceApp, src.App),
		attribute.String(LabelSourceVersion, src.Version),
		attribute.String(LabelSourceCanonicalService, src.CanonicalService),
		attribute.String(LabelSourceCanonicalRevision, src.CanonicalRevision),
		attribute.String(LabelSourceCluster, src.Cluster),
		attribute.String(LabelDestinationWorkload, d.Name),
		attribute.String(LabelDestinationWorkloadNamespace, d.Namespace),
		attribute.String(LabelDestinationPrincipal, principal(localPrincipal)),
		attribute.String(LabelDestinationApp, d.App),
		attribute.String(LabelDestinationVersion, d.Version),
		attribute.String(LabelDestinationService, svc),
		attribute.String(LabelDestinationServiceName, svcName),
		attribute.String(LabelDestinationServiceNamespace, svcNS),
		attribute.String(LabelDestinationCanonicalService, d.CanonicalService),
		attribute.String(LabelDestinationCanonicalRevision, d.CanonicalRevision),
		attribute.String(LabelDestinationCluster, destinationCluster(d.Cluster)),
		attribute.String(LabelRequestProtocol, "grpc"),
		attribute.String(LabelResponseFlags, "-"),
		attribute.String(LabelConnectionSecurityPolicy, policy),
	}
}

// destinationCluster is the destination_cluster of a server in cluster: the
// node metadata's CLUSTER_ID, else Absent, as Envoy's istio_stats writes it.
// (Present but "unknown", Kiali would drop the series when the service's
// namespace is known and the source's cluster is not.)
func destinationCluster(cluster string) string {
	if cluster == Unknown {
		return Absent
	}
	return cluster
}

// withCodes completes base with an RPC's response codes: HTTP 200 (a gRPC
// response) and the numeric gRPC status.
func withCodes(base []attribute.KeyValue, grpcCode uint32) attribute.Set {
	kvs := make([]attribute.KeyValue, len(base), len(base)+2)
	copy(kvs, base)
	kvs = append(kvs, attribute.String(LabelResponseCode, "200"),
		attribute.String(LabelGRPCResponseStatus, strconv.FormatUint(uint64(grpcCode), 10)))
	return attribute.NewSet(kvs...)
}
