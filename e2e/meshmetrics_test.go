package e2e_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/meshmetrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// pilotAgentMetadata is the node metadata istio-agent writes into the
// bootstrap of a proxyless gRPC pod (pkg/istio-agent/grpcxds).
var pilotAgentMetadata = map[string]any{
	"NAME": "greeter-7f9c-abcde", "NAMESPACE": "server-ns", "WORKLOAD_NAME": "greeter", "CLUSTER_ID": "Kubernetes",
	"SERVICE_ACCOUNT": "greeter", "MESH_ID": "cluster.local", "GENERATOR": "grpc", "ISTIO_VERSION": "1.28.0",
	"OWNER":        "kubernetes://apis/apps/v1/namespaces/server-ns/deployments/greeter",
	"INSTANCE_IPS": "10.0.0.7",
	"LABELS": map[string]any{"app": "greeter", "version": "v2",
		"service.istio.io/canonical-name": "greeter", "service.istio.io/canonical-revision": "v2"},
}

// envoyPeerHeader builds x-envoy-peer-metadata as an Envoy sidecar client
// sends it (istio/proxy metadata exchange): padded base64 of a
// deterministically serialized Struct with Istio's keys.
func envoyPeerHeader(t *testing.T) string {
	return testutils.PeerMetadata(t, map[string]any{
		"NAME": "sleep-5d8c-xyz", "NAMESPACE": "client-ns", "WORKLOAD_NAME": "sleep", "CLUSTER_ID": "Kubernetes",
		"IDENTITY": "spiffe://a.test/ns/client-ns/sa/sleep", "OWNER": "kubernetes://apis/apps/v1/namespaces/client-ns/deployments/sleep",
		"REGION": "r1", "AVAILABILITY_ZONE": "z1",
		"LABELS": map[string]any{"app": "sleep", "version": "v1", "service.istio.io/canonical-name": "sleep",
			"service.istio.io/canonical-revision": "v1"},
	}, true)
}

// wireBytes is a client's stats handler that counts the bytes of the
// messages it sends and receives on the wire (gRPC's WireLength: encoded,
// with the 5-byte prefix).
type wireBytes struct {
	sent, received atomic.Int64
}

func (w *wireBytes) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (w *wireBytes) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.OutPayload:
		w.sent.Add(int64(s.WireLength))
	case *stats.InPayload:
		w.received.Add(int64(s.WireLength))
	}
}
func (w *wireBytes) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w *wireBytes) HandleConn(context.Context, stats.ConnStats)                       {}

func labels(kv map[string]string) []attribute.KeyValue {
	var out []attribute.KeyValue
	for k, v := range kv {
		out = append(out, attribute.String(k, v))
	}
	return out
}

