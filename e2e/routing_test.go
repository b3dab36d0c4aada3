package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	pubxdsclient "github.com/proxyless-grpc/xds/xdsclient"
)

// startServing starts a server for env on 127.0.0.1 with opts, publishes
// listener(addr) (and routes), and waits until it serves.
func startServing(ctx context.Context, t *testing.T, env *testEnv, listener func(net.Addr) *listenerpb.Listener, routes []*routepb.RouteConfiguration, opts ...grpc.ServerOption) (*testServer, net.Addr) {
	t.Helper()
	s := env.newServer(t, opts...)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	env.update(ctx, t, []*listenerpb.Listener{listener(lis.Addr())}, routes)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	return s, lis.Addr()
}

// rpcResult makes the RPC named by method ("EmptyCall", "UnaryCall",
// "FullDuplexCall") on c and returns its error.
func rpcResult(ctx context.Context, c *testClient, method string, opts ...grpc.CallOption) error {
	switch method {
	case "EmptyCall":
		_, err := c.EmptyCall(ctx, &testpb.Empty{}, opts...)
		return err
	case "UnaryCall":
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, opts...)
		return err
	case "FullDuplexCall":
		s, err := c.FullDuplexCall(ctx, opts...)
		if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallRequest{}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if _, err := s.Recv(); err != nil {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		if _, err := s.Recv(); !errors.Is(err, io.EOF) {
			return fmt.Errorf("stream end: got %v, want io.EOF", err)
		}
		return nil
	}
	panic("unknown method " + method)
}

// TestRouting_VirtualHostByAuthority checks that the virtual host is picked
// by :authority with A28's precedence (exact, suffix wildcard, prefix
// wildcard, "*"), and that an authority no virtual host matches gets
// UNAVAILABLE.
func TestRouting_VirtualHostByAuthority(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	vh := func(name string, domains []string, allowed ...string) *routepb.VirtualHost {
		var routes []*routepb.Route
		for _, p := range allowed {
			routes = append(routes, nonForwarding(pathMatch(p)))
		}
		return &routepb.VirtualHost{Name: name, Domains: domains, Routes: append(routes, clientRoute(prefixMatch("/")))}
	}
	rc := &routepb.RouteConfiguration{Name: "by-authority", VirtualHosts: []*routepb.VirtualHost{
		vh("exact", []string{"foo.example.com"}, methodEmpty),
		vh("suffix", []string{"*.example.com"}, methodUnary),
		vh("prefix", []string{"foo.*"}, methodEmpty, methodUnary),
	}}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A", routes: rc}}, nil)
	}, nil)

	tests := []struct {
		desc      string
		authority string
		wantEmpty codes.Code
		wantUnary codes.Code
	}{
		{desc: "exact domain", authority: "foo.example.com", wantEmpty: codes.OK, wantUnary: codes.Unavailable},
		{desc: "suffix wildcard", authority: "bar.example.com", wantEmpty: codes.Unavailable, wantUnary: codes.OK},
		{desc: "prefix wildcard", authority: "foo.test", wantEmpty: codes.OK, wantUnary: codes.OK},
		{desc: "no virtual host", authority: "other.test", wantEmpty: codes.Unavailable, wantUnary: codes.Unavailable},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			c := newClient(t, addr, "127.0.0.1", 0, grpc.WithAuthority(test.authority))
			if got := c.emptyCall(ctx); got != test.wantEmpty {
				t.Errorf("EmptyCall with authority %q: %v, want %v", test.authority, got, test.wantEmpty)
			}
			if got := c.unaryCall(ctx); got != test.wantUnary {
				t.Errorf("UnaryCall with authority %q: %v, want %v", test.authority, got, test.wantUnary)
			}
			// A refusal must not break the connection: one dial, and the
			// channel stays READY. (grpc-go publishes a new picker before
			// the channel's state, so an RPC can finish before the state
			// reads READY: wait for it rather than sample it.)
			for st := c.GetState(); st != connectivity.Ready; st = c.GetState() {
				if st != connectivity.Connecting || !c.WaitForStateChange(ctx, st) {
					t.Fatalf("connection state after refused RPCs %v, want READY", st)
				}
			}
			if n := c.dials.Load(); n != 1 {
				t.Errorf("the client dialed %d times, want 1 (a refusal must not break the connection)", n)
			}
		})
	}
}

