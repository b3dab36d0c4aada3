package listener

import (
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// TestWiringRealClient: the one test with the real xDS client and a
// management server, to check that the client reaches the listener and its
// RDS handler through XDSClient: a Listener naming a RouteConfiguration is
// served once both are published. The other tests use the fake.
func TestWiringRealClient(t *testing.T) {
	ctx := testCtx(t)
	mgmt := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	cfg, err := bootstrap.Parse(e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{mgmt.Address},
		NodeID:                             "node-" + testutils.RunName(t),
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
	}))
	if err != nil {
		t.Fatal(err)
	}
	client, err := xdsclient.New(cfg, xdsclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close) // after the listener's cleanup, registered later
	env := newEnvNoListener(t)
	if env.name, err = cfg.ServerListenerName(env.lis.addr.AddrPort()); err != nil {
		t.Fatal(err)
	}
	env.l = env.newListener(t, client, envOptions{})

	if err := mgmt.Update(ctx, e2e.Resources{
		Listeners: []*listenerpb.Listener{testListener(env, chainSpec{name: "x", rdsName: "rds-1", isDefault: true})},
		Routes:    []*routepb.RouteConfiguration{e2e.DefaultRouteConfig("rds-1")},
	}); err != nil {
		t.Fatal(err)
	}
	env.waitMode(ctx, t, connectivity.ServingModeServing)
	unaryOK(ctx, t, env.dial(t))
}
