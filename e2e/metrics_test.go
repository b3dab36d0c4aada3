package e2e_test

import (
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestMetrics drives a real server through connections while not serving,
// a Listener, a connection no filter chain matches, a drain, a NACK and a
// deletion, and reads the server's and the xDS client's metrics back
// through the OpenTelemetry SDK.
func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	mr := testutils.NewMetricReader(t)
	env := newTestEnv(t)
	s := env.newServer(t, xds.MeterProvider(mr.Provider), xds.DrainGraceTime(0))
	lis, _ := listen(t, "127.0.0.1")
	addr := lis.Addr()
	s.serveOn(lis)
	lisAttr := attribute.String("grpc.xds_server.listener", addr.String())
	notServing := attribute.String("grpc.xds_server.reason", "not_serving")
	noChain := attribute.String("grpc.xds_server.reason", "no_filter_chain")

	// Not serving before any configuration: connections are closed.
	expectClosedNoBytes(t, addr, "127.0.0.1")
	expectClosedNoBytes(t, addr, "127.0.0.1")
	mr.WaitForValue(ctx, t, "grpc.xds_server.connections.rejected", 2, lisAttr, notServing)
	mr.WaitForValue(ctx, t, "grpc.xds_server.connections.accepted", 2, lisAttr)
	if v, _ := mr.Value(t, "grpc.xds_server.serving", lisAttr); v != 0 {
		t.Errorf("grpc.xds_server.serving = %d before any Listener, want 0", v)
	}

	// Serving, with one chain for 127.0.0.1 only.
	onlyLocal := &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.1/32")}}
	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "A", match: onlyLocal}}, nil)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	mr.WaitForValue(ctx, t, "grpc.xds_server.serving", 1, lisAttr)
	c := newClient(t, addr, "127.0.0.1", 0)
	waitForCode(ctx, t, "RPC on chain A", codes.OK, c.emptyCallNoOpts)
	expectClosedNoBytes(t, addr, "127.0.0.3")
	mr.WaitForValue(ctx, t, "grpc.xds_server.connections.rejected", 1, lisAttr, noChain)
	if v, _ := mr.Value(t, "grpc.xds_server.drains", lisAttr); v != 0 {
		t.Errorf("grpc.xds_server.drains = %d before any drain, want 0", v)
	}

	// A Listener update that changes the chain drains the connection.
	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "B", match: onlyLocal}}, nil)}, nil)
	c.waitForChain(ctx, t, "B", "A", "B")
	mr.WaitForValue(ctx, t, "grpc.xds_server.drains", 1, lisAttr)

	// A NACK: the xDS client counts an invalid Listener; the server keeps
	// serving.
	bad := testListener(addr, []chainSpec{{name: "C"}}, nil)
	bad.ListenerFilters = []*listenerpb.ListenerFilter{{Name: "unsupported"}}
	env.update(ctx, t, []*listenerpb.Listener{bad}, nil)
	target := attribute.String("grpc.target", "#server")
	lisType := attribute.String("grpc.xds.resource_type", "envoy.config.listener.v3.Listener")
	server := attribute.String("grpc.xds.server", env.ms.Address)
	mr.WaitForValue(ctx, t, "grpc.xds_client.resource_updates_invalid", 1, target, server, lisType)
	mr.WaitForValue(ctx, t, "grpc.xds_client.resources", 1, target, lisType, attribute.String("grpc.xds.cache_state", "nacked_but_cached"))
	mr.WaitForValue(ctx, t, "grpc.xds_client.connected", 1, target, server)
	if v, _ := mr.Value(t, "grpc.xds_client.resource_updates_valid", target, server, lisType); v < 2 {
		t.Errorf("grpc.xds_client.resource_updates_valid = %d, want at least 2", v)
	}

	// The Listener is deleted: not serving, the live connection drained.
	env.update(ctx, t, nil, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeNotServing)
	mr.WaitForValue(ctx, t, "grpc.xds_server.serving", 0, lisAttr)
	mr.WaitForValue(ctx, t, "grpc.xds_server.drains", 2, lisAttr)
	expectClosedNoBytes(t, addr, "127.0.0.1")
	mr.WaitForValue(ctx, t, "grpc.xds_server.connections.rejected", 3, lisAttr, notServing)
}

// Without MeterProvider, nothing is recorded and the server works as usual
// (the recorders are nil).
func TestNoMeterProvider(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	waitForCode(ctx, t, "RPC", codes.OK, c.emptyCallNoOpts)
}
