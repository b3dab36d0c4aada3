package xdsclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/proxyless-grpc/xds/internal/clock"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"google.golang.org/protobuf/proto"
)

// A Listener missing from a State-of-the-World response is deleted; the other
// one, re-sent unchanged, is not delivered again.
func TestDeletionByAbsence(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	l1, l2 := testListener("l1", 1), testListener("l2", 2)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l1, l2}})
	w1, w2 := newTestWatcher(), newTestWatcher()
	defer c.WatchResource(listenerType, "l1", w1)()
	defer c.WatchResource(listenerType, "l2", w2)()
	w1.wantData(ctx, t, l1)
	w2.wantData(ctx, t, l2)

	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l2}})
	w1.wantError(ctx, t, "error", xdsclient.KindDoesNotExist)
	if _, err := ms.WaitForRequest(ctx, e2e.IsACK(listenerURL, "2")); err != nil {
		t.Fatalf("waiting for the ACK of the deletion: %v", err)
	}
	w2.wantNothing(t)

	// A new watcher of the deleted resource hears of it at once.
	w3 := newTestWatcher()
	defer c.WatchResource(listenerType, "l1", w3)()
	w3.wantError(ctx, t, "error", xdsclient.KindDoesNotExist)
}

// With ignore_resource_deletion (gRFC A53) a deleted Listener keeps serving
// its cached value and watchers hear nothing; it can come back later.
func TestIgnoreResourceDeletion(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{
		ServerURIs:     []string{ms.Address},
		ServerFeatures: []string{"ignore_resource_deletion"},
	}, xdsclient.Options{})

	l1, l2 := testListener("l1", 1), testListener("l2", 2)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l1, l2}})
	w1 := newTestWatcher()
	defer c.WatchResource(listenerType, "l1", w1)()
	w1.wantData(ctx, t, l1)

	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l2}})
	if _, err := ms.WaitForRequest(ctx, e2e.IsACK(listenerURL, "2")); err != nil {
		t.Fatalf("waiting for the ACK of the deletion: %v", err)
	}
	w1.wantNothing(t)
	w2 := newTestWatcher()
	defer c.WatchResource(listenerType, "l1", w2)()
	w2.wantData(ctx, t, l1)
	if d := findDump(c, listenerURL, "l1"); d == nil || d.Status != xdsclient.StatusACKed || d.Raw == nil {
		t.Errorf("dump of l1 = %+v, want ACKED with its value", d)
	}

	l1b := testListener("l1", 11)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l1b, l2}})
	w1.wantData(ctx, t, l1b)
}

// When the management server restarts, the client re-subscribes with the last
// accepted version and no nonce (gRFC A27), keeps its cache, and does not call
// watchers again for the identical resources the server re-sends.
func TestServerRestart(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	w.wantData(ctx, t, l)
	if _, err := ms.WaitForRequest(ctx, e2e.IsACK(listenerURL, "1")); err != nil {
		t.Fatalf("waiting for the ACK: %v", err)
	}

	ms.Stop()
	// While the server is down, the cached value still serves new watchers.
	w2 := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w2)()
	w2.wantData(ctx, t, l)

	n := len(ms.Requests())
	e2e.RestartManagementServer(t, ms)
	resub, err := ms.WaitForRequest(ctx, skipFirst(n, func(r *discoveryRequest) bool {
		return r.GetTypeUrl() == listenerURL
	}))
	if err != nil {
		t.Fatalf("waiting for the re-subscription: %v", err)
	}
	if resub.GetVersionInfo() != "1" || resub.GetResponseNonce() != "" || len(resub.GetResourceNames()) != 1 {
		t.Errorf("re-subscription = {version %q, nonce %q, names %v}, want {\"1\", \"\", [lis]}",
			resub.GetVersionInfo(), resub.GetResponseNonce(), resub.GetResourceNames())
	}
	if resub.GetNode().GetId() != "test-node" {
		t.Errorf("first request on the new stream has node %v, want id test-node", resub.GetNode())
	}
	// The server re-sends the same Listener on the new stream; the client
	// ACKs it without calling the watchers.
	if _, err := ms.WaitForRequest(ctx, skipFirst(n, e2e.IsACK(listenerURL, "1"))); err != nil {
		t.Fatalf("waiting for the ACK on the new stream: %v", err)
	}
	w.wantNothing(t)
	w2.wantNothing(t)

	// The new stream works.
	l2 := testListener("lis", 2)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l2}})
	w.wantData(ctx, t, l2)
}

