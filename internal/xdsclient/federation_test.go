package xdsclient_test

import (
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// xdstp names go to their authority's servers (gRFC A47), old-style names to
// the top-level ones; unknown authorities and mismatched types fail the
// watch.
func TestFederation(t *testing.T) {
	ctx := testContext(t)
	top := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	other := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{
		ServerURIs: []string{top.Address},
		Authorities: map[string]e2e.AuthorityOptions{
			"other.example.com":   {ServerURIs: []string{other.Address}},
			"default.example.com": {},
		},
	}, xdsclient.Options{})

	const (
		otherName   = "xdstp://other.example.com/envoy.config.listener.v3.Listener/a?b=2&a=1"
		otherCanon  = "xdstp://other.example.com/envoy.config.listener.v3.Listener/a?a=1&b=2"
		defaultName = "xdstp://default.example.com/envoy.config.listener.v3.Listener/d"
	)
	lOld, lOther, lDefault := testListener("old", 1), testListener(otherCanon, 2), testListener(defaultName, 3)
	update(ctx, t, top, e2e.Resources{Listeners: []*listenerpb.Listener{lOld, lDefault}})
	update(ctx, t, other, e2e.Resources{Listeners: []*listenerpb.Listener{lOther}})

	wOld, wOther, wDefault := newTestWatcher(), newTestWatcher(), newTestWatcher()
	defer c.WatchResource(listenerType, "old", wOld)()
	defer c.WatchResource(listenerType, otherName, wOther)()
	defer c.WatchResource(listenerType, defaultName, wDefault)()
	wOld.wantData(ctx, t, lOld)
	wOther.wantData(ctx, t, lOther)
	wDefault.wantData(ctx, t, lDefault)

	for _, r := range top.Requests() {
		for _, n := range r.GetResourceNames() {
			if n == otherCanon || n == otherName {
				t.Errorf("top-level server got a request for %q", n)
			}
		}
	}
	if _, err := other.WaitForRequest(ctx, e2e.IsSubscription(listenerURL, otherCanon)); err != nil {
		t.Errorf("authority server did not get the canonical name: %v", err)
	}
	for _, r := range other.Requests() {
		for _, n := range r.GetResourceNames() {
			if n != otherCanon {
				t.Errorf("authority server got a request for %q", n)
			}
		}
	}

	wUnknown := newTestWatcher()
	defer c.WatchResource(listenerType, "xdstp://nowhere.example.com/envoy.config.listener.v3.Listener/x", wUnknown)()
	wUnknown.wantError(ctx, t, "error", xdsclient.KindUnknownAuthority)

	wType := newTestWatcher()
	defer c.WatchResource(listenerType, "xdstp://other.example.com/envoy.config.route.v3.RouteConfiguration/x", wType)()
	wType.wantError(ctx, t, "error", xdsclient.KindBadName)
}
