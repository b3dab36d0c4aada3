package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/controlplane"
)

// listenerNameTemplate is the bootstrap's server_listener_resource_name_template.
const listenerNameTemplate = "grpc/server?xds.resource.listening_address=%s"

// routeName is the RouteConfiguration the soak server's Listener names (RDS).
const routeName = "soak-routes"

// controlPlane is the soak's xDS management server (internal/controlplane:
// go-control-plane's ADS server over linear caches, in this process). It
// counts the ACKs and NACKs it receives; a NACK means the soak pushed a
// configuration the server refused, which fails the run.
type controlPlane struct {
	*controlplane.Server

	acks  atomic.Int64
	nacks atomic.Int64
	mu    sync.Mutex
	nack  string // the first NACK's error detail
}

func startControlPlane() (*controlPlane, error) {
	cp := &controlPlane{}
	srv, err := controlplane.Start(controlplane.Options{
		ForgetRequests: true, // a long run would keep every request
		OnStreamRequest: func(_ int64, req *discoverypb.DiscoveryRequest) {
			switch {
			case req.GetErrorDetail() != nil:
				if cp.nacks.Add(1) == 1 {
					cp.mu.Lock()
					cp.nack = fmt.Sprintf("%s version %q: %s", req.GetTypeUrl(), req.GetVersionInfo(), req.GetErrorDetail().GetMessage())
					cp.mu.Unlock()
				}
			case req.GetResponseNonce() != "":
				cp.acks.Add(1)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	cp.Server = srv
	return cp, nil
}

// firstNACK returns the error detail of the first NACK, if any.
func (cp *controlPlane) firstNACK() string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.nack
}

// push publishes l and rc, the whole configuration of the soak server.
func (cp *controlPlane) push(ctx context.Context, l *listenerpb.Listener, rc *routepb.RouteConfiguration) error {
	r := controlplane.Resources{}
	if l != nil {
		r.Listeners = []*listenerpb.Listener{l}
	}
	if rc != nil {
		r.Routes = []*routepb.RouteConfiguration{rc}
	}
	return cp.Update(ctx, r)
}

// bootstrapJSON is the xDS bootstrap (gRFC A27) of a server managed by the
// control plane at cpAddr.
func bootstrapJSON(cpAddr string) ([]byte, error) {
	type xdsServer struct {
		URI            string              `json:"server_uri"`
		ChannelCreds   []map[string]string `json:"channel_creds"`
		ServerFeatures []string            `json:"server_features"`
	}
	return json.Marshal(struct {
		XDSServers       []xdsServer       `json:"xds_servers"`
		Node             map[string]string `json:"node"`
		ListenerTemplate string            `json:"server_listener_resource_name_template"`
	}{
		XDSServers: []xdsServer{{
			URI:            cpAddr,
			ChannelCreds:   []map[string]string{{"type": "insecure"}},
			ServerFeatures: []string{"xds_v3"},
		}},
		Node:             map[string]string{"id": "soak-server"},
		ListenerTemplate: listenerNameTemplate,
	})
}

// listenerState is what varies between the Listeners the soak pushes.
type listenerState struct {
	// extra, if not 0, adds a filter chain that no connection of the soak
	// matches (source 192.0.2.0/24, TEST-NET-1), with this number in its
	// name and stat prefix: a Listener change that keeps the main chain,
	// so its connections are not drained.
	extra int
	// rbac is the generation of the main chain's RBAC filter config: a
	// change of it changes the chain, whose connections are drained.
	rbac int
}

// serverListener is the Listener of the soak server on addr: a main filter
// chain (RBAC filter, router; routes over RDS) and, with st.extra, a chain
// nothing matches.
func serverListener(addr *net.TCPAddr, st listenerState) *listenerpb.Listener {
	l := &listenerpb.Listener{
		Name: fmt.Sprintf(listenerNameTemplate, addr),
		Address: &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Address:       addr.IP.String(),
			PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: uint32(addr.Port)},
		}}},
		FilterChains: []*listenerpb.FilterChain{filterChain("main", "soak", nil, rbacFilter(st.rbac))},
	}
	if st.extra != 0 {
		match := &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{{
			AddressPrefix: "192.0.2.0", PrefixLen: wrapperspb.UInt32(24),
		}}}
		name := fmt.Sprintf("extra-%d", st.extra)
		l.FilterChains = append(l.FilterChains, filterChain(name, name, match))
	}
	return l
}

