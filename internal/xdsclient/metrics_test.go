package xdsclient_test

import (
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"go.opentelemetry.io/otel/attribute"
)

// The client records the gRFC A78 metrics in the MeterProvider of its
// Options: valid and invalid resource updates, connected, resources by cache
// state, and server failures; grpc.target is the client's scope.
func TestMetrics(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	mr := testutils.NewMetricReader(t)
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{MeterProvider: mr.Provider})

	target := attribute.String("grpc.target", "#server")
	server := attribute.String("grpc.xds.server", ms.Address)
	lisType := attribute.String("grpc.xds.resource_type", "envoy.config.listener.v3.Listener")
	state := func(s string) attribute.KeyValue { return attribute.String("grpc.xds.cache_state", s) }
	old := attribute.String("grpc.xds.authority", "#old")

	a, b := testListener("a", 1), testListener("b", 2)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{a, b}})
	wa, wb, wr := newTestWatcher(), newTestWatcher(), newTestWatcher()
	defer c.WatchResource(listenerType, "a", wa)()
	defer c.WatchResource(listenerType, "b", wb)()
	defer c.WatchResource(listenerType, "requested", wr)()
	wa.wantData(ctx, t, a)
	wb.wantData(ctx, t, b)
	mr.WaitForValue(ctx, t, "grpc.xds_client.connected", 1, target, server)
	mr.WaitForValue(ctx, t, "grpc.xds_client.resources", 2, target, old, state("acked"), lisType)
	mr.WaitForValue(ctx, t, "grpc.xds_client.resources", 1, target, old, state("requested"), lisType)

	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{a, badListener("b")}})
	wb.wantError(ctx, t, "ambient", xdsclient.KindNACK)
	// Two responses with a and b each: three valid resources, one invalid
	// (a response may also have carried a alone before b was subscribed).
	valid, _ := mr.Value(t, "grpc.xds_client.resource_updates_valid", target, server, lisType)
	if valid < 3 {
		t.Errorf("resource_updates_valid = %d, want at least 3", valid)
	}
	mr.WaitForValue(ctx, t, "grpc.xds_client.resource_updates_invalid", 1, target, server, lisType)
	mr.WaitForValue(ctx, t, "grpc.xds_client.resources", 1, target, old, state("nacked_but_cached"), lisType)

	ms.Stop()
	mr.WaitForValue(ctx, t, "grpc.xds_client.connected", 0, target, server)
	mr.WaitForValue(ctx, t, "grpc.xds_client.server_failure", 1, target, server)

	c.Close()
	if pts := mr.Points(t, "grpc.xds_client.resources"); len(pts) != 0 {
		t.Errorf("resources gauge after Close = %v, want no points", pts)
	}
}

// Without a MeterProvider, nothing is recorded and nothing breaks; a Pool
// gives the provider of the first GetWithMeterProvider to the client it
// creates, and later users share that client.
func TestPoolMeterProvider(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	cfg := parseBootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}, NodeID: "n"})
	first, second := testutils.NewMetricReader(t), testutils.NewMetricReader(t)
	p := xdsclient.NewPool(xdsclient.Options{ResourceTypes: []*xdsclient.ResourceType{listenerType}, Backoff: fastBackoff})
	c1, release1, err := p.GetWithMeterProvider(cfg, first.Provider)
	if err != nil {
		t.Fatal(err)
	}
	defer release1()
	c2, release2, err := p.GetWithMeterProvider(cfg, second.Provider)
	if err != nil {
		t.Fatal(err)
	}
	defer release2()
	if c1 != c2 {
		t.Fatal("the pool made two clients for one bootstrap")
	}
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{testListener("a", 1)}})
	w := newTestWatcher()
	defer c1.WatchResource(listenerType, "a", w)()
	w.wantData(ctx, t, testListener("a", 1))
	first.WaitForValue(ctx, t, "grpc.xds_client.resource_updates_valid", 1)
	if pts := second.Points(t, "grpc.xds_client.resource_updates_valid"); len(pts) != 0 {
		t.Errorf("second provider got %v, want nothing", pts)
	}
}

func parseBootstrap(t *testing.T, bo e2e.BootstrapOptions) *bootstrap.Config {
	t.Helper()
	cfg, err := bootstrap.Parse(e2e.Bootstrap(t, bo))
	if err != nil {
		t.Fatalf("bootstrap.Parse: %v", err)
	}
	return cfg
}
