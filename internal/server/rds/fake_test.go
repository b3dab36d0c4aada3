package rds_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/proxyless-grpc/xds/internal/server/rds"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

// fakeClient is a fake xDS client, so that the handler's tests need no
// management server, no network and no does-not-exist timer: it records the
// watches the handler starts and cancels, and delivers what a test asks for
// (a RouteConfiguration, a resource error, an ambient error) when it asks.
// A delivery runs on the test's goroutine, one watcher call at a time, and
// returns once the watcher called onDone, as the real client's serializer
// does (flow control): the handler has then handled it.
type fakeClient struct {
	mu      sync.Mutex
	watches map[fakeKey][]*fakeWatch // live watches; guarded by mu
}

var _ rds.XDSClient = (*fakeClient)(nil)

type fakeKey struct{ typeURL, name string }

type fakeWatch struct {
	w         xdsclient.ResourceWatcher
	cancelled bool // guarded by fakeClient.mu
}

func newFakeClient() *fakeClient {
	return &fakeClient{watches: make(map[fakeKey][]*fakeWatch)}
}

// WatchResource records a watch; cancel removes it, after which no
// delivery reaches w, as with the real client.
func (f *fakeClient) WatchResource(rt *xdsclient.ResourceType, name string, w xdsclient.ResourceWatcher) func() {
	k := fakeKey{rt.TypeURL, name}
	fw := &fakeWatch{w: w}
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

// watching returns the number of live watches of the named resource.
func (f *fakeClient) watching(rt *xdsclient.ResourceType, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watches[fakeKey{rt.TypeURL, name}])
}

// watchedNames returns the names of rt with a live watch.
func (f *fakeClient) watchedNames(rt *xdsclient.ResourceType) map[string]bool {
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

// deliver calls call for each live watcher of the named resource, one at a
// time, waiting for its onDone. It fails the test if the resource is not
// watched, or a watcher does not call onDone (exactly once) before ctx
// ends.
func (f *fakeClient) deliver(ctx context.Context, t *testing.T, rt *xdsclient.ResourceType, name string, call func(w xdsclient.ResourceWatcher, onDone func())) {
	t.Helper()
	f.mu.Lock()
	ws := append([]*fakeWatch(nil), f.watches[fakeKey{rt.TypeURL, name}]...)
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
		callWatcher(ctx, t, fw.w, call)
	}
}

// callWatcher makes one watcher call and waits for its onDone.
func callWatcher(ctx context.Context, t *testing.T, w xdsclient.ResourceWatcher, call func(w xdsclient.ResourceWatcher, onDone func())) {
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

// sendRoute delivers rc to the watchers of its name.
func (f *fakeClient) sendRoute(ctx context.Context, t *testing.T, rc *xdsresource.RouteConfig) {
	t.Helper()
	f.deliver(ctx, t, xdsresource.RouteConfigType, rc.Name, func(w xdsclient.ResourceWatcher, onDone func()) { w.ResourceChanged(rc, onDone) })
}

// sendRouteError delivers a resource error (err) for the named
// RouteConfiguration.
func (f *fakeClient) sendRouteError(ctx context.Context, t *testing.T, name string, err error) {
	t.Helper()
	f.deliver(ctx, t, xdsresource.RouteConfigType, name, func(w xdsclient.ResourceWatcher, onDone func()) { w.ResourceError(err, onDone) })
}

// sendRouteAmbient delivers an ambient error (err) for the named
// RouteConfiguration.
func (f *fakeClient) sendRouteAmbient(ctx context.Context, t *testing.T, name string, err error) {
	t.Helper()
	f.deliver(ctx, t, xdsresource.RouteConfigType, name, func(w xdsclient.ResourceWatcher, onDone func()) { w.AmbientError(err, onDone) })
}

// doesNotExist is the error the real client gives when the named resource
// of type rt does not exist.
func doesNotExist(rt *xdsclient.ResourceType, name string) error {
	return &xdsclient.Error{Kind: xdsclient.KindDoesNotExist, TypeName: rt.TypeName, Name: name}
}

// nack is the error the real client gives when an update of the named
// resource was rejected.
func nack(rt *xdsclient.ResourceType, name string, cause error) error {
	return &xdsclient.Error{Kind: xdsclient.KindNACK, TypeName: rt.TypeName, Name: name, Err: cause}
}

// connectionError is the error the real client gives when it cannot reach
// the management server.
func connectionError(cause error) error {
	return &xdsclient.Error{Kind: xdsclient.KindConnection, Server: "fake-server", Err: cause}
}