func filterChain(name, statPrefix string, match *listenerpb.FilterChainMatch, filters ...*hcmpb.HttpFilter) *listenerpb.FilterChain {
	hcm := &hcmpb.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
			RouteConfigName: routeName,
			ConfigSource: &corepb.ConfigSource{
				ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
				ResourceApiVersion:    corepb.ApiVersion_V3,
			},
		}},
		HttpFilters: append(filters, &hcmpb.HttpFilter{
			Name:       "router",
			ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerpb.Router{})},
		}),
	}
	return &listenerpb.FilterChain{
		Name:             name,
		FilterChainMatch: match,
		Filters: []*listenerpb.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}},
	}
}

// rbacFilter is an RBAC HTTP filter (gRFC A41) that never denies the load's
// RPCs, and differs for every gen (so that the server compiles a new policy
// each time): even generations ALLOW every RPC (plus a policy on a header
// the load never sends), odd ones DENY only RPCs with that header.
func rbacFilter(gen int) *hcmpb.HttpFilter {
	never := &rbacconfigpb.Policy{
		Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_Any{Any: true}}},
		Principals: []*rbacconfigpb.Principal{{Identifier: &rbacconfigpb.Principal_Header{Header: &routepb.HeaderMatcher{
			Name: "x-soak-never",
			HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{
				MatchPattern: &matcherpb.StringMatcher_Exact{Exact: fmt.Sprintf("gen-%d", gen)},
			}},
		}}}},
	}
	rules := &rbacconfigpb.RBAC{Action: rbacconfigpb.RBAC_DENY, Policies: map[string]*rbacconfigpb.Policy{"never": never}}
	if gen%2 == 0 {
		rules = &rbacconfigpb.RBAC{Action: rbacconfigpb.RBAC_ALLOW, Policies: map[string]*rbacconfigpb.Policy{
			"never": never,
			"load": {
				Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_UrlPath{UrlPath: &matcherpb.PathMatcher{
					Rule: &matcherpb.PathMatcher_Path{Path: &matcherpb.StringMatcher{
						MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: "/grpc.testing.TestService/"},
					}},
				}}}},
				Principals: []*rbacconfigpb.Principal{{Identifier: &rbacconfigpb.Principal_Any{Any: true}}},
			},
		}}
	}
	return &hcmpb.HttpFilter{
		Name:       "rbac",
		ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(&rbacpb.RBAC{Rules: rules})},
	}
}

// routeConfig is the soak's RouteConfiguration, generation gen: every RPC
// of the load goes through (non_forwarding_action), after a route that
// matches no RPC of the load and differs for every gen.
func routeConfig(gen int) *routepb.RouteConfiguration {
	return &routepb.RouteConfiguration{
		Name: routeName,
		VirtualHosts: []*routepb.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: []*routepb.Route{
			{
				Name:  fmt.Sprintf("unused-%d", gen),
				Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Path{Path: fmt.Sprintf("/soak.Unused/Gen%d", gen)}},
				Action: &routepb.Route_Route{Route: &routepb.RouteAction{
					ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "nowhere"},
				}},
			},
			{
				Name:   "serve",
				Match:  &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routepb.Route_NonForwardingAction{NonForwardingAction: &routepb.NonForwardingAction{}},
			},
		}}},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only invalid UTF-8 in a string field fails
	}
	return a
}
