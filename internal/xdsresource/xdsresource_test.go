package xdsresource_test

import (
	"context"
	"strings"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const defaultTestTimeout = 10 * time.Second

// update is one watcher callback, as the watcher saw it.
type update struct {
	data    xdsclient.ResourceData
	err     error
	ambient bool
}

// recorder is a watcher that forwards every callback to a channel.
type recorder struct{ ch chan update }

func newRecorder() *recorder { return &recorder{ch: make(chan update, 16)} }

func (r *recorder) ResourceChanged(d xdsclient.ResourceData, done func()) {
	r.ch <- update{data: d}
	done()
}
func (r *recorder) ResourceError(err error, done func()) { r.ch <- update{err: err}; done() }
func (r *recorder) AmbientError(err error, done func()) {
	r.ch <- update{err: err, ambient: true}
	done()
}

func (r *recorder) next(ctx context.Context, t *testing.T) update {
	t.Helper()
	select {
	case u := <-r.ch:
		return u
	case <-ctx.Done():
		t.Fatal("timed out waiting for a watcher callback")
		return update{}
	}
}

func (r *recorder) expectNone(t *testing.T, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case u := <-r.ch:
		t.Fatalf("unexpected watcher callback: %+v", u)
	case <-timer.C:
	}
}

func setup(t *testing.T) (*e2e.ManagementServer, *xdsclient.Client) {
	t.Helper()
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	cfg, err := bootstrap.Parse(e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}, NodeID: "node-1"}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := xdsclient.New(cfg, xdsclient.Options{ResourceTypes: []*xdsclient.ResourceType{xdsresource.ListenerType, xdsresource.RouteConfigType}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return ms, c
}

// TestListenerACKAndNACK: a valid server Listener is decoded into a
// filter chain table and ACKed; a Listener that filterchain rejects is NACKed
// with filterchain's reason on the wire, and the watcher keeps the good one.
func TestListenerACKAndNACK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	ms, c := setup(t)

	good := e2e.DefaultServerListener("127.0.0.1", 50051, "route-1")
	name := good.GetName()
	w := newRecorder()
	defer c.WatchResource(xdsresource.ListenerType, name, w)()
	if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{good}}); err != nil {
		t.Fatal(err)
	}
	u := w.next(ctx, t)
	lis, ok := u.data.(*xdsresource.Listener)
	if !ok {
		t.Fatalf("first callback = %+v, want a *xdsresource.Listener", u)
	}
	if got := lis.Table.DefaultChain(); got != nil {
		t.Errorf("default chain = %v, want none", got)
	}
	chains := lis.Table.Chains()
	if len(chains) != 1 || chains[0].HCM.RDSName != "route-1" {
		t.Fatalf("chains = %+v, want one chain using RDS %q", chains, "route-1")
	}
	if _, err := ms.WaitForRequest(ctx, e2e.IsACK(xdsresource.ListenerTypeURL, "1")); err != nil {
		t.Fatalf("no ACK of the good Listener: %v", err)
	}

	// Two chains with the same (empty) match: A36 says NACK.
	bad := proto.Clone(good).(*listenerpb.Listener)
	bad.FilterChains = append(bad.FilterChains, proto.Clone(bad.FilterChains[0]).(*listenerpb.FilterChain))
	bad.FilterChains[1].Name = "second"
	if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{bad}}); err != nil {
		t.Fatal(err)
	}
	nack, err := ms.WaitForRequest(ctx, e2e.IsNACK(xdsresource.ListenerTypeURL))
	if err != nil {
		t.Fatalf("no NACK of the duplicate-matcher Listener: %v", err)
	}
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, name) || !strings.Contains(msg, `"second"`) || !strings.Contains(msg, "duplicates") {
		t.Errorf("NACK error_detail = %q, want the Listener name and the duplicate chain named", msg)
	}
	if u := w.next(ctx, t); !u.ambient {
		t.Fatalf("after the NACK the watcher got %+v, want an ambient error (the good Listener stays)", u)
	}
}

// TestListenerIdenticalResendIsDropped: Equal makes a re-send of the same
// Listener invisible to watchers.
func TestListenerIdenticalResendIsDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	ms, c := setup(t)
	lis := e2e.DefaultServerListener("127.0.0.1", 50052, "")
	w := newRecorder()
	defer c.WatchResource(xdsresource.ListenerType, lis.GetName(), w)()
	for _, version := range []string{"1", "2"} {
		if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{proto.Clone(lis).(*listenerpb.Listener)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := ms.WaitForRequest(ctx, e2e.IsACK(xdsresource.ListenerTypeURL, version)); err != nil {
			t.Fatalf("no ACK of version %s: %v", version, err)
		}
	}
	if u := w.next(ctx, t); u.data == nil {
		t.Fatalf("first callback = %+v, want the Listener", u)
	}
	w.expectNone(t, 200*time.Millisecond)
}

// TestAPIListenerIsNACKed: a client's API listener is not a server Listener.
func TestAPIListenerIsNACKed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	ms, c := setup(t)
	lis := &listenerpb.Listener{Name: "api", ApiListener: &listenerpb.ApiListener{}}
	w := newRecorder()
	defer c.WatchResource(xdsresource.ListenerType, "api", w)()
	if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{lis}}); err != nil {
		t.Fatal(err)
	}
	nack, err := ms.WaitForRequest(ctx, e2e.IsNACK(xdsresource.ListenerTypeURL))
	if err != nil {
		t.Fatal(err)
	}
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "API listener") {
		t.Errorf("NACK error_detail = %q, want it to say the Listener is an API listener", msg)
	}
	if u := w.next(ctx, t); u.err == nil || u.ambient {
		t.Fatalf("watcher got %+v, want a resource error (nothing good was ever received)", u)
	}
}