// TestRouting_RouteActions checks route selection by path and headers and
// that only non_forwarding_action lets an RPC through: other actions and no
// matching route fail it with UNAVAILABLE and a message that says why.
func TestRouting_RouteActions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	withHeader := pathMatch(methodUnary)
	withHeader.Headers = []*routepb.HeaderMatcher{{Name: "x-allow", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{
		StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "yes"}},
	}}}
	rc := routeConfig("actions", []*routepb.Route{
		nonForwarding(pathMatch(methodEmpty)),
		nonForwarding(withHeader),
		clientRoute(pathMatch(methodUnary)),
		// FullDuplexCall: no route.
	})
	// A redirect route on another virtual host.
	rc.VirtualHosts = append(rc.VirtualHosts, &routepb.VirtualHost{
		Name: "redirect", Domains: []string{"redirect.test"},
		Routes: []*routepb.Route{{Match: prefixMatch("/"), Action: &routepb.Route_Redirect{Redirect: &routepb.RedirectAction{HostRedirect: "x"}}}},
	})
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A", routes: rc}}, nil)
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	cRedirect := newClient(t, addr, "127.0.0.1", 0, grpc.WithAuthority("redirect.test"))

	tests := []struct {
		desc     string
		client   *testClient
		method   string
		md       []string
		wantCode codes.Code
		wantMsg  string // a word the message must contain
	}{
		{desc: "non_forwarding_action", client: c, method: "EmptyCall", wantCode: codes.OK},
		{desc: "header match, non_forwarding_action", client: c, method: "UnaryCall", md: []string{"x-allow", "yes"}, wantCode: codes.OK},
		{desc: "route action", client: c, method: "UnaryCall", md: []string{"x-allow", "no"}, wantCode: codes.Unavailable, wantMsg: "non_forwarding_action"},
		{desc: "no matching route", client: c, method: "FullDuplexCall", wantCode: codes.Unavailable, wantMsg: "route"},
		{desc: "redirect action", client: cRedirect, method: "EmptyCall", wantCode: codes.Unavailable, wantMsg: "non_forwarding_action"},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			rctx := ctx
			if test.md != nil {
				rctx = metadataCtx(ctx, test.md...)
			}
			err := rpcResult(rctx, test.client, test.method)
			if got := status.Code(err); got != test.wantCode {
				t.Fatalf("%s: %v, want code %v", test.method, err, test.wantCode)
			}
			if test.wantMsg != "" && !strings.Contains(status.Convert(err).Message(), test.wantMsg) {
				t.Errorf("%s refused with message %q, want it to say why (%q)", test.method, status.Convert(err).Message(), test.wantMsg)
			}
		})
	}
}

