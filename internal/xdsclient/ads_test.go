package xdsclient_test

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/proxyless-grpc/xds/internal/clock"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A valid Listener is delivered and ACKed with the response's version and a
// nonce; the next update is ACKed with the next version and a new nonce.
func TestACK(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	l1 := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l1}})
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	w.wantData(ctx, t, l1)
	ack1, err := ms.WaitForRequest(ctx, e2e.IsACK(listenerURL, "1"))
	if err != nil {
		t.Fatalf("waiting for the ACK of version 1: %v", err)
	}
	if got := ack1.GetResourceNames(); len(got) != 1 || got[0] != "lis" {
		t.Errorf("ACK resource_names = %v, want [lis]", got)
	}

	l2 := testListener("lis", 2)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l2}})
	w.wantData(ctx, t, l2)
	ack2, err := ms.WaitForRequest(ctx, e2e.IsACK(listenerURL, "2"))
	if err != nil {
		t.Fatalf("waiting for the ACK of version 2: %v", err)
	}
	if ack2.GetResponseNonce() == ack1.GetResponseNonce() {
		t.Errorf("ACK of version 2 carries the nonce of version 1 (%q)", ack1.GetResponseNonce())
	}
	if reqs := ms.Requests(); reqs[0].GetNode().GetId() != "test-node" {
		t.Errorf("first request node id = %q, want %q", reqs[0].GetNode().GetId(), "test-node")
	}
}

// An invalid update of a cached Listener is NACKed with the last accepted
// version and an INVALID_ARGUMENT error_detail; the watcher keeps the old
// value and hears an AmbientError.
func TestNACKKeepsPreviousValue(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	good := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{good}})
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	w.wantData(ctx, t, good)

	bad := testListener("lis", 2)
	bad.UseOriginalDst = wrapperspb.Bool(true)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{bad}})
	w.wantError(ctx, t, "ambient", xdsclient.KindNACK)
	nack, err := ms.WaitForRequest(ctx, e2e.IsNACK(listenerURL))
	if err != nil {
		t.Fatalf("waiting for the NACK: %v", err)
	}
	if nack.GetVersionInfo() != "1" {
		t.Errorf("NACK version_info = %q, want the last accepted %q", nack.GetVersionInfo(), "1")
	}
	if code := codes.Code(nack.GetErrorDetail().GetCode()); code != codes.InvalidArgument {
		t.Errorf("NACK error_detail code = %v, want %v", code, codes.InvalidArgument)
	}
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "lis: ") || !strings.Contains(msg, "test-node") {
		t.Errorf("NACK error_detail message %q does not name the resource and the node", msg)
	}

	// The cached value is still served to new watchers, with the NACK.
	w2 := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w2)()
	w2.wantData(ctx, t, good)
	w2.wantError(ctx, t, "ambient", xdsclient.KindNACK)
}

