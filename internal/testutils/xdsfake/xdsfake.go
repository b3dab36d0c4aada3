// Package xdsfake is a fake xDS client for the unit tests of the server's
// listener and RDS handler (tests only): a real one needs a management
// server, and delivers updates, errors and does-not-exist only in the order
// the network gives.
package xdsfake

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

// Client is a fake xDS client, so that the listener's and the RDS
// handler's tests need no management server, no network and no
// does-not-exist timer, and can order what a real one delivers only by
// chance: it records the watches the code under test starts and cancels,
// and delivers what a test asks for (a Listener, a RouteConfiguration, a
// resource error, an ambient error) when it asks. A delivery runs on the
// test's goroutine, one watcher call at a time, and returns once the watcher
// called onDone, as the real client's serializer does (flow control): the
// code under test has then handled it.
type Client struct {
	bootstrap *bootstrap.Config // immutable
	mu        sync.Mutex
	watches   map[key][]*watch // live watches; guarded by mu
}

type key struct{ typeURL, name string }

type watch struct {
	w         xdsclient.ResourceWatcher
	cancelled bool // guarded by Client.mu
}

// NewClient returns a fake client whose bootstrap is cfg.
func NewClient(cfg *bootstrap.Config) *Client {
	return &Client{bootstrap: cfg, watches: make(map[key][]*watch)}
}

// BootstrapConfig returns the bootstrap given to NewClient.
func (f *Client) BootstrapConfig() *bootstrap.Config { return f.bootstrap }

// WatchResource records a watch; cancel removes it, after which no
// delivery reaches w, as with the real client.
func (f *Client) WatchResource(rt *xdsclient.ResourceType, name string, w xdsclient.ResourceWatcher) func() {
	k := key{rt.TypeURL, name}
	fw := &watch{w: w}
	f.mu.Lock()
	f.watches[k] = append(f.watches[k], fw)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if fw.cancelled {
			return
		}
		fw.cancelled = true
		ws := f.watches[k]
		for i, x := range ws {
			if x == fw {
				f.watches[k] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		if len(f.watches[k]) == 0 {
			delete(f.watches, k)
		}
	}
}

// Watching returns the number of live watches of the named resource.
func (f *Client) Watching(rt *xdsclient.ResourceType, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watches[key{rt.TypeURL, name}])
}

// WatchedNames returns the names of rt with a live watch.
func (f *Client) WatchedNames(rt *xdsclient.ResourceType) map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]bool)
	for k := range f.watches {
		if k.typeURL == rt.TypeURL {
			out[k.name] = true
		}
	}
	return out
}

// Deliver calls call for each live watcher of the named resource, one at a
// time, waiting for its onDone. It fails the test if the resource is not
// watched, or a watcher does not call onDone (exactly once) before ctx
// ends.
func (f *Client) Deliver(ctx context.Context, t *testing.T, rt *xdsclient.ResourceType, name string, call func(w xdsclient.ResourceWatcher, onDone func())) {
	t.Helper()
	f.mu.Lock()
	ws := append([]*watch(nil), f.watches[key{rt.TypeURL, name}]...)
	f.mu.Unlock()
	if len(ws) == 0 {
		t.Fatalf("fake xDS client: %s %q is not watched", rt.TypeName, name)
	}
	for _, fw := range ws {
		f.mu.Lock()
		cancelled := fw.cancelled
		f.mu.Unlock()
		if cancelled {
			continue
		}
		CallWatcher(ctx, t, fw.w, call)
	}
}

// CallWatcher makes one watcher call and waits for its onDone.
func CallWatcher(ctx context.Context, t *testing.T, w xdsclient.ResourceWatcher, call func(w xdsclient.ResourceWatcher, onDone func())) {
	t.Helper()
	done := make(chan struct{})
	var calls atomic.Int32
	call(w, func() {
		if calls.Add(1) == 1 {
			close(done)
		} else {
			t.Errorf("fake xDS client: onDone called more than once")
		}
	})
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("fake xDS client: the watcher did not call onDone")
	}
}

