package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// TestMain ends with a goroutine leak check (go.uber.org/goleak).
func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != "127.0.0.1:50051" || cfg.adminGRPCAddr != "127.0.0.1:50052" || cfg.adminHTTPAddr != "127.0.0.1:50053" ||
		cfg.pprof || cfg.shutdownDelay != 5*time.Second || cfg.shutdownTimeout != 30*time.Second || cfg.drainGrace != 10*time.Minute ||
		cfg.noMeshMetrics || cfg.accessLogFile != "" {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = parseFlags([]string{"-addr", "0.0.0.0:8080", "-admin-grpc-addr", ":9090", "-admin-http-addr", ":9091", "-pprof",
		"-shutdown-delay", "2s", "-shutdown-timeout", "5s", "-drain-grace", "1m", "-mesh-metrics=false",
		"-access-log-file=/dev/stdout"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != "0.0.0.0:8080" || cfg.adminGRPCAddr != ":9090" || cfg.adminHTTPAddr != ":9091" || !cfg.pprof ||
		cfg.shutdownDelay != 2*time.Second || cfg.shutdownTimeout != 5*time.Second || cfg.drainGrace != time.Minute ||
		!cfg.noMeshMetrics || cfg.accessLogFile != "/dev/stdout" {
		t.Errorf("parsed: %+v", cfg)
	}
	for _, args := range [][]string{{"-no-such-flag"}, {"extra"}, {"-shutdown-timeout", "soon"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
}

// TestShippedBootstrap checks that bootstrap.json is valid and points at
// examples/controlplane's default address.
func TestShippedBootstrap(t *testing.T) {
	contents, err := os.ReadFile("bootstrap.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := bootstrap.Load(contents)
	if err != nil {
		t.Fatalf("bootstrap.json: %v", err)
	}
	if got := cfg.XDSServers[0].ServerURI; got != "127.0.0.1:18000" {
		t.Errorf("server_uri %q, want 127.0.0.1:18000 (examples/controlplane's default)", got)
	}
	if got, want := cfg.ServerListenerResourceNameTemplate, "grpc/server?xds.resource.listening_address=%s"; got != want {
		t.Errorf("server_listener_resource_name_template %q, want %q", got, want)
	}
}

// TestNoBootstrap: without a bootstrap, run fails at once and says why.
func TestNoBootstrap(t *testing.T) {
	t.Setenv(bootstrap.EnvBootstrapConfig, "")
	t.Setenv(bootstrap.EnvBootstrapFile, "")
	err := run(context.Background(), config{addr: "127.0.0.1:0", adminGRPCAddr: "127.0.0.1:0", adminHTTPAddr: "127.0.0.1:0", log: log.New(io.Discard, "", 0)})
	if err == nil || !strings.Contains(err.Error(), "GRPC_XDS_BOOTSTRAP") {
		t.Fatalf("run without a bootstrap: %v, want an error naming GRPC_XDS_BOOTSTRAP", err)
	}
}

// syncBuffer collects the log.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// greeterRun is a greeter started by runGreeter.
type greeterRun struct {
	addr      *net.TCPAddr     // the xDS server
	adminGRPC string           // the admin gRPC server
	adminHTTP string           // the admin HTTP server, as http://host:port
	conn      *grpc.ClientConn // a client of the xDS server
	admin     *grpc.ClientConn // a client of the admin gRPC server
	logs      *syncBuffer
	stop      context.CancelFunc // what SIGTERM does
	done      chan error         // run's result
	// shuttingDown is closed when readiness is NOT_SERVING at the start
	// of the shutdown delay; closing endDelay ends the delay.
	shuttingDown chan struct{}
	endDelay     chan struct{}
}

type greeterOptions struct {
	bootstrapFile   string        // GRPC_XDS_BOOTSTRAP
	shutdownDelay   time.Duration // 0: none
	shutdownTimeout time.Duration
	register        func(grpc.ServiceRegistrar) // more services on the xDS server
	pprof           bool
	clientCreds     credentials.TransportCredentials // of g.conn; insecure if nil
	noMeshMetrics   bool                             // -mesh-metrics=false
	accessLogFile   string                           // -access-log-file
}

// runGreeter runs the greeter in process on loopback port 0, with the
// bootstrap in a file named by GRPC_XDS_BOOTSTRAP, and returns once it
// listens.
func runGreeter(ctx context.Context, t *testing.T, o greeterOptions) *greeterRun {
	t.Helper()
	t.Setenv(bootstrap.EnvBootstrapConfig, "")
	t.Setenv(bootstrap.EnvBootstrapFile, o.bootstrapFile)
	g := &greeterRun{logs: &syncBuffer{}, done: make(chan error, 1), shuttingDown: make(chan struct{}), endDelay: make(chan struct{})}
	listening := make(chan addrs, 1)
	runCtx, stopRun := context.WithCancel(ctx)
	g.stop = stopRun
	t.Cleanup(func() {
		stopRun()
		select {
		case <-g.endDelay:
		default:
			close(g.endDelay)
		}
		<-g.done
	})
	go func() {
		g.done <- run(runCtx, config{
			addr:            "127.0.0.1:0",
			adminGRPCAddr:   "127.0.0.1:0",
			adminHTTPAddr:   "127.0.0.1:0",
			shutdownDelay:   o.shutdownDelay,
			shutdownTimeout: o.shutdownTimeout,
			drainGrace:      time.Second,
			log:             log.New(g.logs, "", 0),
			listening:       func(a addrs) { listening <- a },
			shuttingDown:    func() { close(g.shuttingDown) },
			endDelay:        g.endDelay,
			register:        o.register,
			pprof:           o.pprof,
			noMeshMetrics:   o.noMeshMetrics,
			accessLogFile:   o.accessLogFile,
		})
	}()
	select {
	case a := <-listening:
		g.addr = a.xds.(*net.TCPAddr)
		g.adminGRPC = a.adminGRPC.String()
		g.adminHTTP = "http://" + a.adminHTTP.String()
	case err := <-g.done:
		g.done <- err
		t.Fatalf("run: %v", err)
	case <-ctx.Done():
		t.Fatal("run did not listen")
	}
	// A short reconnect backoff: the first connection may come before the
	// Listener, and be refused.
	if o.clientCreds == nil {
		o.clientCreds = insecure.NewCredentials()
	}
	g.conn = dial(t, g.addr.String(), o.clientCreds)
	g.admin = dial(t, g.adminGRPC, insecure.NewCredentials())
	return g
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// managementServer starts an in-process control plane and writes a
// bootstrap file for it.
func managementServer(t *testing.T) (*e2e.ManagementServer, string) {
	return managementServerWith(t, nil)
}

// managementServerWith is managementServer with the bootstrap's
// certificate_providers.
func managementServerWith(t *testing.T, providers map[string]json.RawMessage) (*e2e.ManagementServer, string) {
	return managementServerFor(t, pilotAgentMetadata, providers)
}

// managementServerFor is managementServerWith with the node metadata md
// (nil: none).
func managementServerFor(t *testing.T, md map[string]any, providers map[string]json.RawMessage) (*e2e.ManagementServer, string) {
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	t.Cleanup(ms.Stop)
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	contents := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{ms.Address},
		NodeID:                             "greeter-test",
		NodeMetadata:                       md,
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		CertificateProviders:               providers,
	})
	if err := os.WriteFile(path, contents, 0o600); err != nil {
		t.Fatal(err)
	}
	return ms, path
}

// publish gives the greeter its Listener and routes.
func (g *greeterRun) publish(ctx context.Context, t *testing.T, ms *e2e.ManagementServer) {
	t.Helper()
	g.publishListener(ctx, t, ms, e2e.DefaultServerListener("127.0.0.1", uint32(g.addr.Port), "greeter-routes"))
}

func (g *greeterRun) publishListener(ctx context.Context, t *testing.T, ms *e2e.ManagementServer, l *listenerpb.Listener) {
	t.Helper()
	if err := ms.Update(ctx, e2e.Resources{
		Listeners: []*listenerpb.Listener{l},
		Routes:    []*routepb.RouteConfiguration{e2e.DefaultRouteConfig("greeter-routes")},
	}); err != nil {
		t.Fatal(err)
	}
}

// hello makes a UnaryCall that waits for the server to serve.
func (g *greeterRun) hello(ctx context.Context, t *testing.T) {
	t.Helper()
	resp, err := testgrpc.NewTestServiceClient(g.conn).UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("world")}}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("UnaryCall: %v", err)
	}
	if got := string(resp.GetPayload().GetBody()); got != "Hello, world" {
		t.Errorf("UnaryCall: %q, want %q", got, "Hello, world")
	}
}

// waitServing waits for the admin health service to say SERVING.
func (g *greeterRun) waitServing(ctx context.Context, t *testing.T) {
	t.Helper()
	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err := healthpb.NewHealthClient(g.admin).Watch(watchCtx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	for {
		hr, err := watch.Recv()
		if err != nil {
			t.Fatalf("health Watch: %v", err)
		}
		if hr.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
	}
}

// waitDone waits for run to return after g.stop, and returns its error.
func (g *greeterRun) waitDone(ctx context.Context, t *testing.T) error {
	t.Helper()
	select {
	case err := <-g.done:
		g.done <- err // for the cleanup
		return err
	case <-ctx.Done():
		t.Fatalf("run did not return after its context was cancelled; log:\n%s", g.logs.String())
		return nil
	}
}

func httpGet(ctx context.Context, t *testing.T, url string) string {
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
		t.Fatalf("GET %s: %v %v\n%s", url, resp.Status, err, b)
	}
	return string(b)
}

// TestRunE2E runs the greeter against an in-process control plane, calls
// its service and its admin services, and stops it by cancelling its
// context, as SIGTERM does.
func TestRunE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ms, bs := managementServer(t)
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second})
	g.publish(ctx, t, ms)
	g.hello(ctx, t)
	g.waitServing(ctx, t)

	// Reflection, on the admin port, lists the admin services.
	rs, err := reflectionpb.NewServerReflectionClient(g.admin).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := rs.Recv()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := rs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Recv(); err != io.EOF {
		t.Fatalf("reflection stream after CloseSend: %v, want EOF", err)
	}
	var services []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	for _, want := range []string{"grpc.health.v1.Health", "envoy.service.status.v3.ClientStatusDiscoveryService", "grpc.reflection.v1.ServerReflection"} {
		if !strings.Contains(strings.Join(services, " "), want) {
			t.Errorf("reflection lists %q, want %s among them", services, want)
		}
	}
	// The xDS port serves the application only.
	if _, err := healthpb.NewHealthClient(g.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("health Check on the xDS port succeeded, want Unimplemented: admin services are on the admin port")
	}

	// CSDS, on the admin port, shows the Listener, acknowledged.
	cs, err := csdspb.NewClientStatusDiscoveryServiceClient(g.admin).FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
	if err != nil {
		t.Fatalf("CSDS: %v", err)
	}
	acked := false
	for _, c := range cs.GetConfig() {
		for _, gc := range c.GetGenericXdsConfigs() {
			if gc.GetName() == e2e.ServerListenerName("127.0.0.1", uint32(g.addr.Port)) && gc.GetClientStatus() == adminpb.ClientResourceStatus_ACKED {
				acked = true
			}
		}
	}
	if !acked {
		t.Errorf("CSDS has no ACKED Listener for %v: %v", g.addr, cs)
	}

	// The status page, on the admin HTTP port, shows the listener SERVING.
	page := httpGet(ctx, t, g.adminHTTP+"/xds/")
	if !strings.Contains(page, g.addr.String()) || !strings.Contains(page, "SERVING") || strings.Contains(page, "NOT_SERVING") {
		t.Errorf("the status page does not show %v SERVING:\n%s", g.addr, page)
	}
	if csdsJSON := httpGet(ctx, t, g.adminHTTP+"/xds/csds.json"); !strings.Contains(csdsJSON, "ACKED") {
		t.Errorf("/xds/csds.json has no ACKED resource:\n%s", csdsJSON)
	}
	// pprof is off without -pprof.
	if resp, err := http.Get(g.adminHTTP + "/debug/pprof/"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("/debug/pprof/ without -pprof: %v, want 404", resp.Status)
		}
	}

	g.stop() // SIGTERM
	if err := g.waitDone(ctx, t); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	for _, want := range []string{"xDS server on 127.0.0.1:", "is SERVING", "stopping: NOT_SERVING", "GracefulStop", "stopped"} {
		if !strings.Contains(g.logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, g.logs.String())
		}
	}
}

