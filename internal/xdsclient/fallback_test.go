package xdsclient_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// With the primary down before its first response, the client falls back to
// the secondary (gRFC A71); once the primary answers again, the client uses
// it and closes the stream to the secondary.
func TestFallbackAndBack(t *testing.T) {
	ctx := testContext(t)
	primary := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	var secondaryOpen atomic.Int32
	secondary := e2e.StartManagementServer(t, e2e.ManagementServerOptions{
		OnStreamOpen:   func(int64) { secondaryOpen.Add(1) },
		OnStreamClosed: func(int64) { secondaryOpen.Add(-1) },
	})
	lPrimary, lSecondary := testListener("lis", 1), testListener("lis", 2)
	update(ctx, t, primary, e2e.Resources{Listeners: []*listenerpb.Listener{lPrimary}})
	update(ctx, t, secondary, e2e.Resources{Listeners: []*listenerpb.Listener{lSecondary}})
	primary.Stop()

	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{primary.Address, secondary.Address}}, xdsclient.Options{})
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	w.wantData(ctx, t, lSecondary)

	e2e.RestartManagementServer(t, primary)
	w.wantData(ctx, t, lPrimary)
	testutils.WaitFor(ctx, t, "the stream to the secondary to close after going back to the primary", func() error {
		if n := secondaryOpen.Load(); n != 0 {
			return fmt.Errorf("%d streams open", n)
		}
		return nil
	})
}

// Resources cached from the primary keep serving while a fallback server
// supplies a resource the primary never sent, even if the fallback does not
// have them.
func TestFallbackKeepsPrimaryCache(t *testing.T) {
	ctx := testContext(t)
	primary := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	secondary := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	lA, lB := testListener("a", 1), testListener("b", 2)
	update(ctx, t, primary, e2e.Resources{Listeners: []*listenerpb.Listener{lA}})
	update(ctx, t, secondary, e2e.Resources{Listeners: []*listenerpb.Listener{lB}})

	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{primary.Address, secondary.Address}}, xdsclient.Options{})
	wA := newTestWatcher()
	defer c.WatchResource(listenerType, "a", wA)()
	wA.wantData(ctx, t, lA)

	primary.Stop()
	wB := newTestWatcher()
	defer c.WatchResource(listenerType, "b", wB)()
	wB.wantData(ctx, t, lB)
	wA.wantNothing(t)
	if d := findDump(c, listenerURL, "a"); d == nil || d.Status != xdsclient.StatusACKed {
		t.Errorf("dump of a = %+v, want ACKED", d)
	}
}