// TestRouting_RDS checks a chain whose routes come over RDS: the first
// Listener is not applied (the server does not serve) until the
// RouteConfiguration has arrived; then RPCs follow it; an RDS update applies
// to the existing connection at once, without a reconnect or a drain.
func TestRouting_RDS(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	addr := lis.Addr()
	l := testListener(addr, []chainSpec{{name: "A", rds: "rds-A"}}, nil)

	// The Listener without its RouteConfiguration: not serving yet.
	env.update(ctx, t, []*listenerpb.Listener{l}, nil)
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.RouteType, "rds-A")); err != nil {
		t.Fatalf("waiting for the RDS subscription: %v", err)
	}
	s.modes.expectNoneBy(ctx, t, env.ms, addr)
	expectClosedNoBytes(t, addr, "127.0.0.1")

	// The RouteConfiguration: serving, with its routes.
	env.update(ctx, t, []*listenerpb.Listener{l}, []*routepb.RouteConfiguration{routeConfig("rds-A", chainRoutes("A", methodEmpty, methodStream))})
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK", got)
	}
	if got := c.unaryCall(ctx); got != codes.Unavailable {
		t.Fatalf("UnaryCall: %v, want UNAVAILABLE", got)
	}
	st := c.startStream(ctx, t)

	// An RDS update reaches the existing connection.
	if err := env.ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{routeConfig("rds-A", chainRoutes("A", methodUnary, methodStream))}}); err != nil {
		t.Fatal(err)
	}
	waitForCode(ctx, t, "UnaryCall after the RDS update", codes.OK, c.unaryCallNoOpts)
	if got := c.emptyCall(ctx); got != codes.Unavailable {
		t.Errorf("EmptyCall after the RDS update: %v, want UNAVAILABLE", got)
	}
	st.pingPong(t)
	st.finish(t)
	if got := c.dials.Load(); got != 1 {
		t.Errorf("client dialed %d times, want 1 (an RDS update must not drain connections)", got)
	}
}

// TestRouting_RDSUpdateOnly checks, without touching the Listener, that an
// RDS update changes the routes of an existing connection with no
// reconnect and no serving-mode change.
func TestRouting_RDSUpdateOnly(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A", rds: "rds-A"}}, nil)
	}, []*routepb.RouteConfiguration{routeConfig("rds-A", chainRoutes("A", methodEmpty, methodStream))})
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK", got)
	}
	st := c.startStream(ctx, t)
	if err := env.ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{routeConfig("rds-A", chainRoutes("A", methodUnary, methodStream))}}); err != nil {
		t.Fatal(err)
	}
	waitForCode(ctx, t, "UnaryCall after the RDS update", codes.OK, c.unaryCallNoOpts)
	if got := c.emptyCall(ctx); got != codes.Unavailable {
		t.Errorf("EmptyCall after the RDS update: %v, want UNAVAILABLE", got)
	}
	st.pingPong(t)
	st.finish(t)
	if got := c.dials.Load(); got != 1 {
		t.Errorf("client dialed %d times, want 1 (an RDS update must not drain connections)", got)
	}
	s.modes.expectNoneBy(ctx, t, env.ms, addr, resourcev3.ListenerType, resourcev3.RouteType)
}

// TestRouting_ListenerUpdateWaitsForRDS checks that a Listener update that
// switches a chain to RDS is applied only once the RouteConfiguration has
// arrived: until then new connections get the old configuration.
func TestRouting_ListenerUpdateWaitsForRDS(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A"}}, nil)
	}, nil)
	l2 := testListener(addr, []chainSpec{{name: "A", rds: "rds-B"}}, nil)
	env.update(ctx, t, []*listenerpb.Listener{l2}, nil)
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.RouteType, "rds-B")); err != nil {
		t.Fatalf("waiting for the RDS subscription: %v", err)
	}
	// The listener has handled the update (and would have applied it too
	// early) by the time the xDS client ACKs it.
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsACK(resourcev3.ListenerType, "2")); err != nil {
		t.Fatalf("waiting for the ACK of the Listener update: %v", err)
	}
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.chainOf(ctx, t, "A", "B"); got != "A" {
		t.Fatalf("before the RouteConfiguration arrived, a new connection got chain %q's routes, want the old Listener's (%q)", got, "A")
	}
	env.update(ctx, t, []*listenerpb.Listener{l2}, []*routepb.RouteConfiguration{routeConfig("rds-B", chainRoutes("B"))})
	c2 := newClient(t, addr, "127.0.0.1", 0)
	c2.waitForChain(ctx, t, "B", "A", "B")
	s.modes.expectNoneBy(ctx, t, env.ms, addr, resourcev3.ListenerType, resourcev3.RouteType)
}