// In a response with valid and invalid resources, the valid ones are applied
// (gRFC A46) and the NACK names every invalid one and only those (gRFC A40).
func TestPartialNACK(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	wGood, wBad1, wBad2 := newTestWatcher(), newTestWatcher(), newTestWatcher()
	defer c.WatchResource(listenerType, "good", wGood)()
	defer c.WatchResource(listenerType, "bad1", wBad1)()
	defer c.WatchResource(listenerType, "bad2", wBad2)()
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(listenerURL, "bad1", "bad2", "good")); err != nil {
		t.Fatalf("waiting for the subscription: %v", err)
	}
	// The server answers a first request at once (version "0", empty).
	if _, err := ms.WaitForRequest(ctx, e2e.IsACK(listenerURL, "0")); err != nil {
		t.Fatalf("waiting for the ACK of the empty first response: %v", err)
	}

	good := testListener("good", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{good, badListener("bad1")}})
	wGood.wantData(ctx, t, good)
	wBad1.wantError(ctx, t, "error", xdsclient.KindNACK)
	nack, err := ms.WaitForRequest(ctx, e2e.IsNACK(listenerURL))
	if err != nil {
		t.Fatalf("waiting for the NACK: %v", err)
	}
	msg := nack.GetErrorDetail().GetMessage()
	if !strings.Contains(msg, "bad1: ") || strings.Contains(msg, "good: ") {
		t.Errorf("NACK message %q should name bad1 and only bad1", msg)
	}

	bad2 := testListener("bad2", 3)
	bad2.UseOriginalDst = wrapperspb.Bool(true)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{good, badListener("bad1"), bad2}})
	wBad1.wantError(ctx, t, "error", xdsclient.KindNACK)
	wBad2.wantError(ctx, t, "error", xdsclient.KindNACK)
	wGood.wantNothing(t) // identical re-send
	nack2, err := ms.WaitForRequest(ctx, func(r *discoveryRequest) bool {
		return e2e.IsNACK(listenerURL)(r) && r.GetResponseNonce() != nack.GetResponseNonce()
	})
	if err != nil {
		t.Fatalf("waiting for the second NACK: %v", err)
	}
	msg = nack2.GetErrorDetail().GetMessage()
	for _, want := range []string{"bad1: listener_filters", "bad2: use_original_dst"} {
		if !strings.Contains(msg, want) {
			t.Errorf("NACK message %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "good: ") {
		t.Errorf("NACK message %q names the valid resource", msg)
	}
	// Version "0" is the server's empty first response, the last one ACKed.
	if nack2.GetVersionInfo() != "0" {
		t.Errorf("NACK version_info = %q, want %q (the last accepted)", nack2.GetVersionInfo(), "0")
	}
}

// A resource the server never sends is reported as not existing once the
// timer expires; a later watcher hears it at once.
func TestDoesNotExistTimer(t *testing.T) {
	const expiry = 15 * time.Second
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	clk := clock.NewFake(fakeEpoch)
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{WatchExpiryTimeout: expiry, Clock: clk})

	present := testListener("present", 9)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{present}})
	wPresent := newTestWatcher()
	defer c.WatchResource(listenerType, "present", wPresent)()
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "missing", w)()
	wPresent.wantData(ctx, t, present)
	// Only the missing resource's timer runs: the present one's stopped.
	waitTimers(ctx, t, clk, expiry)
	clk.Advance(expiry - time.Nanosecond)
	waitTimers(ctx, t, clk, time.Nanosecond) // not fired yet
	clk.Advance(time.Nanosecond)
	err := w.wantError(ctx, t, "error", xdsclient.KindDoesNotExist)
	if !errors.Is(err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("error %v does not match ErrResourceDoesNotExist", err)
	}
	if !strings.Contains(err.Error(), "test-node") {
		t.Errorf("error %q does not carry the node id", err)
	}

	w2 := newTestWatcher()
	defer c.WatchResource(listenerType, "missing", w2)()
	w2.wantError(ctx, t, "error", xdsclient.KindDoesNotExist)
	if p := clk.Pending(); len(p) != 0 {
		t.Errorf("timers pending after the expiry: %v, want none", p)
	}

	// The resource appearing later is delivered.
	l := testListener("missing", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l, present}})
	w.wantData(ctx, t, l)
	w2.wantData(ctx, t, l)
}

// The timer does not run while the server cannot be reached (gRFC A57); it
// starts once the subscription is sent on a live stream.
func TestDoesNotExistTimerNotStartedWhileServerDown(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	ms.Stop()
	const expiry = 15 * time.Second
	clk := clock.NewFake(fakeEpoch)
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{WatchExpiryTimeout: expiry, Clock: clk})

	w := newTestWatcher()
	defer c.WatchResource(listenerType, "missing", w)()
	// Connectivity errors arrive, as AmbientErrors only.
	select {
	case <-w.connErrs:
	case <-ctx.Done():
		t.Fatal("no connectivity AmbientError while the server is down")
	}
	// The client waits to reconnect; no resource timer runs, however long
	// the outage lasts.
	waitTimers(ctx, t, clk, fastBackoff(0))
	for range 3 {
		clk.Advance(2 * expiry)
		waitTimers(ctx, t, clk, fastBackoff(0))
	}
	select {
	case e := <-w.events:
		t.Fatalf("got callback %s (%v) while the server is down", e.kind, e.err)
	default:
	}

	e2e.RestartManagementServer(t, ms)
	advanceBackoffsUntil(ctx, t, clk, func(p []time.Duration) bool { return slices.Equal(p, []time.Duration{expiry}) })
	clk.Advance(expiry)
	w.wantError(ctx, t, "error", xdsclient.KindDoesNotExist)
}

