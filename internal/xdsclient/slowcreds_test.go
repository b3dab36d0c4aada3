package xdsclient_test

import (
	"fmt"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// gatedCreds are registered channel credentials whose Build blocks while a
// test holds them.
var gatedCreds = testutils.RegisterGatedCreds("xdsclient-test-gated")

// Channel credentials that are slow to build (a registered type, or
// google_default asking a metadata server) do not stall the client: while
// those of one authority's management server are being built, a watch of
// another server's resource is delivered; the slow channel connects once
// its credentials are built.
func TestSlowChannelCredsDoNotBlockClient(t *testing.T) {
	ctx := testContext(t)
	top := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	slow := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	const slowName = "xdstp://slow.example.com/envoy.config.listener.v3.Listener/s"
	lTop, lSlow := testListener("top", 1), testListener(slowName, 2)
	update(ctx, t, top, e2e.Resources{Listeners: []*listenerpb.Listener{lTop}})
	update(ctx, t, slow, e2e.Resources{Listeners: []*listenerpb.Listener{lSlow}})

	cfg := parseWithRegistry(t, fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}]}],
		"authorities": {"slow.example.com": {"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": %q}]}]}},
		"node": {"id": "slow-creds"}}`, top.Address, slow.Address, gatedCreds.Name()))
	c, err := xdsclient.New(cfg, xdsclient.Options{Backoff: fastBackoff, ResourceTypes: []*xdsclient.ResourceType{listenerType}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	entered, release := gatedCreds.Hold(t)
	defer release() // before Close, which waits for the channel's goroutine

	wSlow := newTestWatcher()
	defer c.WatchResource(listenerType, slowName, wSlow)()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the slow management server's credentials were never built")
	}
	wTop := newTestWatcher()
	defer c.WatchResource(listenerType, "top", wTop)()
	wTop.wantData(ctx, t, lTop) // while the other credentials are still being built
	release()
	wSlow.wantData(ctx, t, lSlow)
}
