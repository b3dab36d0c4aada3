package csds_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/csds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	pubxdsclient "github.com/proxyless-grpc/xds/xdsclient"
)

// TestDependencies: the CSDS service builds on the xDS client, not on the
// packages that interpret resources, and not on test helpers.
func TestDependencies(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/csds",
		mod+"/internal/filterchain", mod+"/internal/routing", mod+"/internal/xdsresource",
		mod+"/internal/httpfilter", mod+"/rbac", mod+"/internal/testutils", "testing")
}

// An ACKed Listener and RouteConfiguration are reported with their
// versions, the resources as received and when they were received, in the
// ClientConfig of the server's client: client_scope "#server", the node as
// sent to the management server, generic_xds_configs only. The answer stays
// the same once the management server is down (cached configuration).
func TestACKedListenerAndRoute(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	env := newTestEnv(t)
	cl := startCSDS(t)
	mr := testutils.NewMetricReader(t)
	_, addrs := env.serve(t, 1, nil, xds.MeterProvider(mr.Provider))
	lisName := e2e.ServerListenerName("127.0.0.1", uint32(addrs[0].Port))
	lis := e2e.DefaultServerListener("127.0.0.1", uint32(addrs[0].Port), "route-1")
	route := e2e.DefaultRouteConfig("route-1")
	before := time.Now()
	if err := env.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{lis}, Routes: []*routepb.RouteConfiguration{route}}); err != nil {
		t.Fatal(err)
	}
	check := func(cfg *csdspb.ClientConfig) {
		t.Helper()
		if got, want := cfg.GetClientScope(), "#server"; got != want {
			t.Errorf("client_scope = %q, want %q", got, want)
		}
		if !proto.Equal(cfg.GetNode(), env.node(t)) {
			t.Errorf("node = %v, want %v", cfg.GetNode(), env.node(t))
		}
		if len(cfg.GetXdsConfig()) != 0 {
			t.Errorf("deprecated xds_config is set: %v", cfg.GetXdsConfig())
		}
		got := byResource(cfg)
		if len(got) != 2 {
			t.Errorf("got %d resources, want 2: %v", len(got), cfg.GetGenericXdsConfigs())
		}
		for k, want := range map[resourceKey]proto.Message{{listenerURL, lisName}: lis, {routeURL, "route-1"}: route} {
			g := got[k]
			if g.GetVersionInfo() != "1" || g.GetClientStatus() != adminpb.ClientResourceStatus_ACKED || g.GetErrorState() != nil {
				t.Errorf("%v: version %q status %v error %v, want version 1 ACKED, no error state", k, g.GetVersionInfo(), g.GetClientStatus(), g.GetErrorState())
			}
			m := proto.Clone(want)
			proto.Reset(m)
			if err := g.GetXdsConfig().UnmarshalTo(m); err != nil || !proto.Equal(m, want) {
				t.Errorf("%v: xds_config = %v (%v), want %v", k, m, err, want)
			}
			if lu := g.GetLastUpdated().AsTime(); lu.Before(before.Add(-time.Second)) || lu.After(time.Now()) {
				t.Errorf("%v: last_updated %v, want between %v and now", k, lu, before)
			}
		}
	}
	cfg := waitForStatuses(ctx, t, cl, env.nodeID, map[resourceKey]adminpb.ClientResourceStatus{
		{listenerURL, lisName}: adminpb.ClientResourceStatus_ACKED,
		{routeURL, "route-1"}:  adminpb.ClientResourceStatus_ACKED,
	})
	check(cfg)

	// The node is the one the management server received.
	first, err := env.ms.WaitForRequest(ctx, func(r *discoveryRequest) bool { return r.GetNode() != nil })
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(cfg.GetNode(), first.GetNode()) {
		t.Errorf("node = %v, want the one sent: %v", cfg.GetNode(), first.GetNode())
	}

	env.ms.Stop()
	// The client has seen its stream fail once its connected gauge drops.
	mr.WaitForValue(ctx, t, "grpc.xds_client.connected", 0)
	resp, err := cl.FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
	if err != nil {
		t.Fatalf("FetchClientStatus with the management server down: %v", err)
	}
	check(configOf(resp, env.nodeID))
}