// TestUnwatchedResourcesIgnored: a server that answers with more than was
// asked for (istiod sends every Listener of the node, clients' ones
// included, to an LDS request) is ACKed: the resources nobody watches are
// not decoded, so one this client would reject does not NACK the response,
// including after the last watch is cancelled (a request with no names).
func TestUnwatchedResourcesIgnored(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{SendEverything: []string{listenerURL}})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})
	good := testListener("watched", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{good, badListener("someone-elses")}})

	w := newTestWatcher()
	cancel := c.WatchResource(listenerType, "watched", w)
	w.wantData(ctx, t, good)
	if _, err := ms.WaitForRequest(ctx, e2e.IsACK(listenerURL, "1")); err != nil {
		t.Fatalf("waiting for the ACK of a response with an unwatched, invalid Listener: %v", err)
	}
	cancel()
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(listenerURL)); err != nil {
		t.Fatalf("waiting for the unsubscription: %v", err)
	}
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{good, badListener("someone-elses")}})
	if _, err := ms.WaitForRequest(ctx, e2e.IsACK(listenerURL, "2")); err != nil {
		t.Fatalf("waiting for the ACK after the last watch was cancelled: %v", err)
	}
	for _, r := range ms.Requests() {
		if r.GetErrorDetail() != nil {
			t.Errorf("the client NACKed: %v", r.GetErrorDetail().GetMessage())
		}
	}
	if d := findDump(c, listenerURL, "someone-elses"); d != nil {
		t.Errorf("Dump lists the unwatched Listener: %+v", d)
	}
}

// observedListenerType is listenerType, as a type of its own, with observe
// called after each decode with its input and the name decoded.
func observedListenerType(observe func(in xdsclient.DecodeInput, name string)) *xdsclient.ResourceType {
	rt := *listenerType
	rt.Decode = func(in xdsclient.DecodeInput) (string, xdsclient.ResourceData, error) {
		name, d, err := listenerType.Decode(in)
		observe(in, name)
		return name, d, err
	}
	return &rt
}

// TestDecodePrevious: a decoder is given the last value decoded for the same
// resource, also after the resource was deleted, so that it can reuse what
// did not change; the first decode gets none.
func TestDecodePrevious(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	prevs := make(chan xdsclient.ResourceData, 10)
	rt := observedListenerType(func(in xdsclient.DecodeInput, _ string) { prevs <- in.Previous })
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{ResourceTypes: []*xdsclient.ResourceType{rt}})
	w := newTestWatcher()
	defer c.WatchResource(rt, "lis", w)()
	next := func() xdsclient.ResourceData {
		t.Helper()
		select {
		case p := <-prevs:
			return p
		case <-ctx.Done():
			t.Fatal("no decode")
		}
		return nil
	}
	v1, v2, v3 := testListener("lis", 1), testListener("lis", 2), testListener("lis", 3)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{v1}})
	if p := next(); p != nil {
		t.Errorf("first decode got Previous %v, want nil", p)
	}
	w.wantData(ctx, t, v1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{v2}})
	if p, ok := next().(listenerData); !ok || !proto.Equal(p.l, v1) {
		t.Errorf("second decode got Previous %v, want v1", p)
	}
	w.wantData(ctx, t, v2)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{}})
	w.wantError(ctx, t, "error", xdsclient.KindDoesNotExist)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{v3}})
	if p, ok := next().(listenerData); !ok || !proto.Equal(p.l, v2) {
		t.Errorf("decode after a deletion got Previous %v, want v2", p)
	}
}

// TestDecodeSkippedForSameBytes: a resource re-added after a deletion with
// the bytes of the last accepted value is not decoded again, and the
// watcher gets that value itself; other bytes are decoded.
func TestDecodeSkippedForSameBytes(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	var decodes atomic.Int32
	rt := observedListenerType(func(xdsclient.DecodeInput, string) { decodes.Add(1) })
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{ResourceTypes: []*xdsclient.ResourceType{rt}})
	w := newTestWatcher()
	defer c.WatchResource(rt, "lis", w)()
	v1, v2 := testListener("lis", 1), testListener("lis", 2)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{v1}})
	first := w.next(ctx, t)
	if first.kind != "data" {
		t.Fatalf("got callback %s (%v), want ResourceChanged", first.kind, first.err)
	}
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{}})
	w.wantError(ctx, t, "error", xdsclient.KindDoesNotExist)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{v1}})
	again := w.next(ctx, t)
	if again.kind != "data" || again.data.(listenerData).l != first.data.(listenerData).l {
		t.Errorf("re-added with the same bytes: got %s %v, want the first value itself", again.kind, again.data)
	}
	if n := decodes.Load(); n != 1 {
		t.Errorf("%d decodes after the same bytes were re-added, want 1", n)
	}
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{v2}})
	w.wantData(ctx, t, v2)
	if n := decodes.Load(); n != 2 {
		t.Errorf("%d decodes after other bytes, want 2", n)
	}
}
