package xdsresource

import (
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	insecurepb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/insecure/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// twoServers parses a bootstrap of two management servers, the first
// trusted (trusted_xds_server) and the second not.
func twoServers(t *testing.T) *bootstrap.Config {
	t.Helper()
	cfg, err := bootstrap.Parse([]byte(`{
		"xds_servers": [
			{"server_uri": "trusted.example:443", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3", "trusted_xds_server"]},
			{"server_uri": "fallback.example:443", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}
		],
		"node": {"id": "n"}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func decodeRoutesFrom(cfg *bootstrap.Config, server *bootstrap.ServerConfig, b []byte) (*RouteConfig, error) {
	_, d, err := decodeRouteConfig(xdsclient.DecodeInput{Resource: &anypb.Any{TypeUrl: RouteConfigTypeURL, Value: b}, Bootstrap: cfg, Server: server})
	if err != nil {
		return nil, err
	}
	return d.(*RouteConfig), nil
}

// TestRouteConfigEqualUnderTrust: a RouteConfiguration whose overrides
// did not depend on the sending server's trust is Equal to the same bytes
// from a server of another trust (nothing to re-apply on an A71 fallback);
// one whose overrides did (its envKey) is not, so that its watchers hear
// of the side channel judged again.
func TestRouteConfigEqualUnderTrust(t *testing.T) {
	cfg := twoServers(t)
	b, err := proto.Marshal(e2e.DefaultRouteConfig("route-1"))
	if err != nil {
		t.Fatal(err)
	}
	trusted, err := decodeRoutesFrom(cfg, cfg.XDSServers[0], b)
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := decodeRoutesFrom(cfg, cfg.XDSServers[1], b)
	if err != nil {
		t.Fatal(err)
	}
	if trusted.envKey != "" || untrusted.envKey != "" {
		t.Errorf("envKeys %q, %q of routes without a trust-dependent override; want none", trusted.envKey, untrusted.envKey)
	}
	if !trusted.Equal(untrusted) {
		t.Errorf("the same routes without a trust-dependent override from servers of either trust are not Equal, want Equal")
	}

	a := &RouteConfig{Name: "r", Router: trusted.Router, raw: trusted.raw, envKey: "trusted"}
	c := &RouteConfig{Name: "r", Router: trusted.Router, raw: trusted.raw, envKey: "untrusted"}
	if a.Equal(c) || c.Equal(a) {
		t.Errorf("the same bytes whose overrides were parsed under trust %q and %q are Equal, want not", a.envKey, c.envKey)
	}
	if !a.Equal(&RouteConfig{raw: trusted.raw, envKey: "trusted"}) {
		t.Errorf("the same bytes under the same trust are not Equal, want Equal")
	}
}

// TestRouteConfigOverrideTrust: an ext_proc override in an RDS
// RouteConfiguration that names its own grpc_service is judged by the
// trust of the server that sent it (gRFC A102), as a Listener's filters
// are: accepted with its credentials from a trusted server, NACKed from
// one that is not when the bootstrap does not allow the target.
func TestRouteConfigOverrideTrust(t *testing.T) {
	creds, err := anypb.New(&insecurepb.InsecureCredentials{})
	if err != nil {
		t.Fatal(err)
	}
	override, err := anypb.New(&extprocpb.ExtProcPerRoute{Override: &extprocpb.ExtProcPerRoute_Overrides{Overrides: &extprocpb.ExtProcOverrides{
		GrpcService: &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{
			TargetUri: "127.0.0.1:9292", ChannelCredentialsPlugin: []*anypb.Any{creds},
		}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	rc := e2e.DefaultRouteConfig("route-1")
	rc.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{"extproc": override}
	b, err := proto.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := twoServers(t)
	trusted, err := decodeRoutesFrom(cfg, cfg.XDSServers[0], b)
	if err != nil {
		t.Fatalf("from the trusted server: %v, want it accepted", err)
	}
	if trusted.envKey != "trusted" {
		t.Errorf("envKey = %q, want %q: the override depends on the trust", trusted.envKey, "trusted")
	}
	_, err = decodeRoutesFrom(cfg, cfg.XDSServers[1], b)
	if err == nil || !strings.Contains(err.Error(), "allowed_grpc_services") || !strings.Contains(err.Error(), "127.0.0.1:9292") {
		t.Errorf("the same bytes from the server that is not trusted: %v; want a NACK naming the target and allowed_grpc_services", err)
	}
}
