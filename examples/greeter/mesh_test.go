package main

// The mesh of the Kiali tests: certificates made at test time, the
// greeter's Listener with a plaintext, a TLS and an mTLS filter chain, and
// callers that differ by the peer metadata they send and by their
// connection: grpc-go clients, some with grpc-go's CSM plugin.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/stats/opentelemetry/csm"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/proxyless-grpc/xds/internal/meshmetrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

const (
	// svcHost is the greeter's Kubernetes service, which clients dial.
	svcHost      = "greeter.default.svc.cluster.local"
	svcAuthority = svcHost + ":50051"
	// greeterID is the SPIFFE ID of the greeter's certificate.
	greeterID = "spiffe://cluster.local/ns/default/sa/greeter"
)

// clientID is the SPIFFE ID of the certificate of the caller named name,
// in the greeter's trust domain (cluster.local).
func clientID(name string) string { return "spiffe://cluster.local/ns/client-ns/sa/" + name }

// meshPKI is the mesh's certificates, made at test time: its CA (trust
// domain cluster.local), the greeter's certificate (the service's DNS name,
// its SPIFFE ID) and the bootstrap's certificate providers that read them.
type meshPKI struct {
	ca        *testcerts.CA
	providers map[string]json.RawMessage
}

func newMeshPKI(t *testing.T) *meshPKI {
	t.Helper()
	ca := testcerts.NewCA(t, "cluster.local root")
	leaf := ca.Issue(t, testcerts.LeafOptions{CommonName: "greeter", DNSNames: []string{svcHost}, URIs: []string{greeterID}})
	files := testcerts.WriteFiles(t, t.TempDir(), leaf, ca.PEM)
	watcher := func(cfg map[string]string) json.RawMessage {
		cfg["refresh_interval"] = "600s"
		b, err := json.Marshal(map[string]any{"plugin_name": "file_watcher", "config": cfg})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return &meshPKI{ca: ca, providers: map[string]json.RawMessage{
		"server-certs": watcher(map[string]string{"certificate_file": files.Cert, "private_key_file": files.Key}),
		"client-roots": watcher(map[string]string{"ca_certificate_file": files.CA}),
	}}
}

// connKind is how a caller connects.
type connKind int

const (
	connPlain        connKind = iota // plaintext
	connTLS                          // TLS, the client presents no certificate
	connMTLS                         // mTLS, the client's certificate has a SPIFFE ID
	connMTLSNoSPIFFE                 // mTLS, the client's certificate has no URI SAN
)

var connKinds = []connKind{connPlain, connTLS, connMTLS, connMTLSNoSPIFFE}

func (c connKind) String() string {
	return [...]string{"plaintext", "TLS", "mTLS+SPIFFE", "mTLS-no-SPIFFE"}[c]
}

// srcIP is the source address the greeter's Listener matches to the
// filter chain of c (meshListener).
func (c connKind) srcIP() string {
	switch c {
	case connMTLS, connMTLSNoSPIFFE:
		return "127.0.0.1"
	case connTLS:
		return "127.0.0.2"
	}
	return "127.0.0.3"
}

// dialOptions returns the options of a client named name connecting as c:
// its credentials (a certificate issued now for mTLS) and its source
// address. Its :authority is the service's.
func (p *meshPKI) dialOptions(t *testing.T, c connKind, name string) []grpc.DialOption {
	t.Helper()
	creds := insecure.NewCredentials()
	switch c {
	case connTLS:
		creds = credentials.NewTLS(&tls.Config{RootCAs: p.ca.Pool})
	case connMTLS, connMTLSNoSPIFFE:
		o := testcerts.LeafOptions{CommonName: name}
		if c == connMTLS {
			o.URIs = []string{clientID(name)}
		}
		leaf := p.ca.Issue(t, o)
		creds = credentials.NewTLS(&tls.Config{RootCAs: p.ca.Pool, Certificates: []tls.Certificate{leaf.TLS}})
	}
	src := net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(c.srcIP()), 0))
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: src}
			return d.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}),
	}
}

// meshListener is the greeter's Listener: one filter chain per kind of
// connection, chosen by the client's source address, each with the
// greeter's routes: mTLS (the client's certificate required and verified
// with the mesh's CA), TLS (no client certificate asked), plaintext.
func meshListener(t *testing.T, port uint32) *listenerpb.Listener {
	t.Helper()
	l := e2e.DefaultServerListener("127.0.0.1", port, "greeter-routes")
	base := l.FilterChains[0]
	l.FilterChains = nil
	server := &tlspb.CertificateProviderPluginInstance{InstanceName: "server-certs"}
	for _, c := range []struct {
		name string
		src  string
		tls  *tlspb.DownstreamTlsContext
	}{
		{"mtls", connMTLS.srcIP(), &tlspb.DownstreamTlsContext{
			CommonTlsContext: &tlspb.CommonTlsContext{
				TlsCertificateProviderInstance: server,
				ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
					CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "client-roots"},
				}},
			},
			RequireClientCertificate: wrapperspb.Bool(true),
		}},
		{"tls", connTLS.srcIP(), &tlspb.DownstreamTlsContext{CommonTlsContext: &tlspb.CommonTlsContext{TlsCertificateProviderInstance: server}}},
		{"plaintext", connPlain.srcIP(), nil},
	} {
		fc := proto.Clone(base).(*listenerpb.FilterChain)
		fc.Name = c.name
		fc.FilterChainMatch = &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{{AddressPrefix: c.src, PrefixLen: wrapperspb.UInt32(32)}}}
		if c.tls != nil {
			a, err := anypb.New(c.tls)
			if err != nil {
				t.Fatal(err)
			}
			fc.TransportSocket = &corepb.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: a}}
		}
		l.FilterChains = append(l.FilterChains, fc)
	}
	return l
}

