package main

import (
	"context"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != "127.0.0.1:50051" || cfg.shutdownTimeout != 30*time.Second || cfg.drainGrace != 10*time.Minute {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = parseFlags([]string{"-addr", "0.0.0.0:8080", "-shutdown-timeout", "5s", "-drain-grace", "1m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != "0.0.0.0:8080" || cfg.shutdownTimeout != 5*time.Second || cfg.drainGrace != time.Minute {
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
	err := run(context.Background(), config{addr: "127.0.0.1:0", log: log.New(io.Discard, "", 0)})
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

// greeterRun is a greeter started by startGreeter.
type greeterRun struct {
	addr *net.TCPAddr
	conn *grpc.ClientConn // a client of the greeter
	logs *syncBuffer
	stop context.CancelFunc // what SIGTERM does
	done chan error         // run's result
}

// startGreeter runs the greeter against an in-process control plane, with
// the bootstrap in a file named by GRPC_XDS_BOOTSTRAP, publishes its
// Listener, and waits until a UnaryCall succeeds.
func startGreeter(ctx context.Context, t *testing.T, shutdownTimeout time.Duration) *greeterRun {
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	t.Cleanup(ms.Stop)
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	contents := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{ms.Address},
		NodeID:                             "greeter-test",
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
	})
	if err := os.WriteFile(path, contents, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(bootstrap.EnvBootstrapConfig, "")
	t.Setenv(bootstrap.EnvBootstrapFile, path)

	g := &greeterRun{logs: &syncBuffer{}, done: make(chan error, 1)}
	listening := make(chan *net.TCPAddr, 1)
	runCtx, stopRun := context.WithCancel(ctx)
	g.stop = stopRun
	t.Cleanup(func() {
		stopRun()
		<-g.done
	})
	go func() {
		g.done <- run(runCtx, config{
			addr:            "127.0.0.1:0",
			shutdownTimeout: shutdownTimeout,
			drainGrace:      time.Second,
			log:             log.New(g.logs, "", 0),
			listening:       func(a net.Addr) { listening <- a.(*net.TCPAddr) },
		})
	}()
	select {
	case g.addr = <-listening:
	case err := <-g.done:
		g.done <- err
		t.Fatalf("run: %v", err)
	case <-ctx.Done():
		t.Fatal("run did not listen")
	}
	if err := ms.Update(ctx, e2e.Resources{
		Listeners: []*listenerpb.Listener{e2e.DefaultServerListener("127.0.0.1", uint32(g.addr.Port), "greeter-routes")},
		Routes:    []*routepb.RouteConfiguration{e2e.DefaultRouteConfig("greeter-routes")},
	}); err != nil {
		t.Fatal(err)
	}

	// A short reconnect backoff: the first connection may come before the
	// Listener, and be refused.
	conn, err := grpc.NewClient(g.addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g.conn = conn
	resp, err := testgrpc.NewTestServiceClient(conn).UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("world")}}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("UnaryCall: %v", err)
	}
	if got := string(resp.GetPayload().GetBody()); got != "Hello, world" {
		t.Errorf("UnaryCall: %q, want %q", got, "Hello, world")
	}
	return g
}

// waitDone waits for run to return after g.stop, and returns its error.
func (g *greeterRun) waitDone(ctx context.Context, t *testing.T) error {
	select {
	case err := <-g.done:
		g.done <- err // for the cleanup
		return err
	case <-ctx.Done():
		t.Fatalf("run did not return after its context was cancelled; log:\n%s", g.logs.String())
		return nil
	}
}

// TestRunE2E runs the greeter against an in-process control plane, calls
// its services, and stops it by cancelling its context, as SIGTERM does.
func TestRunE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := startGreeter(ctx, t, 5*time.Second)
	conn, addr := g.conn, g.addr

	// Health follows the serving mode: SERVING once the Listener is applied.
	watchCtx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	watch, err := healthpb.NewHealthClient(conn).Watch(watchCtx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		hr, err := watch.Recv()
		if err != nil {
			t.Fatalf("health Watch: %v", err)
		}
		if hr.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	// Ended before the stop: GracefulStop waits for every RPC in flight.
	cancelWatch()

	// Reflection lists every service.
	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
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
	for _, want := range []string{"grpc.testing.TestService", "grpc.health.v1.Health", "envoy.service.status.v3.ClientStatusDiscoveryService", "grpc.reflection.v1.ServerReflection"} {
		if !strings.Contains(strings.Join(services, " "), want) {
			t.Errorf("reflection lists %q, want %s among them", services, want)
		}
	}

	// CSDS shows the Listener, acknowledged.
	cs, err := csdspb.NewClientStatusDiscoveryServiceClient(conn).FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
	if err != nil {
		t.Fatalf("CSDS: %v", err)
	}
	acked := false
	for _, c := range cs.GetConfig() {
		for _, g := range c.GetGenericXdsConfigs() {
			if g.GetName() == e2e.ServerListenerName("127.0.0.1", uint32(addr.Port)) && g.GetClientStatus() == adminpb.ClientResourceStatus_ACKED {
				acked = true
			}
		}
	}
	if !acked {
		t.Errorf("CSDS has no ACKED Listener for %v: %v", addr, cs)
	}

	g.stop() // SIGTERM
	if err := g.waitDone(ctx, t); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	for _, want := range []string{"listening on 127.0.0.1:", "is SERVING", "stopping:", "stopped"} {
		if !strings.Contains(g.logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, g.logs.String())
		}
	}
}

// TestShutdownTimeout: an RPC that does not end within -shutdown-timeout is
// cut by Stop, and run returns.
func TestShutdownTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g := startGreeter(ctx, t, 500*time.Millisecond)
	// A health Watch is an RPC that never ends on its own.
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
