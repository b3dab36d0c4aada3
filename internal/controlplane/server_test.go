package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// startServer starts a Server stopped at the end of the test.
func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

const (
	// defaultTestShortTimeout bounds waits for something that must not happen.
	defaultTestShortTimeout = 100 * time.Millisecond

	ldsType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	rdsType = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// adsClient is a bare ADS stream over a real gRPC connection, driven by hand.
type adsClient struct {
	t      *testing.T
	stream discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	resps  chan *discoverypb.DiscoveryResponse // closed when the stream fails
	err    error                               // the stream's error; read after resps is closed
}

// newADSClient opens an ADS stream to addr. The stream and connection end
// when the test ends.
func newADSClient(t *testing.T, addr string) *adsClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%q): %v", addr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutils.DefaultTimeout)
	stream, err := discoverypb.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		cc.Close()
		t.Fatalf("StreamAggregatedResources: %v", err)
	}
	c := &adsClient{t: t, stream: stream, resps: make(chan *discoverypb.DiscoveryResponse, 100)}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		defer close(c.resps)
		for {
			r, err := stream.Recv()
			if err != nil {
				c.err = err
				return
			}
			c.resps <- r
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-recvDone
		cc.Close()
	})
	return c
}

func (c *adsClient) send(req *discoverypb.DiscoveryRequest) {
	c.t.Helper()
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("sending %v: %v", req, err)
	}
}

// subscribe sends a request for names of typeURL, acknowledging ack (nil: none).
func (c *adsClient) subscribe(typeURL string, ack *discoverypb.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.send(&discoverypb.DiscoveryRequest{
		TypeUrl:       typeURL,
		ResourceNames: names,
		VersionInfo:   ack.GetVersionInfo(),
		ResponseNonce: ack.GetNonce(),
	})
}

// recv returns the next response, failing the test if none comes in time.
func (c *adsClient) recv(ctx context.Context) *discoverypb.DiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.resps:
		if !ok {
			c.t.Fatalf("stream failed while waiting for a response: %v", c.err)
		}
		return r
	case <-ctx.Done():
		c.t.Fatal("timeout waiting for a response")
	}
	return nil
}

// expectNoResponse fails the test if a response arrives within a short time.
func (c *adsClient) expectNoResponse() {
	c.t.Helper()
	timer := time.NewTimer(defaultTestShortTimeout)
	defer timer.Stop()
	select {
	case r, ok := <-c.resps:
		if ok {
			c.t.Fatalf("got unexpected response %v", r)
		}
	case <-timer.C:
	}
}

// listeners decodes the Listeners of resp, failing the test on an error.
func listeners(t *testing.T, resp *discoverypb.DiscoveryResponse) []*listenerpb.Listener {
	t.Helper()
	var out []*listenerpb.Listener
	for _, a := range resp.GetResources() {
		l := &listenerpb.Listener{}
		if err := a.UnmarshalTo(l); err != nil {
			t.Fatalf("decoding %v as a Listener: %v", a, err)
		}
		out = append(out, l)
	}
	return out
}

func checkResponse(t *testing.T, resp *discoverypb.DiscoveryResponse, wantVersion string, want ...*listenerpb.Listener) {
	t.Helper()
	if resp.GetTypeUrl() != ldsType {
		t.Errorf("response type_url = %q, want %q", resp.GetTypeUrl(), ldsType)
	}
	if resp.GetVersionInfo() != wantVersion {
		t.Errorf("response version_info = %q, want %q", resp.GetVersionInfo(), wantVersion)
	}
	// The order of resources in a response is unspecified.
	got := listeners(t, resp)
	byName := func(a, b *listenerpb.Listener) int { return strings.Compare(a.GetName(), b.GetName()) }
	slices.SortFunc(got, byName)
	want = slices.SortedFunc(slices.Values(want), byName)
	if diff := cmp.Diff(got, want, protocmp.Transform()); diff != "" {
		t.Errorf("response Listeners (-got, +want):\n%s", diff)
	}
}

