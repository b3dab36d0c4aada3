package xdsresource_test

import (
	"fmt"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extauthzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	insecurecredspb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/insecure/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/httpfilter/extauthz"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

// authzTarget is the ext_authz target of trustListener.
const authzTarget = "127.0.0.1:9191"

// trustBootstrap parses a bootstrap of two management servers, the first
// trusted (trusted_xds_server) and the second not, whose
// allowed_grpc_services lists allowed.
func trustBootstrap(t *testing.T, allowed ...string) *bootstrap.Config {
	t.Helper()
	entries := make([]string, 0, len(allowed))
	for _, a := range allowed {
		entries = append(entries, fmt.Sprintf(`%q: {"channel_creds": [{"type": "insecure"}]}`, a))
	}
	cfg, err := bootstrap.Parse([]byte(`{
		"xds_servers": [
			{"server_uri": "trusted.example:443", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3", "trusted_xds_server"]},
			{"server_uri": "fallback.example:443", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}
		],
		"node": {"id": "n"},
		"allowed_grpc_services": {` + strings.Join(entries, ",") + `}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.XDSServers[0].Trusted || cfg.XDSServers[1].Trusted {
		t.Fatalf("servers trusted: %v, %v; want true, false", cfg.XDSServers[0].Trusted, cfg.XDSServers[1].Trusted)
	}
	return cfg
}

// trustListener is a Listener of two chains: "authz", whose
// HttpConnectionManager runs ext_authz calling authzTarget with the
// credentials a trusted server may send (channel_credentials_plugin), and
// "plain", with the router alone.
func trustListener(t *testing.T) []byte {
	t.Helper()
	l := e2e.DefaultServerListener("127.0.0.1", 8080, "")
	plain := l.FilterChains[0]
	plain.Name = "plain"
	plain.FilterChainMatch = &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}}
	creds, err := anypb.New(&insecurecredspb.InsecureCredentials{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := anypb.New(&extauthzpb.ExtAuthz{Services: &extauthzpb.ExtAuthz_GrpcService{GrpcService: &corepb.GrpcService{
		TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: &corepb.GrpcService_GoogleGrpc{
			TargetUri: authzTarget, ChannelCredentialsPlugin: []*anypb.Any{creds},
		}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	hcm := &hcmpb.HttpConnectionManager{}
	if err := plain.Filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	hcm.HttpFilters = append([]*hcmpb.HttpFilter{{Name: "authz", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: cfg}}}, hcm.HttpFilters...)
	authz := proto.Clone(plain).(*listenerpb.FilterChain)
	authz.Name = "authz"
	authz.FilterChainMatch = nil
	authz.Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)}
	l.FilterChains = []*listenerpb.FilterChain{authz, plain}
	b, err := proto.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeFrom decodes b as the client does for a Listener that server sent
// under cfg, with prev as the previous value.
func decodeFrom(cfg *bootstrap.Config, server *bootstrap.ServerConfig, b []byte, prev xdsclient.ResourceData) (*xdsresource.Listener, error) {
	in := xdsclient.DecodeInput{Resource: &anypb.Any{TypeUrl: xdsresource.ListenerTypeURL, Value: b}, Bootstrap: cfg, Server: server, Previous: prev}
	_, d, err := xdsresource.ListenerType.Decode(in)
	if err != nil {
		return nil, err
	}
	return d.(*xdsresource.Listener), nil
}

// credsOf describes the ext_authz filter of the Listener's chain "authz":
// its target and where its credentials come from.
func credsOf(t *testing.T, l *xdsresource.Listener) string {
	t.Helper()
	for _, c := range l.Table.Chains() {
		if c.Name == "authz" {
			return extauthz.Filter{}.Describe(c.HCM.Filters[0].Config)
		}
	}
	t.Fatal("no chain authz")
	return ""
}

// TestListenerTrustRecheckedOnServerChange: gRFC A102's trust belongs to
// the server that sent the resource, not to its bytes. A Listener whose
// ext_authz chain a trusted server sent, then sent byte for byte by a
// server that is not trusted (an A71 fallback), is judged as that
// server's: NACKed when allowed_grpc_services lacks the target, and
// otherwise decoded with the entry's credentials, a change its watchers
// must hear of. A chain with no side channel is reused across the change,
// and the same bytes from a server of the same trust reuse every chain.
func TestListenerTrustRecheckedOnServerChange(t *testing.T) {
	b := trustListener(t)

	cfg := trustBootstrap(t)
	trusted, untrusted := cfg.XDSServers[0], cfg.XDSServers[1]
	first, err := decodeFrom(cfg, trusted, b, nil)
	if err != nil {
		t.Fatalf("from the trusted server: %v, want it accepted", err)
	}
	if d := credsOf(t, first); !strings.Contains(d, "channel_credentials_plugin") {
		t.Errorf("from the trusted server: %s; want the resource's credentials", d)
	}
	_, err = decodeFrom(cfg, untrusted, b, first)
	if err == nil || !strings.Contains(err.Error(), "allowed_grpc_services") || !strings.Contains(err.Error(), authzTarget) {
		t.Errorf("the same bytes from the server that is not trusted: %v; want a NACK naming %s and allowed_grpc_services", err, authzTarget)
	}

	cfg = trustBootstrap(t, authzTarget)
	trusted, untrusted = cfg.XDSServers[0], cfg.XDSServers[1]
	if first, err = decodeFrom(cfg, trusted, b, nil); err != nil {
		t.Fatal(err)
	}
	second, err := decodeFrom(cfg, untrusted, b, first)
	if err != nil {
		t.Fatalf("the same bytes from the server that is not trusted, target allowed: %v, want it accepted", err)
	}
	if d := credsOf(t, second); !strings.Contains(d, "allowed_grpc_services") {
		t.Errorf("the same bytes from the server that is not trusted: %s; want the bootstrap's allowed_grpc_services credentials", d)
	}
	if first.Equal(second) || second.Equal(first) {
		t.Error("the Listener from the server that is not trusted is Equal to the trusted server's: its watchers would keep the trusted server's credentials")
	}
	c1, c2 := first.Table.Chains(), second.Table.Chains()
	if c1[0].ID == c2[0].ID {
		t.Error("chain authz kept its ID across the change of trust: the server would keep serving it with the trusted server's credentials")
	}
	if c1[1] != c2[1] {
		t.Error("chain plain, which has no side channel, was compiled again after the change of trust; want it reused")
	}

	// Back to a trusted server, the same bytes: every chain of a
	// Listener from a server of the same trust is reused.
	other := *trusted
	third, err := decodeFrom(cfg, &other, b, first)
	if err != nil {
		t.Fatal(err)
	}
	if c3 := third.Table.Chains(); c3[0] != c1[0] || c3[1] != c1[1] || !third.Equal(first) {
		t.Error("the same bytes from a server of the same trust were compiled again; want every chain reused")
	}
}
