package e2e_test

// gRFC A102's trust across an A71 fallback: a Listener's ext_authz chain is
// judged as the server that sent it last, even when that server sends the
// bytes a trusted server sent before.

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	insecurecredspb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/insecure/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/admin"
	"github.com/proxyless-grpc/xds/csds"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// trustFallback is a server whose bootstrap lists a trusted primary
// management server and a fallback that is not trusted, serving a Listener
// whose ext_authz chain the primary sent with its own credentials
// (channel_credentials_plugin).
type trustFallback struct {
	authz              *authzServer
	primary, secondary *e2e.ManagementServer
	nodeID             string
	server             *testServer
	addr               net.Addr
	listener           *listenerpb.Listener // the primary's, ACKed and serving
	page               string               // the server's status page
}

// startTrustFallback starts the servers; the bootstrap's
// allowed_grpc_services lists the authorization server when allow is set.
func startTrustFallback(ctx context.Context, t *testing.T, allow bool) *trustFallback {
	t.Helper()
	f := &trustFallback{
		authz:     startAuthzServer(t),
		primary:   e2e.StartManagementServer(t, e2e.ManagementServerOptions{}),
		secondary: e2e.StartManagementServer(t, e2e.ManagementServerOptions{}),
		nodeID:    "node-" + testutils.RunName(t),
	}
	type server struct {
		URI      string            `json:"server_uri"`
		Creds    []json.RawMessage `json:"channel_creds"`
		Features []string          `json:"server_features"`
	}
	insecure := []json.RawMessage{json.RawMessage(`{"type": "insecure"}`)}
	b := map[string]any{
		"xds_servers": []server{
			{URI: f.primary.Address, Creds: insecure, Features: []string{"xds_v3", "trusted_xds_server"}},
			{URI: f.secondary.Address, Creds: insecure, Features: []string{"xds_v3"}},
		},
		"node":                                   map[string]string{"id": f.nodeID},
		"server_listener_resource_name_template": e2e.ServerListenerNameTemplate,
	}
	if allow {
		b["allowed_grpc_services"] = map[string]any{f.authz.addr: map[string]any{"channel_creds": insecure}}
	}
	bootstrap, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	env := &testEnv{ms: f.primary, nodeID: f.nodeID, bootstrap: bootstrap}

	cfg := extAuthz(f.authz.addr)
	cfg.GetGrpcService().GetGoogleGrpc().ChannelCredentialsPlugin = []*anypb.Any{anyOf(t, &insecurecredspb.InsecureCredentials{})}
	listener := authzListener(t, cfg, allRoutes("routes"))
	f.server, f.addr = startServing(ctx, t, env, listener, nil)
	f.listener = listener(f.addr)
	hs := httptest.NewServer(admin.NewStatusHandler(f.server.GRPCServer))
	t.Cleanup(hs.Close)
	f.page = hs.URL
	waitForText(ctx, t, f.page, "credentials: the trusted management server's (channel_credentials_plugin)")
	if err := rpcResult(ctx, connected(ctx, t, f.addr), "EmptyCall"); err != nil || len(f.authz.taken()) != 1 {
		t.Fatalf("the trusted primary's ext_authz chain: %v; want OK after a Check", err)
	}
	return f
}

// fallBack makes the server take its Listeners from the secondary: the
// secondary has the primary's Listener, byte for byte, and one for another
// address; the primary stops, and the server starts serving on that
// address, a Listener it has not cached, so the xDS client falls back to
// the secondary (gRFC A71), which sends both.
func (f *trustFallback) fallBack(ctx context.Context, t *testing.T) {
	t.Helper()
	lis2, _ := listen(t, "127.0.0.1")
	other := simpleListener(lis2.Addr())
	if err := f.secondary.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{f.listener, other}}); err != nil {
		t.Fatal(err)
	}
	f.primary.Stop()
	f.server.serveOn(lis2)
	f.server.modes.wait(ctx, t, lis2.Addr(), connectivity.ServingModeServing)
}

