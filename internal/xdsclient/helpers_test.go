package xdsclient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/clock"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const (
	defaultTestTimeout      = testutils.DefaultTimeout
	defaultTestShortTimeout = 300 * time.Millisecond

	listenerURL = "type.googleapis.com/envoy.config.listener.v3.Listener"
	routeURL    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

type discoveryRequest = discoverypb.DiscoveryRequest

// listenerData is the decoded test Listener: the proto itself.
type listenerData struct{ l *listenerpb.Listener }

func (d listenerData) Equal(o xdsclient.ResourceData) bool {
	od, ok := o.(listenerData)
	return ok && proto.Equal(d.l, od.l)
}

// listenerType is a stand-in for the real Listener decoder (which lives in
// another package): it unmarshals and rejects use_original_dst and
// listener_filters, enough to produce NACKs.
var listenerType = &xdsclient.ResourceType{
	TypeURL:                    listenerURL,
	TypeName:                   "Listener",
	AllResourcesRequiredInSotW: true,
	Decode: func(in xdsclient.DecodeInput) (string, xdsclient.ResourceData, error) {
		l := &listenerpb.Listener{}
		if err := in.Resource.UnmarshalTo(l); err != nil {
			return "", nil, fmt.Errorf("unmarshal: %w", err)
		}
		if l.GetUseOriginalDst().GetValue() {
			return l.GetName(), nil, errors.New("use_original_dst is not supported")
		}
		if len(l.GetListenerFilters()) > 0 {
			return l.GetName(), nil, errors.New("listener_filters are not supported")
		}
		return l.GetName(), listenerData{l}, nil
	},
}

type routeData struct{ r *routepb.RouteConfiguration }

func (d routeData) Equal(o xdsclient.ResourceData) bool {
	od, ok := o.(routeData)
	return ok && proto.Equal(d.r, od.r)
}

// routeType is the test RouteConfiguration decoder: it rejects virtual hosts
// without domains.
var routeType = &xdsclient.ResourceType{
	TypeURL:  routeURL,
	TypeName: "RouteConfiguration",
	Decode: func(in xdsclient.DecodeInput) (string, xdsclient.ResourceData, error) {
		r := &routepb.RouteConfiguration{}
		if err := in.Resource.UnmarshalTo(r); err != nil {
			return "", nil, fmt.Errorf("unmarshal: %w", err)
		}
		for _, vh := range r.GetVirtualHosts() {
			if len(vh.GetDomains()) == 0 {
				return r.GetName(), nil, fmt.Errorf("virtual host %q has no domains", vh.GetName())
			}
		}
		return r.GetName(), routeData{r}, nil
	},
}

// testListener returns a valid Listener; port makes values differ.
func testListener(name string, port uint32) *listenerpb.Listener {
	l := e2e.DefaultServerListener("127.0.0.1", port, "")
	l.Name = name
	return l
}

// badListener returns a Listener the test decoder rejects.
func badListener(name string) *listenerpb.Listener {
	l := testListener(name, 1)
	l.ListenerFilters = []*listenerpb.ListenerFilter{{Name: "f"}}
	return l
}

// event is one watcher callback.
type event struct {
	kind string // "data", "error" (ResourceError) or "ambient"
	data xdsclient.ResourceData
	err  error
}

// testWatcher records its callbacks on a channel and calls onDone at once.
// Connectivity errors, which repeat on every failed reconnect, go to
// connErrs instead, dropped when it is full.
type testWatcher struct {
	events   chan event
	connErrs chan error
}

func newTestWatcher() *testWatcher {
	return &testWatcher{events: make(chan event, 100), connErrs: make(chan error, 1)}
}

func (w *testWatcher) ResourceChanged(d xdsclient.ResourceData, onDone func()) {
	w.events <- event{kind: "data", data: d}
	onDone()
}

func (w *testWatcher) ResourceError(err error, onDone func()) {
	w.events <- event{kind: "error", err: err}
	onDone()
}

func (w *testWatcher) AmbientError(err error, onDone func()) {
	defer onDone()
	if e := (event{kind: "ambient", err: err}); isConnErr(e) {
		select {
		case w.connErrs <- err:
		default:
		}
		return
	}
	w.events <- event{kind: "ambient", err: err}
}

// next returns the next event that is not a connectivity AmbientError.
func (w *testWatcher) next(ctx context.Context, t *testing.T) event {
	t.Helper()
	for {
		select {
		case e := <-w.events:
			if isConnErr(e) {
				continue
			}
			return e
		case <-ctx.Done():
			t.Fatalf("timed out waiting for a watcher callback")
			return event{}
		}
	}
}