// TestMetrics scrapes /metrics and parses it with Prometheus' own text
// parser: the server's (TLS included, on a TLS chain), the xDS client's and
// gRPC's RPC metrics are there, under their documented names translated by
// the Prometheus exporter. It runs with -pprof, whose index it checks too.
func TestMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A TLS chain, its certificate from a file_watcher provider.
	ca := testcerts.NewCA(t, "greeter-test-ca")
	files := testcerts.WriteFiles(t, t.TempDir(), ca.Issue(t, testcerts.LeafOptions{CommonName: "greeter", IPs: []string{"127.0.0.1"}}), ca.PEM)
	provider, err := json.Marshal(map[string]any{"plugin_name": "file_watcher", "config": map[string]string{
		"certificate_file": files.Cert, "private_key_file": files.Key, "ca_certificate_file": files.CA, "refresh_interval": "600s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	ms, bs := managementServerWith(t, map[string]json.RawMessage{"server-certs": provider})
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second, pprof: true,
		clientCreds: credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12})})
	l := e2e.DefaultServerListener("127.0.0.1", uint32(g.addr.Port), "greeter-routes")
	downstream, err := anypb.New(&tlspb.DownstreamTlsContext{CommonTlsContext: &tlspb.CommonTlsContext{
		TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "server-certs"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l.FilterChains[0].TransportSocket = &corepb.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: downstream}}
	g.publishListener(ctx, t, ms, l)
	g.hello(ctx, t)
	g.waitServing(ctx, t)

	// -pprof serves net/http/pprof next to the metrics.
	if idx := httpGet(ctx, t, g.adminHTTP+"/debug/pprof/"); !strings.Contains(idx, "goroutine") {
		t.Errorf("/debug/pprof/ with -pprof is not pprof's index:\n%s", idx)
	}

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(httpGet(ctx, t, g.adminHTTP+"/metrics")))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	value := func(name string) (float64, bool) {
		mf, ok := families[name]
		if !ok {
			return 0, false
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return sum, true
	}
	for _, c := range []struct {
		name string // after Prometheus translation
		min  float64
	}{
		{"grpc_xds_server_serving", 1},                                   // grpc.xds_server.serving
		{"grpc_xds_server_connections_accepted_total", 1},                // grpc.xds_server.connections.accepted
		{"grpc_xds_client_resource_updates_valid_total", 2},              // grpc.xds_client.resource_updates_valid: the Listener and the routes
		{"grpc_xds_client_connected", 1},                                 // grpc.xds_client.connected
		{"grpc_xds_client_resources", 2},                                 // grpc.xds_client.resources
		{"grpc_server_tls_handshakes_total", 1},                          // grpc.server.tls.handshakes
		{"grpc_xds_server_tls_certificate_time_to_expiry_seconds", 3000}, // grpc.xds_server.tls.certificate.time_to_expiry: an hour
		{"grpc_server_call_started_total", 1},                            // gRPC's grpc.server.call.started
		{"grpc_server_call_duration_seconds", 1},                         // gRPC's grpc.server.call.duration
	} {
		v, ok := value(c.name)
		if !ok {
			var names []string
			for n := range families {
				names = append(names, n)
			}
			t.Errorf("/metrics has no %s; it has %q", c.name, names)
			continue
		}
		if v < c.min {
			t.Errorf("%s = %v, want at least %v", c.name, v, c.min)
		}
	}
}