// csdsListener returns the CSDS view of the server's Listener.
func (f *trustFallback) csdsListener(ctx context.Context, t *testing.T) *csdspb.ClientConfig_GenericXdsConfig {
	t.Helper()
	s, err := csds.NewClientStatusDiscoveryServer()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := s.FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range resp.GetConfig() {
		if cfg.GetNode().GetId() != f.nodeID {
			continue
		}
		for _, g := range cfg.GetGenericXdsConfigs() {
			if g.GetTypeUrl() == listenerTypeURL && g.GetName() == f.listener.GetName() {
				return g
			}
		}
	}
	t.Fatalf("CSDS has no Listener %q for node %q", f.listener.GetName(), f.nodeID)
	return nil
}

// TestTrustFallback_NotAllowedIsNACKed: after the fallback, the Listener
// the trusted primary sent, sent byte for byte by the secondary, which is
// not trusted, is NACKed: its ext_authz target is not in
// allowed_grpc_services. CSDS says NACKED with the reason, and the
// primary's Listener keeps serving (gRFC A36).
func TestTrustFallback_NotAllowedIsNACKed(t *testing.T) {
	ctx := testContext(t)
	f := startTrustFallback(ctx, t, false)
	f.fallBack(ctx, t)

	isNACK, isACK := e2e.IsNACK(listenerTypeURL), e2e.IsACK(listenerTypeURL, "1")
	nack, err := f.secondary.WaitForRequest(ctx, func(r *discoverypb.DiscoveryRequest) bool { return isNACK(r) || isACK(r) })
	if err != nil {
		t.Fatalf("no answer to the secondary: %v", err)
	}
	if !isNACK(nack) {
		t.Fatal("the secondary, not trusted, got an ACK of the Listener it sent as the trusted primary did: its ext_authz target was not checked against allowed_grpc_services")
	}
	if d := nack.GetErrorDetail().GetMessage(); !strings.Contains(d, "allowed_grpc_services") || !strings.Contains(d, f.authz.addr) || !strings.Contains(d, f.listener.GetName()) {
		t.Errorf("NACK %q does not name the Listener, the target and allowed_grpc_services", d)
	}
	g := f.csdsListener(ctx, t)
	if g.GetClientStatus() != adminpb.ClientResourceStatus_NACKED || !strings.Contains(g.GetErrorState().GetDetails(), "allowed_grpc_services") {
		t.Errorf("CSDS: %v, error state %q; want NACKED naming allowed_grpc_services", g.GetClientStatus(), g.GetErrorState().GetDetails())
	}
	if err := rpcResult(ctx, connected(ctx, t, f.addr), "EmptyCall"); err != nil || len(f.authz.taken()) != 1 {
		t.Errorf("after the NACK: %v; want OK after a Check, the primary's Listener serving", err)
	}
}

// TestTrustFallback_AllowedUsesEntryCredentials: with the target in
// allowed_grpc_services, the secondary's copy is ACKed, and the chain is
// served with the bootstrap entry's credentials, no longer the ones the
// trusted primary sent in the resource.
func TestTrustFallback_AllowedUsesEntryCredentials(t *testing.T) {
	ctx := testContext(t)
	f := startTrustFallback(ctx, t, true)
	f.fallBack(ctx, t)

	if _, err := f.secondary.WaitForRequest(ctx, e2e.IsACK(listenerTypeURL, "1")); err != nil {
		t.Fatalf("no ACK to the secondary: %v", err)
	}
	if g := f.csdsListener(ctx, t); g.GetClientStatus() != adminpb.ClientResourceStatus_ACKED {
		t.Errorf("CSDS: %v, error state %v; want ACKED", g.GetClientStatus(), g.GetErrorState())
	}
	waitForText(ctx, t, f.page, "credentials: the bootstrap's allowed_grpc_services")
	if err := rpcResult(ctx, connected(ctx, t, f.addr), "EmptyCall"); err != nil || len(f.authz.taken()) != 1 {
		t.Errorf("after the fallback: %v; want OK after a Check", err)
	}
}
