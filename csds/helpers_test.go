package csds_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/csds"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const (
	listenerURL = "type.googleapis.com/envoy.config.listener.v3.Listener"
	routeURL    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

type discoveryRequest = discoverypb.DiscoveryRequest

// testEnv is a management server and a bootstrap pointing at it with a
// node ID unique to the test, so that the test finds its own client among
// every client of the process.
type testEnv struct {
	ms        *e2e.ManagementServer
	nodeID    string
	bootstrap []byte
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	return newTestEnvFor(t, ms, "node-"+testutils.RunName(t))
}

func newTestEnvFor(t *testing.T, ms *e2e.ManagementServer, nodeID string) *testEnv {
	t.Helper()
	return &testEnv{
		ms:     ms,
		nodeID: nodeID,
		bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
			ServerURIs:                         []string{ms.Address},
			NodeID:                             nodeID,
			ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		}),
	}
}

// node is the Node the bootstrap makes the client send.
func (e *testEnv) node(t *testing.T) *corepb.Node {
	t.Helper()
	cfg, err := bootstrap.Parse(e.bootstrap)
	if err != nil {
		t.Fatalf("bootstrap.Parse: %v", err)
	}
	return cfg.Node
}

// serve creates an xds.GRPCServer from env's bootstrap (and opts) serving
// n listeners on 127.0.0.1, stopped at cleanup; register is called before
// Serve. It returns the server and its listeners' addresses.
func (e *testEnv) serve(t *testing.T, n int, register func(*xds.GRPCServer), opts ...grpc.ServerOption) (*xds.GRPCServer, []*net.TCPAddr) {
	t.Helper()
	s, err := xds.NewGRPCServer(append([]grpc.ServerOption{xds.BootstrapContents(e.bootstrap)}, opts...)...)
	if err != nil {
		t.Fatalf("xds.NewGRPCServer: %v", err)
	}
	if register != nil {
		register(s)
	}
	var addrs []*net.TCPAddr
	var dones []chan error
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("net.Listen: %v", err)
		}
		addrs = append(addrs, lis.Addr().(*net.TCPAddr))
		done := make(chan error, 1)
		dones = append(dones, done)
		go func() { done <- s.Serve(lis) }()
	}
	t.Cleanup(func() {
		s.Stop()
		for _, d := range dones {
			if err := <-d; err != nil {
				t.Errorf("Serve returned %v, want nil", err)
			}
		}
	})
	return s, addrs
}

// startCSDS serves CSDS on a plain grpc.Server on loopback and returns a
// real gRPC client of it.
func startCSDS(t *testing.T) csdspb.ClientStatusDiscoveryServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen: %v", err)
	}
	s := grpc.NewServer()
	if err := csds.Register(s); err != nil {
		t.Fatalf("csds.Register: %v", err)
	}
	done := make(chan struct{})
	go func() { s.Serve(lis); close(done) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return dialCSDS(t, lis.Addr())
}

func dialCSDS(t *testing.T, addr net.Addr) csdspb.ClientStatusDiscoveryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return csdspb.NewClientStatusDiscoveryServiceClient(cc)
}

// configOf returns the ClientConfig of the client whose node ID is nodeID,
// or nil.
func configOf(resp *csdspb.ClientStatusResponse, nodeID string) *csdspb.ClientConfig {
	for _, c := range resp.GetConfig() {
		if c.GetNode().GetId() == nodeID {
			return c
		}
	}
	return nil
}

// resourceKey identifies a GenericXdsConfig.
type resourceKey struct{ typeURL, name string }

// byResource indexes the generic configs of c.
func byResource(c *csdspb.ClientConfig) map[resourceKey]*csdspb.ClientConfig_GenericXdsConfig {
	out := make(map[resourceKey]*csdspb.ClientConfig_GenericXdsConfig)
	for _, g := range c.GetGenericXdsConfigs() {
		out[resourceKey{g.GetTypeUrl(), g.GetName()}] = g
	}
	return out
}

// waitForStatuses fetches until the client of nodeID reports every resource
// of want with its status, and returns that config.
func waitForStatuses(ctx context.Context, t *testing.T, cl csdspb.ClientStatusDiscoveryServiceClient, nodeID string, want map[resourceKey]adminpb.ClientResourceStatus) *csdspb.ClientConfig {
	t.Helper()
	var last *csdspb.ClientConfig
	testutils.WaitFor(ctx, t, fmt.Sprintf("statuses %v", want), func() error {
		resp, err := cl.FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
		if err != nil {
			return fmt.Errorf("FetchClientStatus: %v", err)
		}
		last = configOf(resp, nodeID)
		if !statusesMatch(last, want) {
			return fmt.Errorf("last config: %v", last)
		}
		return nil
	})
	return last
}

func statusesMatch(c *csdspb.ClientConfig, want map[resourceKey]adminpb.ClientResourceStatus) bool {
	if c == nil {
		return false
	}
	got := byResource(c)
	for k, st := range want {
		if g := got[k]; g == nil || g.GetClientStatus() != st {
			return false
		}
	}
	return true
}