// TestMeshMetrics: Istio's standard metrics of a proxyless server, with the
// labels Envoy's istio_stats gives an inbound request: the server's side
// from the bootstrap's node metadata and its certificate, the client's from
// the header an Envoy sidecar sends or else its certificate; the reply
// header only to requests that carried one; a malformed header costs no
// RPC.
func TestMeshMetrics(t *testing.T) {
	ctx := testContext(t)
	pki := newSPIFFEPKI(t)
	// The server's certificate names the service, which TLS clients dial
	// (their :authority).
	const svcHost = "greeter.server-ns.svc.cluster.local"
	pki.server = pki.serverCA.Issue(t, testcerts.LeafOptions{CommonName: "server", DNSNames: []string{svcHost},
		URIs: []string{"spiffe://a.test/server"}, NotAfter: time.Now().Add(time.Hour)})
	testcerts.WriteFiles(t, filepath.Dir(pki.serverFiles.Cert), pki.server, nil)
	tlsCreds := func(leaf *testcerts.Leaf) grpc.DialOption {
		cfg := &tls.Config{RootCAs: pki.serverCA.Pool, ServerName: svcHost}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf.TLS, nil }
		return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
	}
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	nodeID := "sidecar~10.0.0.7~greeter-7f9c-abcde.server-ns~server-ns.svc.cluster.local"
	env := &testEnv{ms: ms, nodeID: nodeID, bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs: []string{ms.Address}, NodeID: nodeID, NodeMetadata: pilotAgentMetadata,
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		CertificateProviders:               pki.providers(time.Hour),
	})}
	mr := testutils.NewMetricReader(t)
	lis, _ := listen(t, "127.0.0.1")
	_, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return identityListener(t, a, tlsChain{name: "mtls", src: "127.0.0.1", tls: mtlsWith(instSPIFFE, true)}, tlsChain{name: "plain", src: "127.0.0.2"})
	}, xds.MeterProvider(mr.Provider), xds.MeshMetrics())

	const authority = "greeter.server-ns.svc.cluster.local:50051"
	server := map[string]string{
		"reporter": "destination", "request_protocol": "grpc", "response_flags": "-", "response_code": "200",
		"destination_workload": "greeter", "destination_workload_namespace": "server-ns", "destination_app": "greeter",
		"destination_version": "v2", "destination_canonical_service": "greeter", "destination_canonical_revision": "v2",
		"destination_cluster": "Kubernetes", "destination_service": "greeter.server-ns.svc.cluster.local",
		"destination_service_name": "greeter", "destination_service_namespace": "server-ns",
	}
	with := func(m map[string]string, more map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	sidecarSource := map[string]string{"source_workload": "sleep", "source_workload_namespace": "client-ns", "source_app": "sleep",
		"source_version": "v1", "source_canonical_service": "sleep", "source_canonical_revision": "v1", "source_cluster": "Kubernetes"}
	unknownSource := map[string]string{"source_workload": "unknown", "source_workload_namespace": "unknown", "source_app": "unknown",
		"source_version": "unknown", "source_canonical_service": "unknown", "source_canonical_revision": "latest", "source_cluster": "unknown"}

	// 1. mTLS, with the header an Envoy sidecar sends: a unary RPC, a
	// stream of three messages each way, and one the client cancels.
	const clientID = "spiffe://a.test/ns/client-ns/sa/sleep"
	sidecar := newClient(t, addr, "127.0.0.1", 0, tlsCreds(pki.client(t, "a.test", clientID)))
	hctx := metadata.AppendToOutgoingContext(ctx, meshmetrics.HeaderMetadata, envoyPeerHeader(t), meshmetrics.HeaderMetadataID, "sidecar~10.0.0.9~sleep.client-ns~client-ns.svc.cluster.local")
	var hdr metadata.MD
	if _, err := sidecar.EmptyCall(hctx, &testpb.Empty{}, grpc.Header(&hdr)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	reply := hdr.Get(meshmetrics.HeaderMetadata)
	if len(reply) != 1 {
		t.Fatalf("reply has %d %s values, want 1: %v", len(reply), meshmetrics.HeaderMetadata, hdr)
	}
	if w, ok := meshmetrics.DecodePeer(reply[0]); !ok || w.Name != "greeter" || w.Namespace != "server-ns" || w.CanonicalService != "greeter" {
		t.Errorf("reply decodes as %+v, %v; want the server's workload", w, ok)
	}
	if id := hdr.Get(meshmetrics.HeaderMetadataID); len(id) != 1 || id[0] != nodeID {
		t.Errorf("reply %s = %q, want [%q]", meshmetrics.HeaderMetadataID, id, nodeID)
	}
	// A stream the client cancels: status CANCELLED (1).
	cctx, cancel := context.WithCancel(hctx)
	st := sidecar.startStream(cctx, t)
	cancel()
	if _, err := st.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled stream ended with %v", err)
	}
	st = sidecar.startStream(hctx, t)
	st.pingPong(t)
	st.pingPong(t)
	st.finish(t)

	mtls := with(with(server, sidecarSource), map[string]string{"source_principal": clientID,
		"destination_principal": "spiffe://a.test/server", "connection_security_policy": "mutual_tls"})
	mr.WaitForValue(ctx, t, meshmetrics.RequestsTotal, 2, labels(with(mtls, map[string]string{"grpc_response_status": "0"}))...)
	mr.WaitForValue(ctx, t, meshmetrics.RequestsTotal, 1, labels(with(mtls, map[string]string{"grpc_response_status": "1"}))...)
	mr.WaitForValue(ctx, t, meshmetrics.RequestMessagesTotal, 4, labels(with(mtls, map[string]string{"grpc_response_status": "0"}))...)
	mr.WaitForValue(ctx, t, meshmetrics.ResponseMessagesTotal, 4, labels(with(mtls, map[string]string{"grpc_response_status": "0"}))...)
	for _, p := range mr.Points(t, meshmetrics.RequestsTotal) {
		if len(p.Attrs) != 25 {
			t.Errorf("a series with %d labels, want Istio's 25: %v", len(p.Attrs), p.Attrs)
		}
	}

	// 2. mTLS, no header: the certificate's principal; the namespace is not
	// given alone (Kiali would drop the series); no reply. The request and
	// response bytes are those on the wire, as grpc-go's client counts
	// them (every message with its 5-byte prefix).
	wire := &wireBytes{}
	bare := newClient(t, addr, "127.0.0.1", 0, tlsCreds(pki.client(t, "a.test", "spiffe://a.test/ns/other-ns/sa/bare")), grpc.WithStatsHandler(wire))
	hdr = nil
	if _, err := bare.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&hdr)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	if v := hdr.Get(meshmetrics.HeaderMetadata); len(v) != 0 {
		t.Errorf("a request without the header got a reply: %q", v)
	}
	if _, err := bare.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 1000)}}); err != nil {
		t.Fatalf("UnaryCall: %v", err)
	}
	bareLabels := labels(with(with(server, unknownSource), map[string]string{
		"source_principal": "spiffe://a.test/ns/other-ns/sa/bare", "connection_security_policy": "mutual_tls", "grpc_response_status": "0"}))
	mr.WaitForValue(ctx, t, meshmetrics.RequestsTotal, 2, bareLabels...)
	if sent := wire.sent.Load(); sent < 1000 {
		t.Errorf("the client sent %d bytes, want more than the payload's 1000", sent)
	}
	mr.WaitForValue(ctx, t, meshmetrics.RequestBytes, wire.sent.Load(), bareLabels...)
	mr.WaitForValue(ctx, t, meshmetrics.ResponseBytes, wire.received.Load(), bareLabels...)

	// 3. Plaintext, a malformed header: the RPC succeeds, the source is
	// unknown, the policy none.
	plain := newClient(t, addr, "127.0.0.2", 0, grpc.WithAuthority(authority))
	bad := metadata.AppendToOutgoingContext(ctx, meshmetrics.HeaderMetadata, "%%% not base64 %%%")
	if _, err := plain.EmptyCall(bad, &testpb.Empty{}); err != nil {
		t.Fatalf("EmptyCall with a malformed header: %v", err)
	}
	mr.WaitForValue(ctx, t, meshmetrics.RequestsTotal, 1, labels(with(with(server, unknownSource), map[string]string{
		"source_principal": "unknown", "destination_principal": "unknown", "connection_security_policy": "none", "grpc_response_status": "0"}))...)
}