// wantData waits for a ResourceChanged carrying want.
func (w *testWatcher) wantData(ctx context.Context, t *testing.T, want *listenerpb.Listener) {
	t.Helper()
	e := w.next(ctx, t)
	if e.kind != "data" {
		t.Fatalf("got callback %s (%v), want ResourceChanged", e.kind, e.err)
	}
	if got := e.data.(listenerData).l; !proto.Equal(got, want) {
		t.Fatalf("ResourceChanged got %v, want %v", got, want)
	}
}

// wantError waits for a ResourceError or AmbientError (kind) of the given
// error kind.
func (w *testWatcher) wantError(ctx context.Context, t *testing.T, kind string, errKind xdsclient.ErrorKind) error {
	t.Helper()
	e := w.next(ctx, t)
	if e.kind != kind {
		t.Fatalf("got callback %s (%v, %v), want %s", e.kind, e.data, e.err, kind)
	}
	var xe *xdsclient.Error
	if !errors.As(e.err, &xe) || xe.Kind != errKind {
		t.Fatalf("got error %v, want an *xdsclient.Error of kind %v", e.err, errKind)
	}
	return e.err
}

// wantNothing checks that no callback other than connectivity errors comes
// within a short time.
func (w *testWatcher) wantNothing(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestShortTimeout)
	defer cancel()
	for {
		select {
		case e := <-w.events:
			if isConnErr(e) {
				continue
			}
			t.Fatalf("got unexpected callback %s (data %v, err %v)", e.kind, e.data, e.err)
		case <-ctx.Done():
			return
		}
	}
}

func isConnErr(e event) bool {
	var xe *xdsclient.Error
	return e.kind == "ambient" && errors.As(e.err, &xe) && xe.Kind == xdsclient.KindConnection
}

// fastBackoff keeps reconnects quick in tests.
func fastBackoff(int) time.Duration { return 20 * time.Millisecond }

// newClient builds a client for the bootstrap options, closed at cleanup.
func newClient(t *testing.T, bo e2e.BootstrapOptions, opts xdsclient.Options) *xdsclient.Client {
	t.Helper()
	if bo.NodeID == "" {
		bo.NodeID = "test-node"
	}
	cfg, err := bootstrap.Parse(e2e.Bootstrap(t, bo))
	if err != nil {
		t.Fatalf("bootstrap.Parse: %v", err)
	}
	if opts.Backoff == nil {
		opts.Backoff = fastBackoff
	}
	if opts.ResourceTypes == nil {
		opts.ResourceTypes = []*xdsclient.ResourceType{listenerType, routeType}
	}
	c, err := xdsclient.New(cfg, opts)
	if err != nil {
		t.Fatalf("xdsclient.New: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// testContext is testutils.Context, under the name this package's many
// tests already use, and checks that the test leaves no goroutine behind
// (testutils.CheckGoroutines; the package's tests do not run in parallel).
// Call it first in a test, before anything registers a cleanup.
func testContext(t *testing.T) context.Context {
	t.Helper()
	testutils.CheckGoroutines(t)
	return testutils.Context(t)
}

func update(ctx context.Context, t *testing.T, ms *e2e.ManagementServer, r e2e.Resources) {
	t.Helper()
	if err := ms.Update(ctx, r); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// skipFirst returns a predicate that ignores the first n requests, then
// applies pred (WaitForRequest calls a predicate once per request, in order).
func skipFirst(n int, pred func(*discoveryRequest) bool) func(*discoveryRequest) bool {
	seen := 0
	return func(r *discoveryRequest) bool {
		seen++
		return seen > n && pred(r)
	}
}

// fakeEpoch is where the tests' fake clocks start.
var fakeEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// waitTimers waits until the fake clock's pending timers (durations from
// now, earliest first) are exactly want.
func waitTimers(ctx context.Context, t *testing.T, clk *clock.Fake, want ...time.Duration) {
	t.Helper()
	var last []time.Duration
	if err := clk.WaitPending(ctx, func(p []time.Duration) bool { last = p; return slices.Equal(p, want) }); err != nil {
		t.Fatalf("pending timers %v, want %v", last, want)
	}
}

// advanceBackoffsUntil advances clk past each reconnection wait of
// fastBackoff it finds pending until ok holds for the pending timers.
func advanceBackoffsUntil(ctx context.Context, t *testing.T, clk *clock.Fake, ok func(pending []time.Duration) bool) {
	t.Helper()
	for {
		var p []time.Duration
		err := clk.WaitPending(ctx, func(q []time.Duration) bool {
			p = q
			return ok(q) || slices.Contains(q, fastBackoff(0))
		})
		if err != nil {
			t.Fatalf("pending timers %v: neither the wanted ones nor a reconnection wait", p)
		}
		if ok(p) {
			return
		}
		clk.Advance(fastBackoff(0))
	}
}