func TestManagementServer_SubscribeReceiveUpdateAck(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	ms := startServer(t, Options{})
	lis := DefaultServerListener("127.0.0.1", 1234, "")
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{lis}}); err != nil {
		t.Fatal(err)
	}

	c := newADSClient(t, ms.Address)
	c.subscribe(ldsType, nil, lis.GetName())
	resp := c.recv(ctx)
	checkResponse(t, resp, "1", lis)
	if resp.GetNonce() == "" {
		t.Error("response has no nonce")
	}
	c.subscribe(ldsType, resp, lis.GetName())
	if _, err := ms.WaitForRequest(ctx, IsACK(ldsType, "1")); err != nil {
		t.Fatalf("waiting for the ACK of version 1: %v", err)
	}
	c.expectNoResponse() // an ACK is not answered until something changes

	updated := DefaultServerListener("127.0.0.1", 1234, "route-1")
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{updated}}); err != nil {
		t.Fatal(err)
	}
	resp2 := c.recv(ctx)
	checkResponse(t, resp2, "2", updated)
	if resp2.GetNonce() == resp.GetNonce() {
		t.Errorf("second response reuses nonce %q", resp.GetNonce())
	}
}

// A resource published after the client asked for it is sent at once; before
// that, the first request gets an empty answer.
func TestManagementServer_LateResource(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	ms := startServer(t, Options{})
	c := newADSClient(t, ms.Address)
	lis := DefaultServerListener("127.0.0.1", 1234, "")
	c.subscribe(ldsType, nil, lis.GetName())
	empty := c.recv(ctx)
	checkResponse(t, empty, "0")
	c.subscribe(ldsType, empty, lis.GetName())

	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{lis}}); err != nil {
		t.Fatal(err)
	}
	checkResponse(t, c.recv(ctx), "1", lis)
}

// Deleting a Listener subscribed by name sends a response without it; a type
// left out of Update is not touched.
func TestManagementServer_ListenerDeletion(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	ms := startServer(t, Options{})
	l1 := DefaultServerListener("127.0.0.1", 1, "")
	l2 := DefaultServerListener("127.0.0.1", 2, "")
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{l1, l2}}); err != nil {
		t.Fatal(err)
	}
	c := newADSClient(t, ms.Address)
	c.subscribe(ldsType, nil, l1.GetName(), l2.GetName())
	resp := c.recv(ctx)
	checkResponse(t, resp, "1", l1, l2)
	c.subscribe(ldsType, resp, l1.GetName(), l2.GetName())

	// Only routes change: no Listener response.
	if err := ms.Update(ctx, Resources{Routes: []*routepb.RouteConfiguration{DefaultRouteConfig("r")}}); err != nil {
		t.Fatal(err)
	}
	c.expectNoResponse()

	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{l2}}); err != nil {
		t.Fatal(err)
	}
	resp = c.recv(ctx)
	checkResponse(t, resp, "2", l2)
	c.subscribe(ldsType, resp, l1.GetName(), l2.GetName())

	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{}}); err != nil {
		t.Fatal(err)
	}
	checkResponse(t, c.recv(ctx), "3")
}

// A RouteConfiguration deletion cannot be expressed in state-of-the-world, so
// nothing is sent; a new version of it is.
func TestManagementServer_RouteDeletionNotSent(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	ms := startServer(t, Options{})
	rc := DefaultRouteConfig("route-1")
	if err := ms.Update(ctx, Resources{Routes: []*routepb.RouteConfiguration{rc}}); err != nil {
		t.Fatal(err)
	}
	c := newADSClient(t, ms.Address)
	c.subscribe(rdsType, nil, rc.GetName())
	resp := c.recv(ctx)
	if got := len(resp.GetResources()); got != 1 || resp.GetVersionInfo() != "1" {
		t.Fatalf("got %d routes at version %q, want 1 at version 1", got, resp.GetVersionInfo())
	}
	c.subscribe(rdsType, resp, rc.GetName())
	if err := ms.Update(ctx, Resources{Routes: []*routepb.RouteConfiguration{}}); err != nil {
		t.Fatal(err)
	}
	c.expectNoResponse()
	if err := ms.Update(ctx, Resources{Routes: []*routepb.RouteConfiguration{rc}}); err != nil {
		t.Fatal(err)
	}
	if resp := c.recv(ctx); len(resp.GetResources()) != 1 || resp.GetVersionInfo() != "3" {
		t.Fatalf("got %d routes at version %q, want 1 at version 3", len(resp.GetResources()), resp.GetVersionInfo())
	}
}