// A NACKed Listener keeps its last good version and gets the error state
// (rejected version, reason, time); a valid Listener of the same response is
// applied and shows the same error state (gRFC A40 "continue after first
// error").
func TestNACKErrorState(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	env := newTestEnv(t)
	cl := startCSDS(t)
	_, addrs := env.serve(t, 2, nil)
	good := e2e.DefaultServerListener("127.0.0.1", uint32(addrs[0].Port), "")
	other := e2e.DefaultServerListener("127.0.0.1", uint32(addrs[1].Port), "")
	if err := env.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{good, other}}); err != nil {
		t.Fatal(err)
	}
	kGood, kBad := resourceKey{listenerURL, good.GetName()}, resourceKey{listenerURL, other.GetName()}
	waitForStatuses(ctx, t, cl, env.nodeID, map[resourceKey]adminpb.ClientResourceStatus{
		kGood: adminpb.ClientResourceStatus_ACKED, kBad: adminpb.ClientResourceStatus_ACKED,
	})

	bad := proto.Clone(other).(*listenerpb.Listener)
	bad.ListenerFilters = []*listenerpb.ListenerFilter{{Name: "not-supported"}}
	good2 := proto.Clone(good).(*listenerpb.Listener)
	good2.FilterChains[0].Name = "renamed"
	before := time.Now()
	if err := env.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{good2, bad}}); err != nil {
		t.Fatal(err)
	}
	cfg := waitForStatuses(ctx, t, cl, env.nodeID, map[resourceKey]adminpb.ClientResourceStatus{
		kGood: adminpb.ClientResourceStatus_ACKED, kBad: adminpb.ClientResourceStatus_NACKED,
	})
	got := byResource(cfg)
	for _, c := range []struct {
		k           resourceKey
		version     string
		xdsConfig   proto.Message
		description string
	}{
		{kBad, "1", other, "the NACKed Listener keeps version 1"},
		{kGood, "2", good2, "the valid Listener of the rejected response is applied"},
	} {
		g := got[c.k]
		if g.GetVersionInfo() != c.version {
			t.Errorf("%s: version_info %q, want %q", c.description, g.GetVersionInfo(), c.version)
		}
		l := &listenerpb.Listener{}
		if err := g.GetXdsConfig().UnmarshalTo(l); err != nil || !proto.Equal(l, c.xdsConfig) {
			t.Errorf("%s: xds_config %v, want %v", c.description, l, c.xdsConfig)
		}
		es := g.GetErrorState()
		if es.GetVersionInfo() != "2" || !strings.Contains(es.GetDetails(), "listener_filters") ||
			es.GetLastUpdateAttempt().AsTime().Before(before.Add(-time.Second)) {
			t.Errorf("%s: error_state %v, want rejected version 2, a reason naming listener_filters, a recent time", c.description, es)
		}
	}
	if !proto.Equal(got[kGood].GetErrorState(), got[kBad].GetErrorState()) {
		t.Errorf("error states differ: %v vs %v, want the response's on both", got[kGood].GetErrorState(), got[kBad].GetErrorState())
	}
}

