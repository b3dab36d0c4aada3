package istio

import (
	"context"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/admin"
	"github.com/proxyless-grpc/xds/csds"
)

// adminPort is what a proxyless pod would run on a port of its own for
// operators and the kubelet: a plain grpc.Server with the health service
// and CSDS, and an HTTP server with the status page.
type adminPort struct {
	hs     *health.Server
	cc     *grpc.ClientConn
	health healthgrpc.HealthClient
	csds   csdspb.ClientStatusDiscoveryServiceClient
}

func startAdminPort(t *testing.T) *adminPort {
	t.Helper()
	return startAdminPortOn(t, "127.0.0.1:0")
}

// startAdminPortOn starts the admin gRPC server of startAdminPort on addr.
func startAdminPortOn(t *testing.T, addr string) *adminPort {
	t.Helper()
	hs := health.NewServer()
	srv := grpc.NewServer()
	healthgrpc.RegisterHealthServer(srv, hs)
	if err := csds.Register(srv); err != nil {
		t.Fatalf("csds.Register: %v", err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s for the admin gRPC server: %v", addr, err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc := dial(t, "passthrough:///"+lis.Addr().String(), insecure.NewCredentials())
	return &adminPort{hs: hs, cc: cc, health: healthgrpc.NewHealthClient(cc), csds: csdspb.NewClientStatusDiscoveryServiceClient(cc)}
}

// TestOperations: what an operator of a proxyless pod relies on, with the
// configuration istiod sends (STRICT mTLS and an ALLOW AuthorizationPolicy):
// a readiness probe sees NOT_SERVING until istiod's Listener is applied and
// as soon as the server stops; CSDS shows the Listener istiod sent, ACKed;
// the status page describes it in words.
func TestOperations(t *testing.T) {
	client := fmt.Sprintf("cluster.local/ns/%s/sa/%s", clientPod.namespace, clientPod.serviceAccount)
	m := newMesh(t, meshSpec{config: yamlDocs(mtlsMesh, authorizationPolicy("allow-client", "ALLOW", fmt.Sprintf(`
  - from:
    - source:
        principals: [%q]
    to:
    - operation:
        paths: [%q]`, client, unaryCallPath)))})
	ap := startAdminPort(t)
	ctx := testContext(t)

	// A probe watching from before the server exists.
	watch, err := ap.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Health.Watch: %v", err)
	}
	next := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("Health.Watch: %v", err)
		}
		return resp.GetStatus()
	}
	if st := next(); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("a new health server reports %v, want its default SERVING", st)
	}

	es := m.startEcho(t, xds.ReadinessHealth(ap.hs, xds.ReadinessOptions{}))
	if st := next(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("once the xDS server exists, the probe sees %v, want NOT_SERVING until its Listener arrives", st)
	}
	if st := next(); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("once istiod's Listener is applied, the probe sees %v, want SERVING", st)
	}
	// RBAC as istiod configured it: the client may call UnaryCall only.
	cc := m.xdsClient(t, clientPod)
	awaitResult(t, cc, unaryCall, mtlsFromClient)
	expect(t, cc, emptyCall, result{code: codes.PermissionDenied})

	// CSDS, as grpcdebug or istioctl would read it: the Listener istiod
	// sent for this server, ACKed.
	resp, err := ap.csds.FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
	if err != nil {
		t.Fatalf("CSDS FetchClientStatus: %v", err)
	}
	name := "xds.istio.io/grpc/lds/inbound/" + es.addr
	var lds *csdspb.ClientConfig_GenericXdsConfig
	for _, c := range resp.GetConfig() {
		for _, g := range c.GetGenericXdsConfigs() {
			if g.GetName() == name {
				lds = g
			}
		}
	}
	if lds == nil || lds.GetClientStatus() != adminpb.ClientResourceStatus_ACKED || lds.GetVersionInfo() == "" || lds.GetXdsConfig() == nil {
		t.Fatalf("CSDS has Listener %q as %v, want it ACKED with istiod's version and value", name, lds)
	}

	// The status page.
	mux := http.NewServeMux()
	mux.Handle("/xds/", http.StripPrefix("/xds", admin.NewStatusHandler(es.srv)))
	hts := httptest.NewServer(mux)
	defer hts.Close()
	text := fetchText(ctx, t, hts.URL+"/xds/")
	for _, want := range []string{
		"Listener " + es.addr + " — SERVING",
		name,
		"— ACKED: accepted",
		`Filter chain "inbound-mtls"`,
		"every connection (empty filter_chain_match)",
		`mTLS: server certificate from provider instance "default" (certificate "default"); client certificates verified with roots from provider instance "default" (certificate "ROOTCA"), required`,
		`inline route_config "inbound"`,
		`prefix "/" → served`,
		"envoy.filters.http.rbac envoy.extensions.filters.http.rbac.v3.RBAC",
		"router envoy.extensions.filters.http.router.v3.Router",
		"connected (ADS stream up)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the status page does not show %q; its text:\n%s", want, text)
		}
	}

	// GracefulStop: the probe sees NOT_SERVING.
	go es.srv.GracefulStop()
	if st := next(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after GracefulStop started, the probe sees %v, want NOT_SERVING", st)
	}
}

var (
	blockTagRE = regexp.MustCompile(`(?i)</?(?:tr|td|th|li|h[1-6]|p|br|table|ul|ol|div|head|title)\b[^>]*>`)
	tagRE      = regexp.MustCompile(`<[^>]*>`)
	styleRE    = regexp.MustCompile(`(?is)<style\b.*?</style>`)
	spaceRE    = regexp.MustCompile(`[ \t]*\n[ \t\n]*`)
)

// fetchText GETs an HTML page and returns the text a person reads on it.
func fetchText(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	body := styleRE.ReplaceAllString(string(b), "")
	body = tagRE.ReplaceAllString(blockTagRE.ReplaceAllString(body, "\n"), "")
	return strings.TrimSpace(spaceRE.ReplaceAllString(html.UnescapeString(body), "\n"))
}