// TestRouteConfigACKAndNACK: a RouteConfiguration is compiled by routing; a
// bad regex NACKs it, naming the field.
func TestRouteConfigACKAndNACK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	ms, c := setup(t)
	rc := e2e.DefaultRouteConfig("route-1")
	w := newRecorder()
	defer c.WatchResource(xdsresource.RouteConfigType, "route-1", w)()
	if err := ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{rc}}); err != nil {
		t.Fatal(err)
	}
	u := w.next(ctx, t)
	got, ok := u.data.(*xdsresource.RouteConfig)
	if !ok {
		t.Fatalf("first callback = %+v, want a *xdsresource.RouteConfig", u)
	}
	if rt, ok := got.Router.Match("any.example.com", "/pkg.Svc/Method", nil); !ok || rt.Action.String() == "" {
		t.Fatalf("Match on the default route config = %v, %v; want a route", rt, ok)
	}

	bad := proto.Clone(rc).(*routepb.RouteConfiguration)
	bad.VirtualHosts[0].Routes[0].Match.PathSpecifier = &routepb.RouteMatch_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: "("}}
	if err := ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{bad}}); err != nil {
		t.Fatal(err)
	}
	nack, err := ms.WaitForRequest(ctx, e2e.IsNACK(xdsresource.RouteConfigTypeURL))
	if err != nil {
		t.Fatal(err)
	}
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "safe_regex") {
		t.Errorf("NACK error_detail = %q, want the bad field named", msg)
	}
}

// TestListenerEqual: Listeners that serve every connection the same way
// are Equal even when their bytes differ (a default written out, a field a
// server does not use); a different address, chain content or chain name is
// a change.
func TestListenerEqual(t *testing.T) {
	a := e2e.DefaultServerListener("127.0.0.1", 1, "r")
	aBytes, err := proto.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	// Other bytes, same effect: an explicit default, a stat prefix.
	b := proto.Clone(a).(*listenerpb.Listener)
	b.UseOriginalDst = wrapperspb.Bool(false)
	b.StatPrefix = "stats"
	otherAddr := proto.Clone(a).(*listenerpb.Listener)
	otherAddr.Address.GetSocketAddress().Address = "127.0.0.2"
	otherRoute := e2e.DefaultServerListener("127.0.0.1", 1, "r2")
	otherName := proto.Clone(a).(*listenerpb.Listener)
	otherName.FilterChains[0].Name = "renamed"

	da := decodeBytes(t, aBytes)
	if !da.Equal(decodeBytes(t, aBytes)) {
		t.Error("the same bytes decoded twice are not Equal")
	}
	if !da.Equal(decode(t, b)) {
		t.Error("a Listener with only a default written out and a stat prefix added is not Equal")
	}
	for desc, l := range map[string]*listenerpb.Listener{"another address": otherAddr, "another RDS name": otherRoute, "a renamed chain": otherName} {
		if da.Equal(decode(t, l)) {
			t.Errorf("a Listener with %s is Equal", desc)
		}
	}
	if !decode(t, otherAddr).Equal(decode(t, proto.Clone(otherAddr).(*listenerpb.Listener))) {
		t.Error("a Listener is not Equal to its clone")
	}
}

func decode(t *testing.T, l *listenerpb.Listener) xdsclient.ResourceData {
	t.Helper()
	b, err := proto.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return decodeBytes(t, b)
}

func decodeBytes(t *testing.T, b []byte) xdsclient.ResourceData {
	t.Helper()
	in := xdsclient.DecodeInput{Resource: &anypb.Any{TypeUrl: xdsresource.ListenerTypeURL, Value: b}}
	_, d, err := xdsresource.ListenerType.Decode(in)
	if err != nil {
		t.Fatalf("Decode failed: %v", err)
	}
	return d
}

// TestDecodersKnowRBAC: the decoders parse RBAC filter configs and
// RBACPerRoute overrides with nothing but this package linked: what they
// accept does not depend on another package registering the filter.
func TestDecodersKnowRBAC(t *testing.T) {
	rc := e2e.DefaultRouteConfig("r")
	a, err := anypb.New(&rbacpb.RBACPerRoute{})
	if err != nil {
		t.Fatal(err)
	}
	rc.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{"rbac": a}
	b, err := proto.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	in := xdsclient.DecodeInput{Resource: &anypb.Any{TypeUrl: xdsresource.RouteConfigTypeURL, Value: b}}
	if _, _, err := xdsresource.RouteConfigType.Decode(in); err != nil {
		t.Errorf("RouteConfiguration with an RBACPerRoute override: %v, want it accepted", err)
	}
}

// TestDecodeOtherBytesCompilesTable: a Listener with Previous whose bytes
// differ, even when equivalent, gets a table of its own. (The same bytes
// are not decoded at all: the xDS client reuses the previous value.)
func TestDecodeOtherBytesCompilesTable(t *testing.T) {
	l := e2e.DefaultServerListener("127.0.0.1", 8080, "")
	b, err := proto.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	first := decodeBytes(t, b).(*xdsresource.Listener)
	l.StatPrefix = "other"
	b2, err := proto.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	in := xdsclient.DecodeInput{Resource: &anypb.Any{TypeUrl: xdsresource.ListenerTypeURL, Value: b2}, Previous: first}
	name, d, err := xdsresource.ListenerType.Decode(in)
	if err != nil || name != l.GetName() {
		t.Fatalf("Decode = %q, %v; want %q", name, err, l.GetName())
	}
	if d.(*xdsresource.Listener).Table == first.Table {
		t.Error("other bytes with Previous shared the previous table, want a compiled one")
	}
}