// Without MeshMetrics, no Istio metric and no reply.
func TestMeshMetricsOff(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	mr := testutils.NewMetricReader(t)
	s := env.newServer(t, xds.MeterProvider(mr.Provider))
	lis, _ := listen(t, "127.0.0.1")
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	s.serveOn(lis)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	var hdr metadata.MD
	hctx := metadata.AppendToOutgoingContext(ctx, meshmetrics.HeaderMetadata, envoyPeerHeader(t))
	if _, err := c.EmptyCall(hctx, &testpb.Empty{}, grpc.WaitForReady(true), grpc.Header(&hdr)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	if v := hdr.Get(meshmetrics.HeaderMetadata); len(v) != 0 {
		t.Errorf("reply %q without MeshMetrics", v)
	}
	if p := mr.Points(t, meshmetrics.RequestsTotal); len(p) != 0 {
		t.Errorf("%s recorded without MeshMetrics: %v", meshmetrics.RequestsTotal, p)
	}
}

// TestMeshMetricsRefusedInTap: an RPC the filter chain refuses in gRPC's
// tap handle (here RBAC's PERMISSION_DENIED), which gRPC never reports to
// a stats handler, is counted with its status, as a sidecar counts the
// requests its filters refuse; the allowed one is counted apart.
func TestMeshMetricsRefusedInTap(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	nodeID := "sidecar~10.0.0.7~greeter-7f9c-abcde.server-ns~server-ns.svc.cluster.local"
	env := &testEnv{ms: ms, nodeID: nodeID, bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs: []string{ms.Address}, NodeID: nodeID, NodeMetadata: pilotAgentMetadata,
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
	})}
	mr := testutils.NewMetricReader(t)
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return rbacListener(t, a, allowMethods(methodEmpty), allRoutes("routes"), "")
	}, nil, xds.MeterProvider(mr.Provider), xds.MeshMetrics())
	c := connected(ctx, t, addr)
	hctx := metadata.AppendToOutgoingContext(ctx, meshmetrics.HeaderMetadata, envoyPeerHeader(t))
	if got := c.unaryCall(hctx); got != codes.PermissionDenied {
		t.Fatalf("UnaryCall: %v, want PERMISSION_DENIED (RBAC)", got)
	}
	if got := c.emptyCall(hctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK", got)
	}
	src := map[string]string{"reporter": "destination", "source_workload": "sleep", "source_workload_namespace": "client-ns",
		"destination_workload": "greeter", "response_code": "200"}
	for code, want := range map[string]int64{"7": 1, "0": 1} {
		kv := map[string]string{"grpc_response_status": code}
		for k, v := range src {
			kv[k] = v
		}
		mr.WaitForValue(ctx, t, meshmetrics.RequestsTotal, want, labels(kv)...)
	}
}

