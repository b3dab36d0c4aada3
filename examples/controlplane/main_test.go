package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const shippedListener = "grpc/server?xds.resource.listening_address=127.0.0.1:50051"

func TestShippedResourcesLoad(t *testing.T) {
	r, err := loadResources("resources.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(r.listeners), []string{shippedListener}; !slices.Equal(got, want) {
		t.Errorf("listeners %q, want %q", got, want)
	}
	if got, want := names(r.routes), []string{"greeter-routes"}; !slices.Equal(got, want) {
		t.Errorf("routes %q, want %q", got, want)
	}
	hcm := &hcmpb.HttpConnectionManager{}
	if err := r.listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatalf("the filter is not an HttpConnectionManager: %v", err)
	}
	if got := hcm.GetRds().GetRouteConfigName(); got != "greeter-routes" {
		t.Errorf("the HttpConnectionManager asks for RouteConfiguration %q, want greeter-routes", got)
	}
	if m := r.missingRoutes(); len(m) != 0 {
		t.Errorf("missingRoutes: %q", m)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"not JSON", `{not json`, "(line 1:2)"},
		{"unknown top-level field", `{"listener": []}`, `unknown field "listener"`},
		{"unknown nested field", "{\"routes\": [{\"name\": \"r\",\n \"virtual_host\": []}]}", `(line 2:2): unknown field "virtual_host"`},
		{"unknown @type", `{"listeners": [{"name": "l", "filter_chains": [{"filters": [{"typed_config": {"@type": "type.googleapis.com/no.Such"}}]}]}]}`, "no.Such"},
		{"empty", " \n", "the file is empty"},
		{"no name", `{"routes": [{}]}`, "routes[0] has no name"},
		{"duplicate name", `{"routes": [{"name": "r"}, {"name": "r"}]}`, `routes[1]: a second resource named "r"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseResources([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseResources(%s) = %v, want an error containing %q", tc.doc, err, tc.want)
			}
		})
	}
	if _, err := loadResources("resources.yaml"); err == nil || !strings.Contains(err.Error(), "YAML is not supported") {
		t.Errorf("loadResources(resources.yaml) = %v, want YAML is not supported", err)
	}
}

// TestRun drives a real xds.GRPCServer by editing the file: the shipped
// resources make it serve, a route restricted to EmptyCall makes UnaryCall
// fail, and garbage changes nothing.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The xDS server's port, and the shipped resources aimed at it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	addr := lis.Addr().(*net.TCPAddr)
	res, err := loadResources("resources.json")
	if err != nil {
		t.Fatal(err)
	}
	l := res.listeners[0]
	l.Name = strings.Replace(shippedListener, "127.0.0.1:50051", addr.String(), 1)
	l.GetAddress().GetSocketAddress().PortSpecifier = &corepb.SocketAddress_PortValue{PortValue: uint32(addr.Port)}
	path := filepath.Join(t.TempDir(), "resources.json")
	writeResources(t, path, res)

	// The control plane serving path, and the xDS server it configures.
	_, logs, modes := serveFromControlPlane(ctx, t, path, lis)
	logs.waitFor(ctx, t, `"controlplane-test" applied (ACK) RouteConfiguration version 1`)

	conn, err := grpc.NewClient(addr.String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	if err := unary(ctx, client); err != nil {
		t.Fatalf("UnaryCall with the shipped routes: %v", err)
	}
	if err := empty(ctx, client); err != nil {
		t.Fatalf("EmptyCall with the shipped routes: %v", err)
	}

	// Restrict the routes to EmptyCall.
	res.routes[0].GetVirtualHosts()[0].Routes = []*routepb.Route{{
		Name:   "only-empty-call",
		Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: "/grpc.testing.TestService/EmptyCall"}},
		Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
	}}
	writeResources(t, path, res)
	logs.waitFor(ctx, t, "reloaded "+path+" as version 2", `"controlplane-test" applied (ACK) RouteConfiguration version 2`)
	// The ACK tells that the server has the new routes; allow it a moment
	// to apply them.
	for err := unary(ctx, client); status.Code(err) != codes.Unavailable; err = unary(ctx, client) {
		if err != nil || ctx.Err() != nil {
			t.Fatalf("UnaryCall after restricting the routes: %v, want OK until it is Unavailable", err)
		}
	}
	if err := unary(ctx, client); !strings.Contains(err.Error(), "no virtual host and route matching") {
		t.Fatalf("UnaryCall after restricting the routes: %v, want Unavailable for want of a route", err)
	}
	if err := empty(ctx, client); err != nil {
		t.Fatalf("EmptyCall after restricting the routes: %v", err)
	}

	// A Listener the server refuses: the control plane serves it as version
	// 3, the server NACKs it and keeps version 2.
	l.UseOriginalDst = wrapperspb.Bool(true)
	writeResources(t, path, res)
	logs.waitFor(ctx, t, `"controlplane-test" REJECTED (NACK) the Listener update, keeps version "2": `)
	if err := empty(ctx, client); err != nil {
		t.Fatalf("EmptyCall after a Listener the server refused: %v", err)
	}

	// A bad edit: rejected, and the last good version stays.
	if err := os.WriteFile(path, []byte(`{"routes": [{"name": "greeter-routes", `), 0o644); err != nil {
		t.Fatal(err)
	}
	logs.waitFor(ctx, t, "reload REJECTED, still serving version 3: "+path+": proto")
	if err := unary(ctx, client); status.Code(err) != codes.Unavailable {
		t.Errorf("UnaryCall after a bad edit: %v, want Unavailable", err)
	}
	if err := empty(ctx, client); err != nil {
		t.Errorf("EmptyCall after a bad edit: %v", err)
	}
	select {
	case m := <-modes:
		t.Errorf("the serving mode changed to %v", m)
	default:
	}
}

// writeResources replaces the file at path with r, at once: a reader sees
// the old file or the new one, never half of it.
func writeResources(t *testing.T, path string, r *resources) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`{"listeners": [`)
	for i, l := range r.listeners {
		if i > 0 {
			b.WriteString(",")
		}
		b.Write(mustMarshal(t, l))
	}
	b.WriteString(`], "routes": [`)
	for i, rc := range r.routes {
		if i > 0 {
			b.WriteString(",")
		}
		b.Write(mustMarshal(t, rc))
	}
	b.WriteString("]}")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// logLines is the control plane's log output, a line at a time.
type logLines struct{ lines chan string }

func (l *logLines) Write(p []byte) (int, error) {
	select {
	case l.lines <- string(p):
	default: // a test that does not read the log does not block the control plane
	}
	return len(p), nil
}

// waitFor reads the log until, for each of wants, a line has contained it,
// in any order.
func (l *logLines) waitFor(ctx context.Context, t *testing.T, wants ...string) {
	t.Helper()
	for len(wants) > 0 {
		select {
		case line := <-l.lines:
			t.Log("control plane: ", strings.TrimSuffix(line, "\n"))
			wants = slices.DeleteFunc(wants, func(w string) bool { return strings.Contains(line, w) })
		case <-ctx.Done():
			t.Fatalf("the control plane did not log %q", wants)
		}
	}
}

func unary(ctx context.Context, client testgrpc.TestServiceClient) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	return err
}

func empty(ctx context.Context, client testgrpc.TestServiceClient) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true))
	return err
}

type testService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (testService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

func (testService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

// serveFromControlPlane runs the control plane on the resources file path
// and an xDS server on lis with it as its management server, and waits
// until the server is SERVING. The test's cleanup stops the server (a
// Stop after the test's own GracefulStop only waits for it) and then the
// control plane, and checks that both ended cleanly. It returns the server,
// the control plane's log lines and the server's later serving modes.
func serveFromControlPlane(ctx context.Context, t *testing.T, path string, lis net.Listener) (*xds.GRPCServer, *logLines, <-chan connectivity.ServingMode) {
	t.Helper()
	logs := &logLines{lines: make(chan string, 100)}
	cpAddr := make(chan net.Addr, 1)
	runDone := make(chan error, 1)
	runCtx, stopRun := context.WithCancel(context.Background())
	t.Cleanup(func() {
		stopRun()
		if err := <-runDone; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	go func() {
		runDone <- run(runCtx, config{
			path: path, addr: "127.0.0.1:0", poll: 50 * time.Millisecond,
			log:       log.New(logs, "", 0),
			listening: func(a net.Addr) { cpAddr <- a },
		})
	}()
	var cp net.Addr
	select {
	case cp = <-cpAddr:
	case err := <-runDone:
		runDone <- err
		t.Fatalf("run: %v", err)
	}

	modes := make(chan connectivity.ServingMode, 10)
	srv, err := xds.NewGRPCServer(
		xds.BootstrapContents(fmt.Appendf(nil, `{
			"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
			"node": {"id": "controlplane-test"},
			"server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%%s"
		}`, cp)),
		xds.ServingModeCallback(func(_ net.Addr, a xds.ServingModeChangeArgs) { modes <- a.Mode }),
	)
	if err != nil {
		t.Fatal(err)
	}
	testgrpc.RegisterTestServiceServer(srv, testService{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	select {
	case m := <-modes:
		if m != connectivity.ServingModeServing {
			t.Fatalf("the server went %v, want SERVING", m)
		}
	case <-ctx.Done():
		t.Fatal("the server did not become SERVING")
	}
	return srv, logs, modes
}
