package e2e

import (
	"fmt"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// ServerListenerWithFilters returns DefaultServerListener(host, port, "")
// whose HttpConnectionManager runs filters, then the router, over rc
// inline (the default inline routes when rc is nil).
func ServerListenerWithFilters(host string, port uint32, rc *routepb.RouteConfiguration, filters ...*hcmpb.HttpFilter) *listenerpb.Listener {
	lis := DefaultServerListener(host, port, "")
	f := lis.GetFilterChains()[0].GetFilters()[0]
	hcm := &hcmpb.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
		panic(fmt.Sprintf("e2e: the default Listener's HttpConnectionManager: %v", err))
	}
	hcm.HttpFilters = append(append([]*hcmpb.HttpFilter{}, filters...), RouterHTTPFilter())
	if rc != nil {
		hcm.RouteSpecifier = &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: rc}
	}
	f.ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: HCMAny(hcm)}
	return lis
}