// Two watchers of one resource both get every change; the resource is
// subscribed once.
func TestTwoWatchers(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})
	w1, w2 := newTestWatcher(), newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w1)()
	defer c.WatchResource(listenerType, "lis", w2)()
	w1.wantData(ctx, t, l)
	w2.wantData(ctx, t, l)

	l2 := testListener("lis", 2)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l2}})
	w1.wantData(ctx, t, l2)
	w2.wantData(ctx, t, l2)
	for _, r := range ms.Requests() {
		if len(r.GetResourceNames()) != 1 {
			t.Errorf("request names %v, want exactly [lis]", r.GetResourceNames())
		}
	}
}

// Cancelling the last watcher of a resource unsubscribes from it.
func TestCancelUnsubscribes(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	wa1, wa2, wb := newTestWatcher(), newTestWatcher(), newTestWatcher()
	cancelA1 := c.WatchResource(listenerType, "a", wa1)
	cancelA2 := c.WatchResource(listenerType, "a", wa2)
	cancelB := c.WatchResource(listenerType, "b", wb)
	defer cancelB()
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(listenerURL, "a", "b")); err != nil {
		t.Fatalf("waiting for the subscription to a and b: %v", err)
	}
	cancelA1()
	cancelA1() // idempotent
	cancelA2()
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(listenerURL, "b")); err != nil {
		t.Fatalf("waiting for the unsubscription of a: %v", err)
	}
	cancelB()
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(listenerURL)); err != nil {
		t.Fatalf("waiting for the unsubscription of b: %v", err)
	}

	// No callback after cancel.
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{testListener("a", 1), testListener("b", 2)}})
	wa1.wantNothing(t)
	wb.wantNothing(t)
}

// funcWatcher runs a function on ResourceChanged.
type funcWatcher struct {
	*testWatcher
	onData func()
}

func (w funcWatcher) ResourceChanged(d xdsclient.ResourceData, onDone func()) {
	w.onData()
	w.testWatcher.ResourceChanged(d, onDone)
}