// SendListener delivers l to the watchers of its name.
func (f *Client) SendListener(ctx context.Context, t *testing.T, l *xdsresource.Listener) {
	t.Helper()
	f.Deliver(ctx, t, xdsresource.ListenerType, l.Name, func(w xdsclient.ResourceWatcher, onDone func()) { w.ResourceChanged(l, onDone) })
}

// SendListenerError delivers a resource error (err) for the named Listener.
func (f *Client) SendListenerError(ctx context.Context, t *testing.T, name string, err error) {
	t.Helper()
	f.Deliver(ctx, t, xdsresource.ListenerType, name, func(w xdsclient.ResourceWatcher, onDone func()) { w.ResourceError(err, onDone) })
}

// SendListenerAmbient delivers an ambient error (err) for the named
// Listener.
func (f *Client) SendListenerAmbient(ctx context.Context, t *testing.T, name string, err error) {
	t.Helper()
	f.Deliver(ctx, t, xdsresource.ListenerType, name, func(w xdsclient.ResourceWatcher, onDone func()) { w.AmbientError(err, onDone) })
}

// SendRoute delivers rc to the watchers of its name.
func (f *Client) SendRoute(ctx context.Context, t *testing.T, rc *xdsresource.RouteConfig) {
	t.Helper()
	f.Deliver(ctx, t, xdsresource.RouteConfigType, rc.Name, func(w xdsclient.ResourceWatcher, onDone func()) { w.ResourceChanged(rc, onDone) })
}

// SendRouteError delivers a resource error (err) for the named
// RouteConfiguration.
func (f *Client) SendRouteError(ctx context.Context, t *testing.T, name string, err error) {
	t.Helper()
	f.Deliver(ctx, t, xdsresource.RouteConfigType, name, func(w xdsclient.ResourceWatcher, onDone func()) { w.ResourceError(err, onDone) })
}

// SendRouteAmbient delivers an ambient error (err) for the named
// RouteConfiguration.
func (f *Client) SendRouteAmbient(ctx context.Context, t *testing.T, name string, err error) {
	t.Helper()
	f.Deliver(ctx, t, xdsresource.RouteConfigType, name, func(w xdsclient.ResourceWatcher, onDone func()) { w.AmbientError(err, onDone) })
}

// DoesNotExist is the error the real client gives when the named resource
// of type rt does not exist.
func DoesNotExist(rt *xdsclient.ResourceType, name string) error {
	return &xdsclient.Error{Kind: xdsclient.KindDoesNotExist, TypeName: rt.TypeName, Name: name}
}

// NACK is the error the real client gives when an update of the named
// resource was rejected.
func NACK(rt *xdsclient.ResourceType, name string, cause error) error {
	return &xdsclient.Error{Kind: xdsclient.KindNACK, TypeName: rt.TypeName, Name: name, Err: cause}
}

// ConnectionError is the error the real client gives when it cannot reach
// the management server.
func ConnectionError(cause error) error {
	return &xdsclient.Error{Kind: xdsclient.KindConnection, Server: "fake-server", Err: cause}
}

// DecodeListener decodes l as the real client does before delivering it
// (validation included), failing t if it is invalid.
func DecodeListener(t *testing.T, l *listenerpb.Listener) *xdsresource.Listener {
	t.Helper()
	return decode(t, xdsresource.ListenerType, l).(*xdsresource.Listener)
}

// DecodeRoute decodes rc as the real client does before delivering it
// (validation included), failing t if it is invalid.
func DecodeRoute(t *testing.T, rc *routepb.RouteConfiguration) *xdsresource.RouteConfig {
	t.Helper()
	return decode(t, xdsresource.RouteConfigType, rc).(*xdsresource.RouteConfig)
}

func decode(t *testing.T, rt *xdsclient.ResourceType, m proto.Message) xdsclient.ResourceData {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	_, d, err := rt.Decode(xdsclient.DecodeInput{Resource: &anypb.Any{TypeUrl: rt.TypeURL, Value: b}})
	if err != nil {
		t.Fatalf("decoding %s: %v", rt.TypeName, err)
	}
	return d
}