// A Listener that does not arrive is REQUESTED, and DOES_NOT_EXIST once the
// resource timer fires.
func TestRequestedThenDoesNotExist(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	env := newTestEnv(t)
	cl := startCSDS(t)
	pool := xdsclient.NewPool(xdsclient.Options{WatchExpiryTimeout: 500 * time.Millisecond})
	_, addrs := env.serve(t, 1, nil, xds.ClientPool(xdsclient.WrapPool(pool).(*pubxdsclient.Pool)))
	k := resourceKey{listenerURL, e2e.ServerListenerName("127.0.0.1", uint32(addrs[0].Port))}
	cfg := waitForStatuses(ctx, t, cl, env.nodeID, map[resourceKey]adminpb.ClientResourceStatus{k: adminpb.ClientResourceStatus_REQUESTED})
	if g := byResource(cfg)[k]; g.GetVersionInfo() != "" || g.GetXdsConfig() != nil || g.GetLastUpdated() != nil || g.GetErrorState() != nil {
		t.Errorf("REQUESTED resource: %v, want no version, config, time or error state", g)
	}
	waitForStatuses(ctx, t, cl, env.nodeID, map[resourceKey]adminpb.ClientResourceStatus{k: adminpb.ClientResourceStatus_DOES_NOT_EXIST})
}

// The streaming method answers each request of a stream, with the state of
// the moment; a request with node_matchers ends it with INVALID_ARGUMENT,
// and the unary method refuses one too (gRFC A40).
func TestStreamAndNodeMatchers(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	env := newTestEnv(t)
	cl := startCSDS(t)
	_, addrs := env.serve(t, 1, nil)
	lis := e2e.DefaultServerListener("127.0.0.1", uint32(addrs[0].Port), "")
	k := resourceKey{listenerURL, lis.GetName()}
	waitForStatuses(ctx, t, cl, env.nodeID, map[resourceKey]adminpb.ClientResourceStatus{k: adminpb.ClientResourceStatus_REQUESTED})

	stream, err := cl.StreamClientStatus(ctx)
	if err != nil {
		t.Fatalf("StreamClientStatus: %v", err)
	}
	ask := func() *csdspb.ClientConfig {
		t.Helper()
		if err := stream.Send(&csdspb.ClientStatusRequest{}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		return configOf(resp, env.nodeID)
	}
	if g := byResource(ask())[k]; g.GetClientStatus() != adminpb.ClientResourceStatus_REQUESTED {
		t.Fatalf("first answer: %v, want REQUESTED", g)
	}
	if err := env.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{lis}}); err != nil {
		t.Fatal(err)
	}
	testutils.WaitFor(ctx, t, "the stream to report the Listener ACKED", func() error {
		if g := byResource(ask())[k]; g.GetClientStatus() != adminpb.ClientResourceStatus_ACKED {
			return fmt.Errorf("status %v", g.GetClientStatus())
		}
		return nil
	})

	matchers := &csdspb.ClientStatusRequest{NodeMatchers: []*matcherpb.NodeMatcher{{NodeId: &matcherpb.StringMatcher{
		MatchPattern: &matcherpb.StringMatcher_Exact{Exact: env.nodeID},
	}}}}
	if _, err := cl.FetchClientStatus(ctx, matchers); status.Code(err) != codes.InvalidArgument {
		t.Errorf("FetchClientStatus with node_matchers: %v, want INVALID_ARGUMENT", err)
	}
	if err := stream.Send(matchers); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("stream answer to node_matchers: %v, want INVALID_ARGUMENT", err)
	}
}