// buildTool builds a command with the go tool into a temporary directory:
// dir is where go build runs, pkg what it builds.
func buildTool(ctx context.Context, t *testing.T, dir, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// probe runs grpc-health-probe against addr and returns its exit code.
func probe(ctx context.Context, t *testing.T, bin, addr string) int {
	t.Helper()
	out, err := exec.CommandContext(ctx, bin, "-addr="+addr, "-connect-timeout=5s", "-rpc-timeout=5s").CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		t.Logf("grpc-health-probe: exit %d: %s", exit.ExitCode(), strings.TrimSpace(string(out)))
		return exit.ExitCode()
	default:
		t.Fatalf("grpc-health-probe: %v\n%s", err, out)
		return -1
	}
}

// TestHealthProbe runs grpc-health-probe, the probe Kubernetes users run,
// against the admin gRPC port: NOT_SERVING (exit 4) before the Listener,
// SERVING (exit 0) after, NOT_SERVING during the shutdown delay.
func TestHealthProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Pinned by the tool directive of go.mod; built from the module cache.
	bin := buildTool(ctx, t, ".", "github.com/grpc-ecosystem/grpc-health-probe", "grpc-health-probe")

	ms, bs := managementServer(t)
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownDelay: time.Minute, shutdownTimeout: 5 * time.Second})
	if code := probe(ctx, t, bin, g.adminGRPC); code != 4 {
		t.Errorf("before the Listener: grpc-health-probe exit %d, want 4 (NOT_SERVING)", code)
	}
	g.publish(ctx, t, ms)
	g.waitServing(ctx, t)
	if code := probe(ctx, t, bin, g.adminGRPC); code != 0 {
		t.Errorf("serving: grpc-health-probe exit %d, want 0 (SERVING)", code)
	}

	g.stop() // SIGTERM
	select {
	case <-g.shuttingDown:
	case <-ctx.Done():
		t.Fatal("no shutdown delay")
	}
	if code := probe(ctx, t, bin, g.adminGRPC); code != 4 {
		t.Errorf("during -shutdown-delay: grpc-health-probe exit %d, want 4 (NOT_SERVING)", code)
	}
	// The xDS server still serves during the delay.
	g.hello(ctx, t)
	close(g.endDelay)
	if err := g.waitDone(ctx, t); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// TestShutdownTimeout: an RPC that does not end within -shutdown-timeout is