// A watcher can cancel itself from its callback without deadlock, and gets
// nothing afterwards. A cancel from another goroutine while a callback runs
// returns at once; no callback starts after it, and WaitCallbacks returns
// only once the running one has.
func TestCancelFromCallback(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})

	var cancel func()
	ready := make(chan struct{})
	w := funcWatcher{testWatcher: newTestWatcher(), onData: func() { <-ready; cancel() }}
	cancel = c.WatchResource(listenerType, "lis", w)
	close(ready)
	w.wantData(ctx, t, l)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{testListener("lis", 2)}})
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(listenerURL)); err != nil {
		t.Fatalf("waiting for the unsubscription: %v", err)
	}
	w.wantNothing(t)

	// Cancel from outside while the callback runs: it returns at once, and
	// WaitCallbacks returns only after the callback does.
	entered, release := make(chan struct{}), make(chan struct{})
	w2 := funcWatcher{testWatcher: newTestWatcher(), onData: func() { close(entered); <-release }}
	cancel2 := c.WatchResource(listenerType, "lis", w2)
	<-entered
	cancelled := make(chan struct{})
	go func() { cancel2(); close(cancelled) }()
	select {
	case <-cancelled:
	case <-ctx.Done():
		t.Fatal("cancel blocked while the watcher's callback was running")
	}
	waited := make(chan error, 1)
	go func() { waited <- c.WaitCallbacks(ctx) }()
	// The callback is still running (it waits for release), so a
	// WaitCallbacks with a short deadline must end by that deadline; the one
	// started before it must not have returned either.
	sctx, scancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer scancel()
	if err := c.WaitCallbacks(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitCallbacks = %v while the watcher's callback was running, want %v", err, context.DeadlineExceeded)
	}
	select {
	case err := <-waited:
		t.Fatalf("WaitCallbacks returned (%v) while the watcher's callback was running", err)
	default:
	}
	close(release)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("WaitCallbacks: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("WaitCallbacks did not return after the callback returned")
	}
	w2.wantData(ctx, t, testListener("lis", 2)) // the callback that ran
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{testListener("lis", 3)}})
	w2.wantNothing(t)

	// WaitCallbacks gives up with ctx.
	entered3, blocked := make(chan struct{}), make(chan struct{})
	w3 := funcWatcher{testWatcher: newTestWatcher(), onData: func() { close(entered3); <-blocked }}
	defer c.WatchResource(listenerType, "lis", w3)()
	defer close(blocked)
	select {
	case <-entered3:
	case <-ctx.Done():
		t.Fatal("timed out waiting for the blocking callback to start")
	}
	sctx3, scancel3 := context.WithTimeout(ctx, time.Millisecond)
	defer scancel3()
	if err := c.WaitCallbacks(sctx3); err == nil {
		t.Error("WaitCallbacks returned nil while a callback was blocked and ctx ended, want ctx's error")
	}
}

// The ADS stream reads no further response until every watcher called onDone.
func TestFlowControl(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	dones := make(chan func(), 10)
	w := &deferWatcher{data: make(chan xdsclient.ResourceData, 10), dones: dones}
	defer c.WatchResource(listenerType, "lis", w)()
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{testListener("lis", 1)}})
	<-w.data
	onDone := <-dones
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{testListener("lis", 2)}})
	sctx, cancel := context.WithTimeout(ctx, defaultTestShortTimeout)
	defer cancel()
	select {
	case <-w.data:
		t.Fatal("second update delivered before onDone of the first")
	case <-sctx.Done():
	}
	onDone()
	select {
	case <-w.data:
	case <-ctx.Done():
		t.Fatal("second update not delivered after onDone")
	}
	(<-dones)()
}

// deferWatcher hands its onDone functions to the test.
type deferWatcher struct {
	data  chan xdsclient.ResourceData
	dones chan func()
}

func (w *deferWatcher) ResourceChanged(d xdsclient.ResourceData, onDone func()) {
	w.data <- d
	w.dones <- onDone
}
func (w *deferWatcher) ResourceError(_ error, onDone func()) { onDone() }
func (w *deferWatcher) AmbientError(_ error, onDone func())  { onDone() }

func findDump(c *xdsclient.Client, typeURL, name string) *xdsclient.ResourceDump {
	for _, d := range c.Dump() {
		if d.TypeURL == typeURL && d.Name == name {
			return &d
		}
	}
	return nil
}

// typedListenerWatcher is a TypedWatcher of the test Listener data.
type typedListenerWatcher struct{ got chan *listenerpb.Listener }

func (w typedListenerWatcher) ResourceChanged(d listenerData, onDone func()) {
	w.got <- d.l
	onDone()
}
func (w typedListenerWatcher) ResourceError(_ error, onDone func()) { onDone() }
func (w typedListenerWatcher) AmbientError(_ error, onDone func())  { onDone() }

// Watch delivers typed values.
func TestTypedWatch(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})
	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})
	w := typedListenerWatcher{got: make(chan *listenerpb.Listener, 1)}
	defer xdsclient.Watch[listenerData](c, listenerType, "lis", w)()
	select {
	case got := <-w.got:
		if !proto.Equal(got, l) {
			t.Errorf("got %v, want %v", got, l)
		}
	case <-ctx.Done():
		t.Fatal("timed out waiting for the typed update")
	}
}