// headerKind is the peer metadata a caller sends.
type headerKind int

const (
	hdrNone      headerKind = iota // none
	hdrIstio                       // an Envoy sidecar's x-envoy-peer-metadata (sidecarHeader)
	hdrCSMGKE                      // grpc-go's CSM plugin's, on GKE
	hdrCSMOff                      // grpc-go's CSM plugin's, off Google Cloud: its canonical service only
	hdrMalformed                   // not base64
)

var headerKinds = []headerKind{hdrNone, hdrIstio, hdrCSMGKE, hdrCSMOff, hdrMalformed}

func (h headerKind) String() string {
	return [...]string{"no header", "Istio sidecar header", "CSM header on GKE", "CSM header off Google Cloud", "malformed header"}[h]
}

// name is the caller's workload name: its certificate's service account.
func (h headerKind) name() string {
	return [...]string{"bare", "sleep", "csm-gke", "csm-client", "malformed"}[h]
}

// The CSM plugin's environment in the two places (csmCallers).
const (
	csmGKECanonical = "csm-gke"
	csmGKEWorkload  = "csm-gke-wl"
	csmGKECluster   = "gke-1"
	csmOffCanonical = "csm-client"
)

// caller is one client of the greeter.
type caller struct {
	hdr    headerKind
	conn   connKind
	client testgrpc.TestServiceClient
	// header is the x-envoy-peer-metadata value the caller adds to its
	// RPCs; empty for the CSM plugin's clients, whose plugin sends its own.
	header string
	// point, for a CSM plugin's client, gives it the greeter's address.
	point func(*greeterRun)
}

// newCaller returns a caller of g without the CSM plugin: one that sends
// no header, an Envoy sidecar's, or a malformed one.
func newCaller(t *testing.T, pki *meshPKI, g *greeterRun, h headerKind, c connKind) *caller {
	t.Helper()
	cc, err := grpc.NewClient(g.addr.String(), append(pki.dialOptions(t, c, h.name()), grpc.WithAuthority(svcAuthority))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	cl := &caller{hdr: h, conn: c, client: testgrpc.NewTestServiceClient(cc)}
	switch h {
	case hdrIstio:
		cl.header = sidecarHeader(t)
	case hdrMalformed:
		cl.header = "%%% not base64 %%%"
	}
	return cl
}

// call makes one EmptyCall.
func (c *caller) call(ctx context.Context) error {
	if c.header != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, meshmetrics.HeaderMetadata, c.header)
	}
	_, err := c.client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true))
	return err
}

// metadataStandIn keeps grpc-go's CSM plugin, whose GCP resource detector
// asks the metadata server, on loopback (GCE_METADATA_HOST, as
// noMetadataServer does). Off Google Cloud it defines nothing (404, as the
// real one answers an unknown key). With gke set it answers what GKE's
// metadata server answers to the keys the detector reads (project, cluster
// location and name, instance ID), so that the real plugin sends the
// header it sends on GKE. It is a stand-in: a test cannot reach GKE's
// metadata server, and must never reach a real one.
type metadataStandIn struct {
	gke   atomic.Bool
	asked atomic.Int32
}

func startMetadataStandIn(t *testing.T) *metadataStandIn {
	t.Helper()
	m := &metadataStandIn{}
	gke := map[string]string{
		"/computeMetadata/v1/project/project-id":                   "csm-project",
		"/computeMetadata/v1/instance/attributes/cluster-location": "us-east1-b",
		"/computeMetadata/v1/instance/attributes/cluster-name":     csmGKECluster,
		"/computeMetadata/v1/instance/id":                          "4520031799277581759",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.asked.Add(1)
		if v, ok := gke[r.URL.Path]; ok && m.gke.Load() {
			w.Header().Set("Metadata-Flavor", "Google")
			fmt.Fprint(w, v)
			return
		}
		http.NotFound(w, r)
	}))
	t.Setenv("GCE_METADATA_HOST", srv.Listener.Addr().String())
	t.Cleanup(func() {
		srv.Close()
		if m.asked.Load() == 0 {
			t.Error("the GCP detector never asked the loopback metadata server: where did it look?")
		}
	})
	return m
}

