package xdsclient_test

import (
	"slices"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"go.uber.org/goleak"
)

// Configs with the same Key share one client; the last release closes it and
// every goroutine it started.
func TestPoolSharingAndRelease(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})
	ignore := goleak.IgnoreCurrent()

	parse := func() *bootstrap.Config {
		cfg, err := bootstrap.Parse(e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}, NodeID: "n"}))
		if err != nil {
			t.Fatalf("bootstrap.Parse: %v", err)
		}
		return cfg
	}
	p := xdsclient.NewPool(xdsclient.Options{Backoff: fastBackoff})
	c1, release1, err := p.Get(parse())
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	c2, release2, err := p.Get(parse())
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if c1 != c2 {
		t.Fatal("two configs with the same key got different clients")
	}
	if !slices.Contains(xdsclient.Clients(), c1) {
		t.Error("Clients() does not list the pool's client")
	}

	w := newTestWatcher()
	c1.WatchResource(listenerType, "lis", w)
	w.wantData(ctx, t, l)

	release1()
	release1() // idempotent: must not drop the second reference
	w2 := newTestWatcher()
	c2.WatchResource(listenerType, "lis", w2)
	w2.wantData(ctx, t, l)

	release2()
	if slices.Contains(xdsclient.Clients(), c1) {
		t.Error("Clients() still lists a closed client")
	}
	if got := c1.Dump(); got != nil {
		t.Errorf("Dump of a closed client = %v, want nil", got)
	}
	goleak.VerifyNone(t, ignore)

	// A new Get makes a new client.
	c3, release3, err := p.Get(parse())
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer release3()
	if c3 == c1 {
		t.Error("Get after the last release returned the closed client")
	}
}