func nack(resp *discoverypb.DiscoveryResponse, lastGood string, names ...string) *discoverypb.DiscoveryRequest {
	return &discoverypb.DiscoveryRequest{
		TypeUrl:       resp.GetTypeUrl(),
		ResourceNames: names,
		VersionInfo:   lastGood,
		ResponseNonce: resp.GetNonce(),
		ErrorDetail:   &status.Status{Code: 3, Message: "bad resource"},
	}
}

// A NACK is recorded as sent and is not answered (also a NACK of the first
// response, which the cache alone would answer again at once); the next
// update is.
func TestManagementServer_NACK(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	ms := startServer(t, Options{})
	lis := DefaultServerListener("127.0.0.1", 1, "")
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{lis}}); err != nil {
		t.Fatal(err)
	}
	c := newADSClient(t, ms.Address)
	c.subscribe(ldsType, nil, lis.GetName())
	resp := c.recv(ctx)

	sent := nack(resp, "", lis.GetName())
	c.send(sent)
	got, err := ms.WaitForRequest(ctx, IsNACK(ldsType))
	if err != nil {
		t.Fatalf("waiting for the NACK: %v", err)
	}
	if diff := cmp.Diff(got, sent, protocmp.Transform(), protocmp.IgnoreFields(&discoverypb.DiscoveryRequest{}, "node")); diff != "" {
		t.Errorf("recorded NACK (-got, +want):\n%s", diff)
	}
	c.expectNoResponse()

	lis2 := DefaultServerListener("127.0.0.1", 1, "route")
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{lis2}}); err != nil {
		t.Fatal(err)
	}
	resp = c.recv(ctx)
	checkResponse(t, resp, "2", lis2)
	c.subscribe(ldsType, resp, lis.GetName())
	if _, err := ms.WaitForRequest(ctx, IsACK(ldsType, "2")); err != nil {
		t.Fatalf("waiting for the ACK: %v", err)
	}

	// A NACK after an accepted version names that version.
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{lis}}); err != nil {
		t.Fatal(err)
	}
	resp = c.recv(ctx)
	c.send(nack(resp, "2", lis.GetName()))
	got, err = ms.WaitForRequest(ctx, func(r *discoverypb.DiscoveryRequest) bool {
		return IsNACK(ldsType)(r) && r.GetResponseNonce() == resp.GetNonce()
	})
	if err != nil {
		t.Fatalf("waiting for the second NACK: %v", err)
	}
	if got.GetVersionInfo() != "2" {
		t.Errorf("second NACK has version_info %q, want 2", got.GetVersionInfo())
	}
	c.expectNoResponse()
}

func TestManagementServer_StopRestartKeepsResources(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	var mu sync.Mutex
	var opened, closed []int64
	ms := startServer(t, Options{
		OnStreamOpen:   func(id int64) { mu.Lock(); opened = append(opened, id); mu.Unlock() },
		OnStreamClosed: func(id int64) { mu.Lock(); closed = append(closed, id); mu.Unlock() },
	})
	lis := DefaultServerListener("127.0.0.1", 1, "")
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{lis}}); err != nil {
		t.Fatal(err)
	}
	addr := ms.Address
	c := newADSClient(t, addr)
	c.subscribe(ldsType, nil, lis.GetName())
	checkResponse(t, c.recv(ctx), "1", lis)

	ms.Stop()
	ms.Stop() // idempotent
	select {
	case r, ok := <-c.resps:
		if ok {
			t.Fatalf("got response %v after Stop, want the stream to end", r)
		}
	case <-ctx.Done():
		t.Fatal("timeout waiting for the stream to end after Stop")
	}

	if err := ms.Restart(); err != nil {
		t.Fatal(err)
	}
	if ms.Address != addr {
		t.Fatalf("Address after Restart = %q, want %q", ms.Address, addr)
	}
	c2 := newADSClient(t, addr)
	c2.subscribe(ldsType, nil, lis.GetName())
	checkResponse(t, c2.recv(ctx), "1", lis)
	ms.Stop()

	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(opened, []int64{1, 2}); diff != "" {
		t.Errorf("opened streams (-got, +want):\n%s", diff)
	}
	if diff := cmp.Diff(closed, []int64{1, 2}); diff != "" {
		t.Errorf("closed streams (-got, +want):\n%s", diff)
	}
}