// Every xDS client of the process is reported: that of a server with its own
// bootstrap contents and client pool as well as that of a server using the
// default pool, each with its own node (unlike grpc-go, which reports only
// its default pool).
func TestEveryClientReported(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	envA := newTestEnv(t)
	envB := newTestEnvFor(t, envA.ms, envA.nodeID+"-b")
	cl := startCSDS(t)
	_, addrsA := envA.serve(t, 1, nil)
	_, addrsB := envB.serve(t, 1, nil, xds.ClientPool(xdsclient.WrapPool(xdsclient.NewPool(xdsclient.Options{})).(*pubxdsclient.Pool)))
	kA := resourceKey{listenerURL, e2e.ServerListenerName("127.0.0.1", uint32(addrsA[0].Port))}
	kB := resourceKey{listenerURL, e2e.ServerListenerName("127.0.0.1", uint32(addrsB[0].Port))}
	cfgA := waitForStatuses(ctx, t, cl, envA.nodeID, map[resourceKey]adminpb.ClientResourceStatus{kA: adminpb.ClientResourceStatus_REQUESTED})
	cfgB := waitForStatuses(ctx, t, cl, envB.nodeID, map[resourceKey]adminpb.ClientResourceStatus{kB: adminpb.ClientResourceStatus_REQUESTED})
	if _, ok := byResource(cfgA)[kB]; ok {
		t.Errorf("server A's client reports server B's Listener")
	}
	if !proto.Equal(cfgB.GetNode(), envB.node(t)) || cfgB.GetClientScope() != "#server" {
		t.Errorf("server B's config: node %v scope %q, want %v and #server", cfgB.GetNode(), cfgB.GetClientScope(), envB.node(t))
	}
}

// CSDS registered on the xds.GRPCServer itself answers over that server's
// own listener once it serves.
func TestRegisterOnXDSServer(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	env := newTestEnv(t)
	serving := make(chan struct{}, 1)
	_, addrs := env.serve(t, 1, func(s *xds.GRPCServer) {
		if err := csds.Register(s); err != nil {
			t.Fatalf("csds.Register: %v", err)
		}
	}, xds.ServingModeCallback(func(_ net.Addr, a xds.ServingModeChangeArgs) {
		if a.Mode == connectivity.ServingModeServing {
			serving <- struct{}{}
		}
	}))
	lis := e2e.DefaultServerListener("127.0.0.1", uint32(addrs[0].Port), "")
	if err := env.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{lis}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-serving:
	case <-ctx.Done():
		t.Fatal("the xDS server did not start serving")
	}
	resp, err := dialCSDS(t, addrs[0]).FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
	if err != nil {
		t.Fatalf("FetchClientStatus through the xDS server: %v", err)
	}
	g := byResource(configOf(resp, env.nodeID))[resourceKey{listenerURL, lis.GetName()}]
	if g.GetClientStatus() != adminpb.ClientResourceStatus_ACKED {
		t.Errorf("Listener status %v, want ACKED", g.GetClientStatus())
	}
}

// Register refuses nil; Close makes the service answer UNAVAILABLE.
func TestRegisterNilAndClose(t *testing.T) {
	if err := csds.Register(nil); err == nil {
		t.Error("Register(nil) succeeded, want an error")
	}
	s, err := csds.NewClientStatusDiscoveryServer()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.FetchClientStatus(context.Background(), &csdspb.ClientStatusRequest{}); err != nil {
		t.Errorf("FetchClientStatus: %v", err)
	}
	s.Close()
	s.Close()
	if _, err := s.FetchClientStatus(context.Background(), &csdspb.ClientStatusRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("FetchClientStatus after Close: %v, want UNAVAILABLE", err)
	}
}

// With the resource_timer_is_transient_error server feature, a Listener that
// does not arrive before the timer is reported TIMEOUT (gRFC A88).
func TestTimeout(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	env := newTestEnv(t)
	env.bootstrap = e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{env.ms.Address},
		NodeID:                             env.nodeID,
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		ServerFeatures:                     []string{xdsclient.ServerFeatureResourceTimerIsTransientError},
	})
	cl := startCSDS(t)
	pool := xdsclient.NewPool(xdsclient.Options{WatchExpiryTimeout: 100 * time.Millisecond})
	_, addrs := env.serve(t, 1, nil, xds.ClientPool(xdsclient.WrapPool(pool).(*pubxdsclient.Pool)))
	k := resourceKey{listenerURL, e2e.ServerListenerName("127.0.0.1", uint32(addrs[0].Port))}
	waitForStatuses(ctx, t, cl, env.nodeID, map[resourceKey]adminpb.ClientResourceStatus{k: adminpb.ClientResourceStatus_TIMEOUT})
}
