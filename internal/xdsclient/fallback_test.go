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

// TestFallbackDecodesSameBytesAgain: a resource that a fallback server
// sends with the bytes the primary sent is decoded again, with the
// fallback as DecodeInput.Server: what a resource means may depend on
// which server sent it (gRFC A102's trust), so the value decoded for the
// primary is not reused for the fallback's copy.
func TestFallbackDecodesSameBytesAgain(t *testing.T) {
	ctx := testContext(t)
	primary := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	secondary := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	servers := make(chan string, 10)
	rt := observedListenerType(func(in xdsclient.DecodeInput, name string) {
		if name == "a" {
			servers <- in.Server.ServerURI
		}
	})
	lA, lB := testListener("a", 1), testListener("b", 2)
	update(ctx, t, primary, e2e.Resources{Listeners: []*listenerpb.Listener{lA}})
	update(ctx, t, secondary, e2e.Resources{Listeners: []*listenerpb.Listener{lA, lB}})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{primary.Address, secondary.Address}}, xdsclient.Options{ResourceTypes: []*xdsclient.ResourceType{rt}})
	next := func() string {
		t.Helper()
		select {
		case s := <-servers:
			return s
		case <-ctx.Done():
			t.Fatal("no decode of a")
		}
		return ""
	}
	wA := newTestWatcher()
	defer c.WatchResource(rt, "a", wA)()
	wA.wantData(ctx, t, lA)
	if s := next(); s != primary.Address {
		t.Fatalf("a decoded for %q, want the primary %q", s, primary.Address)
	}

	primary.Stop()
	wB := newTestWatcher()
	defer c.WatchResource(rt, "b", wB)()
	// The secondary's response carries a and b: once b is delivered, a
	// was decoded, or skipped.
	wB.wantData(ctx, t, lB)
	select {
	case s := <-servers:
		if s != secondary.Address {
			t.Errorf("the secondary's copy of a decoded for %q, want the secondary %q", s, secondary.Address)
		}
	default:
		t.Error("the secondary's copy of a, with the primary's bytes, was not decoded again")
	}
}