func TestManagementServer_CustomListener(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ms := startServer(t, Options{Listener: lis})
	if ms.Address != lis.Addr().String() {
		t.Fatalf("Address = %q, want the listener's %q", ms.Address, lis.Addr())
	}
	l := DefaultServerListener("127.0.0.1", 1, "")
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{l}}); err != nil {
		t.Fatal(err)
	}
	if err := ms.Restart(); err != nil {
		t.Fatal(err)
	}
	c := newADSClient(t, lis.Addr().String())
	c.subscribe(ldsType, nil, l.GetName())
	checkResponse(t, c.recv(ctx), "1", l)
}

// Invalid resources are delivered as pushed: a Listener that gRPC must NACK,
// and a RouteConfiguration pushed under the Listener type URL.
func TestManagementServer_InvalidResourcesUnchanged(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	ms := startServer(t, Options{})
	bad := DefaultServerListener("127.0.0.1", 1, "")
	bad.UseOriginalDst = wrapperspb.Bool(true)
	wrongType := DefaultRouteConfig("not-a-listener")
	nameless := &wrapperspb.StringValue{Value: "nameless"}
	if err := ms.Update(ctx, Resources{
		Listeners: []*listenerpb.Listener{bad},
		Raw:       map[string][]proto.Message{ldsType: {wrongType}},
		NamedRaw:  map[string]map[string]proto.Message{ldsType: {"custom-name": nameless}},
	}); err != nil {
		t.Fatal(err)
	}
	c := newADSClient(t, ms.Address)
	c.subscribe(ldsType, nil, bad.GetName(), "not-a-listener", "custom-name")
	resp := c.recv(ctx)

	want := map[string]proto.Message{bad.GetName(): bad, "not-a-listener": wrongType, "custom-name": nameless}
	if len(resp.GetResources()) != len(want) {
		t.Fatalf("got %d resources, want %d", len(resp.GetResources()), len(want))
	}
	got := map[string]proto.Message{}
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != ldsType {
			t.Errorf("resource type_url = %q, want %q", a.GetTypeUrl(), ldsType)
		}
		// Identify each resource by its bytes.
		for name, m := range want {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) == string(a.GetValue()) {
				got[name] = m
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("resources delivered unchanged: %v; want all of %v", keys(got), keys(want))
	}
	l := &listenerpb.Listener{}
	for _, a := range resp.GetResources() {
		if err := anypb.UnmarshalTo(a, l, proto.UnmarshalOptions{}); err == nil && l.GetName() == bad.GetName() {
			if !l.GetUseOriginalDst().GetValue() {
				t.Error("use_original_dst was not delivered")
			}
		}
	}
}

func keys(m map[string]proto.Message) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestManagementServer_UpdateErrors(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	ms := startServer(t, Options{})
	l := DefaultServerListener("127.0.0.1", 1, "")
	tests := []struct {
		desc string
		r    Resources
	}{
		{desc: "unsupported type URL", r: Resources{Raw: map[string][]proto.Message{"type.googleapis.com/foo.Bar": {}}}},
		{desc: "nameless raw message", r: Resources{Raw: map[string][]proto.Message{ldsType: {&wrapperspb.StringValue{}}}}},
		{desc: "nil listener", r: Resources{Listeners: []*listenerpb.Listener{nil}}},
		{desc: "duplicate name across fields", r: Resources{Listeners: []*listenerpb.Listener{l}, Raw: map[string][]proto.Message{ldsType: {l}}}},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			if err := ms.Update(ctx, test.r); err == nil {
				t.Error("Update succeeded, want an error")
			}
		})
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := ms.Update(cctx, Resources{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a cancelled context = %v, want %v", err, context.Canceled)
	}

	// Nothing was changed by the failed updates.
	c := newADSClient(t, ms.Address)
	c.subscribe(ldsType, nil, l.GetName())
	checkResponse(t, c.recv(ctx), "0")
}