// TestRouting_RDSDoesNotExist checks that a RouteConfiguration that does not
// exist (its timer fired) lets the Listener apply, with every RPC of that
// chain failing with UNAVAILABLE saying why; when it arrives, the same
// connection serves RPCs.
func TestRouting_RDSDoesNotExist(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	pool := xdsclient.NewPool(xdsclient.Options{WatchExpiryTimeout: 500 * time.Millisecond})
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A", rds: "missing"}}, nil)
	}, nil, xds.ClientPool(xdsclient.WrapPool(pool).(*pubxdsclient.Pool)))
	c := newClient(t, addr, "127.0.0.1", 0)
	_, err := c.EmptyCall(ctx, &testpb.Empty{})
	if got := status.Code(err); got != codes.Unavailable {
		t.Fatalf("EmptyCall with a RouteConfiguration that does not exist: %v, want UNAVAILABLE", err)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "missing") || !strings.Contains(msg, "not exist") {
		t.Errorf("EmptyCall refused with %q, want a message naming the RouteConfiguration and saying it does not exist", msg)
	}
	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "A", rds: "missing"}}, nil)},
		[]*routepb.RouteConfiguration{routeConfig("missing", chainRoutes("A"))})
	waitForCode(ctx, t, "EmptyCall once the RouteConfiguration exists", codes.OK, c.emptyCallNoOpts)
	if got := c.dials.Load(); got != 1 {
		t.Errorf("client dialed %d times, want 1", got)
	}
}

// TestRouting_RDSNACK checks that a RouteConfiguration NACKed without a
// previous good version fails the chain's RPCs with UNAVAILABLE, and that a
// NACKed update of a good one keeps the good routes.
func TestRouting_RDSNACK(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	bad := routeConfig("rds-A", []*routepb.Route{nonForwarding(&routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_SafeRegex{
		SafeRegex: &matcherpb.RegexMatcher{Regex: "(unbalanced"},
	}})})
	l := func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A", rds: "rds-A"}}, nil)
	}
	_, addr := startServing(ctx, t, env, l, []*routepb.RouteConfiguration{bad})
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsNACK(resourcev3.RouteType)); err != nil {
		t.Fatalf("waiting for the NACK of the bad RouteConfiguration: %v", err)
	}
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.Unavailable {
		t.Fatalf("EmptyCall with a NACKed RouteConfiguration: %v, want UNAVAILABLE", got)
	}

	env.update(ctx, t, []*listenerpb.Listener{l(addr)}, []*routepb.RouteConfiguration{routeConfig("rds-A", chainRoutes("A"))})
	waitForCode(ctx, t, "EmptyCall with a good RouteConfiguration", codes.OK, c.emptyCallNoOpts)

	// A bad update is NACKed; the good routes stay.
	seen := len(env.ms.Requests())
	env.update(ctx, t, []*listenerpb.Listener{l(addr)}, []*routepb.RouteConfiguration{bad})
	if _, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(resourcev3.RouteType))); err != nil {
		t.Fatalf("waiting for the NACK of the second bad RouteConfiguration: %v", err)
	}
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall after a NACKed RDS update: %v, want OK (the last good routes)", got)
	}
	if got := c.dials.Load(); got != 1 {
		t.Errorf("client dialed %d times, want 1", got)
	}
}