// Shutdown may be called from a watcher callback and returns at once; Close
// may be called concurrently and repeatedly and returns once the client is
// gone; no callback starts after Shutdown, and a closed client dumps nothing.
func TestShutdownFromCallback(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})
	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})
	if n := len(c.Dump()); n != 0 {
		t.Errorf("Dump before any watch listed %d resources, want 0", n)
	}

	shut := make(chan struct{})
	w := funcWatcher{testWatcher: newTestWatcher(), onData: func() {
		c.Shutdown()
		close(shut)
	}}
	c.WatchResource(listenerType, "lis", w)
	select {
	case <-shut:
	case <-ctx.Done():
		t.Fatal("Shutdown from a callback did not return")
	}
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	c.Close()
	<-done
	if n := len(c.Dump()); n != 0 {
		t.Errorf("Dump after Close listed %d resources, want 0", n)
	}
	w2 := newTestWatcher()
	c.WatchResource(listenerType, "lis", w2)
	w2.wantNothing(t)
	if err := c.WaitCallbacks(ctx); err != nil {
		t.Errorf("WaitCallbacks on a closed client: %v, want nil", err)
	}
}

// Dump lists what is cached, from another goroutine than the callbacks'.
func TestDumpListsWatched(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})
	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	w.wantData(ctx, t, l)
	if d := findDump(c, listenerURL, "lis"); d == nil || d.Status != xdsclient.StatusACKed {
		t.Errorf("Dump entry of the watched Listener = %+v, want it ACKED", d)
	}
}

// Failed stream attempts back off with growing retry counts; a stream that
// received a response resets the count (gRFC A57).
func TestBackoffResetAfterResponse(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	retries := make(chan int, 1000)
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{
		Backoff: func(n int) time.Duration {
			retries <- n
			return 10 * time.Millisecond
		},
	})
	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	w.wantData(ctx, t, l)

	wantRetries := func(want ...int) {
		t.Helper()
		for _, n := range want {
			select {
			case got := <-retries:
				if got != n {
					t.Fatalf("Backoff called with %d, want %d", got, n)
				}
			case <-ctx.Done():
				t.Fatalf("timed out waiting for Backoff(%d)", n)
			}
		}
	}
	ms.Stop()
	wantRetries(0, 1, 2)
	e2e.RestartManagementServer(t, ms)
	if _, err := ms.WaitForRequest(ctx, skipFirst(len(ms.Requests()), e2e.IsACK(listenerURL, "1"))); err != nil {
		t.Fatalf("waiting for the ACK after restart: %v", err)
	}
	ms.Stop()
	// Drain the counts of attempts made before the restart succeeded, up to
	// the reset.
	for {
		select {
		case n := <-retries:
			if n != 0 {
				continue
			}
			wantRetries(1)
			return
		case <-ctx.Done():
			t.Fatal("timed out waiting for the backoff to restart at 0")
		}
	}
}

// Between failed stream attempts the channel waits, on the client's clock,
// exactly what Backoff returned for the attempt's retry count, and makes no
// attempt before.
func TestBackoffWaitsOnClock(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	ms.Stop()
	clk := clock.NewFake(fakeEpoch)
	retries := make(chan int, 100)
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{
		Clock: clk,
		Backoff: func(n int) time.Duration {
			retries <- n
			return time.Duration(n+1) * time.Second
		},
	})
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	for n := range 3 {
		wait := time.Duration(n+1) * time.Second
		waitTimers(ctx, t, clk, wait)
		if got := <-retries; got != n {
			t.Fatalf("Backoff(%d), want Backoff(%d)", got, n)
		}
		clk.Advance(wait - time.Nanosecond)
		if len(retries) != 0 {
			t.Fatalf("another attempt failed before the wait of %v was over", wait)
		}
		waitTimers(ctx, t, clk, time.Nanosecond)
		clk.Advance(time.Nanosecond)
	}
}