// cut by Stop, and run returns.
func TestShutdownTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms, bs := managementServer(t)
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 500 * time.Millisecond, register: func(s grpc.ServiceRegistrar) {
		healthpb.RegisterHealthServer(s, health.NewServer())
	}})
	g.publish(ctx, t, ms)
	g.hello(ctx, t)
	// A health Watch, registered on the xDS server for this test, is an RPC
	// that never ends on its own.
	watch, err := healthpb.NewHealthClient(g.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	g.stop()
	if err := g.waitDone(ctx, t); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(g.logs.String(), "closing every connection") {
		t.Errorf("the log lacks the forced stop:\n%s", g.logs.String())
	}
}

// TestListenNetworkKeepsTheName: -addr 0.0.0.0:p is listened on as 0.0.0.0:p,
// not as the [::]:p Go reports for "tcp" on a dual-stack host, so that the
// Listener the server asks for is named as -addr says.
func TestListenNetworkKeepsTheName(t *testing.T) {
	for addr, want := range map[string]string{"0.0.0.0:0": "tcp4", "127.0.0.1:0": "tcp4", "[::]:0": "tcp", "[::1]:0": "tcp", ":0": "tcp", "localhost:0": "tcp"} {
		if got := listenNetwork(addr); got != want {
			t.Errorf("listenNetwork(%q) = %q, want %q", addr, got, want)
		}
	}
	lis, err := net.Listen(listenNetwork("0.0.0.0:0"), "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if got := lis.Addr().String(); !strings.HasPrefix(got, "0.0.0.0:") {
		t.Errorf("the listening address is %q, want 0.0.0.0:<port>, the name -addr says", got)
	}
}