func metadataCtx(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// TestRouting_RDSWatchLifecycle checks that an RDS watch follows the
// Listener: dropped when no chain uses the RouteConfiguration (the client
// unsubscribes), taken again when one does, and then the newest version of
// the RouteConfiguration is used; two listeners of one server using the
// same RouteConfiguration both follow its updates.
func TestRouting_RDSWatchLifecycle(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis1, _ := listen(t, "127.0.0.1")
	lis2, _ := listen(t, "127.0.0.1")
	s.serveOn(lis1)
	s.serveOn(lis2)
	a1, a2 := lis1.Addr(), lis2.Addr()
	rds := func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A", rds: "shared"}}, nil)
	}
	inline := func(a net.Addr) *listenerpb.Listener { return testListener(a, []chainSpec{{name: "I"}}, nil) }
	names := []string{"A", "B", "I"}

	env.update(ctx, t, []*listenerpb.Listener{rds(a1), rds(a2)}, []*routepb.RouteConfiguration{routeConfig("shared", chainRoutes("A"))})
	s.modes.wait(ctx, t, a1, connectivity.ServingModeServing)
	s.modes.wait(ctx, t, a2, connectivity.ServingModeServing)
	c1, c2 := newClient(t, a1, "127.0.0.1", 0), newClient(t, a2, "127.0.0.1", 0)
	c1.waitForChain(ctx, t, "A", names...)
	c2.waitForChain(ctx, t, "A", names...)

	// Both listeners follow an RDS update.
	if err := env.ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{routeConfig("shared", chainRoutes("B"))}}); err != nil {
		t.Fatal(err)
	}
	c1.waitForChain(ctx, t, "B", names...)
	c2.waitForChain(ctx, t, "B", names...)

	// Listener 1 goes inline: the watch stays for listener 2.
	env.update(ctx, t, []*listenerpb.Listener{inline(a1), rds(a2)}, nil)
	newClient(t, a1, "127.0.0.1", 0).waitForChain(ctx, t, "I", names...)
	// Both go inline: the client unsubscribes.
	env.update(ctx, t, []*listenerpb.Listener{inline(a1), inline(a2)}, nil)
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.RouteType)); err != nil {
		t.Fatalf("waiting for the unsubscription from the RouteConfiguration: %v", err)
	}
	newClient(t, a2, "127.0.0.1", 0).waitForChain(ctx, t, "I", names...)
	// Changed while unwatched; used again: the newest version applies.
	if err := env.ms.Update(ctx, e2e.Resources{Routes: []*routepb.RouteConfiguration{routeConfig("shared", chainRoutes("A"))}}); err != nil {
		t.Fatal(err)
	}
	env.update(ctx, t, []*listenerpb.Listener{rds(a1), rds(a2)}, nil)
	newClient(t, a1, "127.0.0.1", 0).waitForChain(ctx, t, "A", names...)
	newClient(t, a2, "127.0.0.1", 0).waitForChain(ctx, t, "A", names...)
	s.modes.expectNoneBy(ctx, t, env.ms, a1, resourcev3.ListenerType, resourcev3.RouteType)
}

// TestRouting_PendingListenerSuperseded checks that a Listener update
// waiting for its RouteConfiguration does not hold back a later update: a
// newer Listener with inline routes applies at once (the default 15 s
// does-not-exist timer of the first one's RDS never comes into it), and a
// deletion while an update is pending stops serving at once.
func TestRouting_PendingListenerSuperseded(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	names := []string{"A", "B", "C"}
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return testListener(a, []chainSpec{{name: "A"}}, nil)
	}, nil)
	pending := testListener(addr, []chainSpec{{name: "C", rds: "never-sent"}}, nil)

	env.update(ctx, t, []*listenerpb.Listener{pending}, nil)
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.RouteType, "never-sent")); err != nil {
		t.Fatalf("waiting for the RDS subscription: %v", err)
	}
	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: "B"}}, nil)}, nil)
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	newClient(t, addr, "127.0.0.1", 0).waitForChain(sctx, t, "B", names...)

	// Pending again, then deleted: not serving at once.
	seen := len(env.ms.Requests())
	env.update(ctx, t, []*listenerpb.Listener{pending}, nil)
	if _, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsSubscription(resourcev3.RouteType, "never-sent"))); err != nil {
		t.Fatalf("waiting for the RDS subscription: %v", err)
	}
	env.update(ctx, t, nil, nil)
	sctx2, cancel2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel2()
	s.modes.wait(sctx2, t, addr, connectivity.ServingModeNotServing)
	expectClosedNoBytes(t, addr, "127.0.0.1")
}