// csmCallers returns, for each of n greeters, a caller per connection kind
// with grpc-go's CSM plugin enabled as a CSM program enables it
// (csm.EnableObservability), on GKE (gke) or off Google Cloud. Their
// targets have the xds scheme, which is what makes the plugin send its
// header; a manual resolver under that scheme gives each its greeter's
// address. The plugin's global options are removed once the clients exist:
// call this before any server is created (gRPC's global options are not
// synchronized), and for one place at a time.
func csmCallers(ctx context.Context, t *testing.T, pki *meshPKI, md *metadataStandIn, gke bool, n int) [][]*caller {
	t.Helper()
	h := hdrCSMOff
	t.Setenv("CSM_CANONICAL_SERVICE_NAME", csmOffCanonical)
	t.Setenv("CSM_WORKLOAD_NAME", "csm-client-wl")
	t.Setenv("CSM_MESH_ID", "mesh-1")
	// The detector takes a host for Kubernetes when this is set, and then
	// for GKE when the metadata server has the cluster's location.
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	md.gke.Store(gke)
	if gke {
		h = hdrCSMGKE
		t.Setenv("CSM_CANONICAL_SERVICE_NAME", csmGKECanonical)
		t.Setenv("CSM_WORKLOAD_NAME", csmGKEWorkload)
		// How a CSM deployment names its namespace to the plugin.
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.namespace.name=client-ns")
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	detect, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cleanup := csm.EnableObservability(detect, opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp}})
	defer cleanup()
	out := make([][]*caller, n)
	for i := range out {
		for _, c := range connKinds {
			r := manual.NewBuilderWithScheme("xds")
			cc, err := grpc.NewClient("xds:///"+svcAuthority, append(pki.dialOptions(t, c, h.name()), grpc.WithResolvers(r))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			out[i] = append(out[i], &caller{hdr: h, conn: c, client: testgrpc.NewTestServiceClient(cc), point: func(g *greeterRun) {
				r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: g.addr.String()}}})
			}})
		}
	}
	return out
}

// promLabels returns the labels of a series as Prometheus stores them: a
// label with an empty value is not stored.
func promLabels(l map[string]string) map[string]string {
	out := maps.Clone(l)
	maps.DeleteFunc(out, func(_, v string) bool { return v == "" })
	return out
}

// seriesKey is a series' labels in a canonical text form.
func seriesKey(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q,", k, l[k])
	}
	return b.String()
}

// requestCounts scrapes the greeter's istio_requests_total: each series'
// count by its key, and its labels as Prometheus stores them. It parses
// that family only, with Prometheus' parser: the whole page costs several
// times more under the race detector.
func (g *greeterRun) requestCounts(ctx context.Context, t *testing.T) (map[string]float64, map[string]map[string]string) {
	t.Helper()
	var family strings.Builder
	for _, line := range strings.SplitAfter(httpGet(ctx, t, g.adminHTTP+"/metrics"), "\n") {
		if strings.HasPrefix(line, "istio_requests_total{") || strings.HasPrefix(line, "# HELP istio_requests_total ") ||
			strings.HasPrefix(line, "# TYPE istio_requests_total ") {
			family.WriteString(line)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(family.String()))
	if err != nil {
		t.Fatalf("parsing istio_requests_total: %v\n%s", err, family.String())
	}
	counts := map[string]float64{}
	labels := map[string]map[string]string{}
	for _, m := range families["istio_requests_total"].GetMetric() {
		l := promLabels(labelsOf(m))
		k := seriesKey(l)
		counts[k] = m.GetCounter().GetValue()
		labels[k] = l
	}
	return counts, labels
}

// seriesOf runs rpc, which makes one RPC, and returns the labels of the
// one istio_requests_total series it added to, and the counts after it.
// before is the counts before it (nil: scraped now).
func (g *greeterRun) seriesOf(ctx context.Context, t *testing.T, before map[string]float64, rpc func() error) (map[string]string, map[string]float64) {
	t.Helper()
	if before == nil {
		before, _ = g.requestCounts(ctx, t)
	}
	if err := rpc(); err != nil {
		t.Fatalf("RPC: %v", err)
	}
	var got map[string]string
	var counts map[string]float64
	// The server records an RPC as it ends, which may be after the client
	// has its answer.
	testutils.WaitFor(ctx, t, "the RPC's istio_requests_total series", func() error {
		after, labels := g.requestCounts(ctx, t)
		var changed []string
		for k, n := range after {
			if n != before[k] {
				changed = append(changed, k)
			}
		}
		sort.Strings(changed)
		if len(changed) != 1 || after[changed[0]] != before[changed[0]]+1 {
			return fmt.Errorf("series changed: %q", changed)
		}
		got, counts = labels[changed[0]], after
		return nil
	})
	return got, counts
}