// TestMeshMetricsRefusedAfterTap: an RPC the chain's filters refuse on the
// RPC's goroutine, after the tap (here a fault filter's abort after its
// delay), is counted with its status, once.
func TestMeshMetricsRefusedAfterTap(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	mr := testutils.NewMetricReader(t)
	fault := &faultpb.HTTPFault{Delay: fixedDelay(time.Millisecond, 100), Abort: grpcAbort(codes.Aborted, 100)}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{httpFilter(t, "fault", fault)}, allRoutes("routes"), "")
	}, nil, xds.MeterProvider(mr.Provider), xds.MeshMetrics())
	c := connected(ctx, t, addr)
	if got := c.emptyCall(ctx); got != codes.Aborted {
		t.Fatalf("EmptyCall: %v, want ABORTED (the fault filter)", got)
	}
	mr.WaitForValue(ctx, t, meshmetrics.RequestsTotal, 1, attribute.String("grpc_response_status", "10"))
	if n, _ := mr.Value(t, meshmetrics.RequestsTotal); n != 1 {
		t.Errorf("%s = %d, want the one RPC", meshmetrics.RequestsTotal, n)
	}
}

// TestMeshMetricsUnregisteredMethod: an RPC for a method no registered
// service has, which gRPC answers UNIMPLEMENTED after the tap without
// running an interceptor, is counted once with code 12; with a
// grpc.UnknownServiceHandler, which serves such RPCs through the
// interceptors, once with the handler's status.
func TestMeshMetricsUnregisteredMethod(t *testing.T) {
	const unknownMethod = "/grpc.testing.UnimplementedService/UnimplementedCall"
	for _, c := range []struct {
		name     string
		opts     []grpc.ServerOption
		wantCode codes.Code
	}{
		{name: "gRPC refuses it", wantCode: codes.Unimplemented},
		{name: "an unknown service handler serves it", opts: []grpc.ServerOption{grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			return status.Error(codes.NotFound, "served by the unknown service handler")
		})}, wantCode: codes.NotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testContext(t)
			env := newTestEnv(t)
			mr := testutils.NewMetricReader(t)
			opts := []grpc.ServerOption{xds.MeterProvider(mr.Provider), xds.MeshMetrics()}
			_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener { return simpleListener(a) }, nil, append(opts, c.opts...)...)
			cl := connected(ctx, t, addr)
			err := cl.Invoke(ctx, unknownMethod, &testpb.Empty{}, &testpb.Empty{})
			if status.Code(err) != c.wantCode {
				t.Fatalf("%s: %v, want %v", unknownMethod, err, c.wantCode)
			}
			if got := cl.emptyCall(ctx); got != codes.OK {
				t.Fatalf("EmptyCall: %v", got)
			}
			code := fmt.Sprint(uint32(c.wantCode))
			mr.WaitForValue(ctx, t, meshmetrics.RequestsTotal, 1, attribute.String("grpc_response_status", code))
			mr.WaitForValue(ctx, t, meshmetrics.RequestsTotal, 1, attribute.String("grpc_response_status", "0"))
			if n, _ := mr.Value(t, meshmetrics.RequestsTotal); n != 2 {
				t.Errorf("%s = %d, want 2 (one RPC of each)", meshmetrics.RequestsTotal, n)
			}
		})
	}
}