func TestManagementServer_RequestsAndCallbacks(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	var mu sync.Mutex
	var seen []string
	ms := startServer(t, Options{
		OnStreamRequest: func(id int64, req *discoverypb.DiscoveryRequest) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, req.GetTypeUrl())
		},
	})
	c := newADSClient(t, ms.Address)
	c.subscribe(ldsType, nil, "a")
	c.recv(ctx)
	c.subscribe(rdsType, nil, "r")
	c.recv(ctx)

	reqs := ms.Requests()
	if len(reqs) != 2 || reqs[0].GetTypeUrl() != ldsType || reqs[1].GetTypeUrl() != rdsType {
		t.Fatalf("Requests() = %v, want an LDS then an RDS request", reqs)
	}
	reqs[0].TypeUrl = "changed"
	if got := ms.Requests()[0].GetTypeUrl(); got != ldsType {
		t.Errorf("Requests() returned the recorded request itself: modifying it changed the record to %q", got)
	}
	mu.Lock()
	if diff := cmp.Diff(seen, []string{ldsType, rdsType}); diff != "" {
		t.Errorf("OnStreamRequest saw (-got, +want):\n%s", diff)
	}
	mu.Unlock()

	// WaitForRequest finds past requests, and future ones.
	if _, err := ms.WaitForRequest(ctx, IsSubscription(ldsType, "a")); err != nil {
		t.Errorf("WaitForRequest for a past request: %v", err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := ms.WaitForRequest(ctx, IsSubscription(ldsType, "a", "b"))
		errc <- err
	}()
	c.subscribe(ldsType, nil, "b", "a")
	if err := <-errc; err != nil {
		t.Errorf("WaitForRequest for a future request: %v", err)
	}

	sctx, cancel := context.WithTimeout(ctx, defaultTestShortTimeout)
	defer cancel()
	if _, err := ms.WaitForRequest(sctx, IsNACK(ldsType)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitForRequest for a request never sent = %v, want %v", err, context.DeadlineExceeded)
	}
}

// DefaultServerListener is a minimal server Listener for host:port, named as
// gRPC servers name theirs; routeName, when set, is in its HTTP connection
// manager's stat prefix so that Listeners for different routes differ. The
// server validates nothing, so no more is needed.
func DefaultServerListener(host string, port uint32, routeName string) *listenerpb.Listener {
	return &listenerpb.Listener{
		Name:       fmt.Sprintf("grpc/server?xds.resource.listening_address=%s:%d", host, port),
		StatPrefix: routeName,
	}
}

// DefaultRouteConfig is a minimal RouteConfiguration.
func DefaultRouteConfig(name string) *routepb.RouteConfiguration {
	return &routepb.RouteConfiguration{Name: name, VirtualHosts: []*routepb.VirtualHost{{Name: "vh", Domains: []string{"*"}}}}
}

// WaitForAnswer returns once a client ACKed or NACKed the version the last
// Update published, not before, and at once for a type never updated.
func TestManagementServer_WaitForAnswer(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	ms := startServer(t, Options{})
	if err := ms.WaitForAnswer(ctx, ldsType); err != nil {
		t.Fatalf("WaitForAnswer before any Update: %v", err)
	}
	lis := DefaultServerListener("127.0.0.1", 1, "")
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{lis}}); err != nil {
		t.Fatal(err)
	}
	c := newADSClient(t, ms.Address)
	c.subscribe(ldsType, nil, lis.GetName())
	resp := c.recv(ctx)
	// Unanswered: the wait ends with its context.
	sctx, cancel := context.WithTimeout(ctx, defaultTestShortTimeout)
	defer cancel()
	if err := ms.WaitForAnswer(sctx, ldsType); err == nil {
		t.Fatal("WaitForAnswer returned nil before the response was answered")
	}
	c.send(nack(resp, "", lis.GetName()))
	if err := ms.WaitForAnswer(ctx, ldsType); err != nil {
		t.Fatalf("WaitForAnswer after a NACK: %v", err)
	}

	lis2 := DefaultServerListener("127.0.0.1", 1, "route")
	if err := ms.Update(ctx, Resources{Listeners: []*listenerpb.Listener{lis2}}); err != nil {
		t.Fatal(err)
	}
	resp = c.recv(ctx)
	c.subscribe(ldsType, resp, lis.GetName())
	if err := ms.WaitForAnswer(ctx, ldsType); err != nil {
		t.Fatalf("WaitForAnswer after an ACK: %v", err)
	}
}
