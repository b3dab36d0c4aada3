package e2e_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	pubxdsclient "github.com/proxyless-grpc/xds/xdsclient"
)

// TestNewGRPCServer_BootstrapErrors checks that NewGRPCServer fails, with an
// error that names the problem, without a usable bootstrap (gRFC A36: no
// default for server_listener_resource_name_template).
func TestNewGRPCServer_BootstrapErrors(t *testing.T) {
	noTemplate := e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{"127.0.0.1:1"}, NodeID: "n"})
	tests := []struct {
		desc     string
		env      map[string]string
		opts     []grpc.ServerOption
		wantWord string // a word the error must contain, case-insensitively
		wantErr  error  // if set, the error must match it (errors.Is)
	}{
		{
			desc:     "no bootstrap at all",
			env:      map[string]string{"GRPC_XDS_BOOTSTRAP": "", "GRPC_XDS_BOOTSTRAP_CONFIG": ""},
			wantWord: "bootstrap",
			wantErr:  bootstrap.ErrNoBootstrap,
		},
		{
			desc:     "bootstrap file does not exist",
			env:      map[string]string{"GRPC_XDS_BOOTSTRAP": filepath.Join(t.TempDir(), "missing.json"), "GRPC_XDS_BOOTSTRAP_CONFIG": ""},
			wantWord: "missing.json",
			wantErr:  fs.ErrNotExist,
		},
		{
			desc:     "invalid JSON in the option",
			env:      map[string]string{"GRPC_XDS_BOOTSTRAP": "", "GRPC_XDS_BOOTSTRAP_CONFIG": ""},
			opts:     []grpc.ServerOption{xds.BootstrapContents([]byte(`{"xds_servers": [`))},
			wantWord: "bootstrap",
		},
		{
			desc:     "invalid JSON in GRPC_XDS_BOOTSTRAP_CONFIG",
			env:      map[string]string{"GRPC_XDS_BOOTSTRAP": "", "GRPC_XDS_BOOTSTRAP_CONFIG": `not json`},
			wantWord: "bootstrap",
		},
		{
			desc:     "no xds_servers",
			env:      map[string]string{"GRPC_XDS_BOOTSTRAP": "", "GRPC_XDS_BOOTSTRAP_CONFIG": ""},
			opts:     []grpc.ServerOption{xds.BootstrapContents([]byte(`{"node": {"id": "n"}, "server_listener_resource_name_template": "x/%s"}`))},
			wantWord: "xds_servers",
			wantErr:  bootstrap.ErrMissingField,
		},
		{
			desc:     "no server_listener_resource_name_template",
			env:      map[string]string{"GRPC_XDS_BOOTSTRAP": "", "GRPC_XDS_BOOTSTRAP_CONFIG": ""},
			opts:     []grpc.ServerOption{xds.BootstrapContents(noTemplate)},
			wantWord: "server_listener_resource_name_template",
		},
		{
			desc:     "no server_listener_resource_name_template, from the environment",
			env:      map[string]string{"GRPC_XDS_BOOTSTRAP": "", "GRPC_XDS_BOOTSTRAP_CONFIG": string(noTemplate)},
			wantWord: "server_listener_resource_name_template",
		},
		{
			desc:     "negative DrainGraceTime",
			env:      map[string]string{"GRPC_XDS_BOOTSTRAP": "", "GRPC_XDS_BOOTSTRAP_CONFIG": ""},
			opts:     []grpc.ServerOption{xds.BootstrapContents(validBootstrap(t)), xds.DrainGraceTime(-time.Second)},
			wantWord: "DrainGraceTime",
		},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			for k, v := range test.env {
				t.Setenv(k, v)
			}
			s, err := xds.NewGRPCServer(test.opts...)
			if err == nil {
				s.Stop()
				t.Fatal("NewGRPCServer succeeded, want an error")
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(test.wantWord)) {
				t.Errorf("NewGRPCServer error %q does not name the problem (%q)", err, test.wantWord)
			}
			if test.wantErr != nil && !errors.Is(err, test.wantErr) {
				t.Errorf("NewGRPCServer error %v does not match %v", err, test.wantErr)
			}
		})
	}
}

func validBootstrap(t *testing.T) []byte {
	return e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{"127.0.0.1:1"},
		NodeID:                             "n",
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
	})
}

// TestNewGRPCServer_BootstrapFromEnvironment checks that the bootstrap is
// read from the environment when NewGRPCServer runs (not at init), from
// the file named by GRPC_XDS_BOOTSTRAP before GRPC_XDS_BOOTSTRAP_CONFIG (the
// order of grpc-go, grpc-java and C-core), and that the option wins over
// both: the server subscribes to the Listener named by the
// template of the bootstrap it should use.
func TestNewGRPCServer_BootstrapFromEnvironment(t *testing.T) {
	for _, src := range []string{"option", "GRPC_XDS_BOOTSTRAP", "GRPC_XDS_BOOTSTRAP_CONFIG"} {
		t.Run(src, func(t *testing.T) {
			ctx := testContext(t)
			ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
			good := e2e.Bootstrap(t, e2e.BootstrapOptions{
				ServerURIs:                         []string{ms.Address},
				NodeID:                             "node-" + src,
				ServerListenerResourceNameTemplate: "from-" + src + "/%s",
			})
			// A bootstrap of lower precedence names another template.
			other := e2e.Bootstrap(t, e2e.BootstrapOptions{
				ServerURIs:                         []string{ms.Address},
				NodeID:                             "node-other",
				ServerListenerResourceNameTemplate: "wrong/%s",
			})
			file := filepath.Join(t.TempDir(), "bootstrap.json")
			var opts []grpc.ServerOption
			switch src {
			case "option":
				t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", string(other))
				t.Setenv("GRPC_XDS_BOOTSTRAP", "")
				opts = append(opts, xds.BootstrapContents(good))
			case "GRPC_XDS_BOOTSTRAP":
				if err := os.WriteFile(file, good, 0o600); err != nil {
					t.Fatal(err)
				}
				t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", string(other))
				t.Setenv("GRPC_XDS_BOOTSTRAP", file)
			case "GRPC_XDS_BOOTSTRAP_CONFIG":
				t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", string(good))
				t.Setenv("GRPC_XDS_BOOTSTRAP", "")
			}
			s, err := xds.NewGRPCServer(opts...)
			if err != nil {
				t.Fatalf("NewGRPCServer: %v", err)
			}
			lis, _ := listen(t, "127.0.0.1")
			defer lis.Close()
			done := make(chan error, 1)
			go func() { done <- s.Serve(lis) }()
			defer func() {
				s.Stop()
				if err := <-done; err != nil {
					t.Errorf("Serve returned %v after Stop, want nil", err)
				}
			}()
			want := "from-" + src + "/" + lis.Addr().String()
			if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.ListenerType, want)); err != nil {
				t.Fatalf("waiting for a subscription to Listener %q: %v", want, err)
			}
		})
	}
}

// TestServe_RequiresTCPListener checks that Serve refuses a listener that is
// not TCP (the Listener name needs ip:port).
func TestServe_RequiresTCPListener(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatalf("net.Listen(unix): %v", err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Serve(unix listener) returned nil, want an error")
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("Serve(unix listener) did not return")
	}
}

// TestServe_ClosedListener checks that Serve returns an error, not nil,
// when its socket cannot be used.
func TestServe_ClosedListener(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	lis.Close()
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Serve(closed listener) returned nil, want an error")
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("Serve(closed listener) did not return")
	}
}

// TestServe_StopAndServeAfterStop checks Serve's results: nil once Stop (or
// GracefulStop) ends it, grpc.ErrServerStopped when called after Stop.
func TestServe_StopAndServeAfterStop(t *testing.T) {
	t.Parallel()
	for _, stop := range []string{"Stop", "GracefulStop"} {
		t.Run(stop, func(t *testing.T) {
			ctx := testContext(t)
			env := newTestEnv(t)
			s := env.newServer(t)
			lis, _ := listen(t, "127.0.0.1")
			s.serveOn(lis)
			// Serve has started once the server subscribes to its Listener.
			name := e2e.ServerListenerName(hostPort(lis.Addr()))
			if _, err := env.ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.ListenerType, name)); err != nil {
				t.Fatalf("waiting for the Listener subscription: %v", err)
			}
			if stop == "Stop" {
				s.Stop()
			} else {
				s.GracefulStop()
			}
			s.waitServeReturned(nil)

			lis2, _ := listen(t, "127.0.0.1")
			defer lis2.Close()
			done := make(chan error, 1)
			go func() { done <- s.Serve(lis2) }()
			select {
			case err := <-done:
				if !errors.Is(err, grpc.ErrServerStopped) {
					t.Fatalf("Serve after %s returned %v, want grpc.ErrServerStopped", stop, err)
				}
			case <-time.After(defaultTestTimeout):
				t.Fatalf("Serve after %s did not return", stop)
			}
		})
	}
}

// TestServe_ListenerName checks the name of the Listener a server watches:
// the template with %s replaced by the bound ip:port (port 0 works: the
// bound port is used; IPv6 in brackets).
func TestServe_ListenerName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		ip   string
	}{
		{desc: "IPv4 loopback, port 0", ip: "127.0.0.1"},
		{desc: "IPv4 alias", ip: "127.0.0.5"},
		{desc: "IPv6 loopback, port 0", ip: "::1"},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			ctx := testContext(t)
			env := newTestEnv(t)
			s := env.newServer(t)
			lis, err := net.Listen("tcp", net.JoinHostPort(test.ip, "0"))
			if err != nil {
				t.Skipf("cannot listen on %s: %v", test.ip, err)
			}
			s.serveOn(lis)
			host, port := hostPort(lis.Addr())
			if port == 0 {
				t.Fatal("bound port is 0")
			}
			want := e2e.ServerListenerName(host, port)
			if _, err := env.ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.ListenerType, want)); err != nil {
				t.Fatalf("waiting for a subscription to Listener %q: %v", want, err)
			}
			// And that Listener makes it serve.
			env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
			s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
			c := newClient(t, lis.Addr(), test.ip, 0)
			if got := c.emptyCall(ctx); got != codes.OK {
				t.Fatalf("EmptyCall: %v, want OK", got)
			}
		})
	}
}

// TestServe_XdstpListenerName checks that an xdstp:// template (gRFC A47)
// gets the address percent-encoded and is watched at the authority's server.
func TestServe_XdstpListenerName(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	bs := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{"127.0.0.1:1"}, // top-level server unused
		NodeID:                             "node-xdstp",
		ServerListenerResourceNameTemplate: "xdstp://auth.example/envoy.config.listener.v3.Listener/grpc/server/%s",
		Authorities:                        map[string]e2e.AuthorityOptions{"auth.example": {ServerURIs: []string{ms.Address}}},
	})
	s, err := xds.NewGRPCServer(xds.BootstrapContents(bs))
	if err != nil {
		t.Fatalf("NewGRPCServer: %v", err)
	}
	lis, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	defer func() {
		s.Stop()
		<-done
	}()
	_, port := hostPort(lis.Addr())
	want := "xdstp://auth.example/envoy.config.listener.v3.Listener/grpc/server/%5B::1%5D:" + strconv.FormatUint(uint64(port), 10)
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.ListenerType, want)); err != nil {
		t.Fatalf("waiting for a subscription to %q: %v (got %v)", want, err, listenerSubscriptions(ms))
	}
}

func listenerSubscriptions(ms *e2e.ManagementServer) [][]string {
	var out [][]string
	for _, r := range ms.Requests() {
		if r.GetTypeUrl() == resourcev3.ListenerType {
			out = append(out, r.GetResourceNames())
		}
	}
	return out
}

// TestServingModes walks one listener through its serving modes: not
// serving before the first Listener (connections closed without a byte),
// Serving with it, NotServing when it is deleted (in-flight RPCs finish,
// new connections closed), Serving again when it is back.
func TestServingModes(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	addr := lis.Addr()

	// Starting: subscribed but no Listener yet.
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.ListenerType, e2e.ServerListenerName(hostPort(addr)))); err != nil {
		t.Fatalf("waiting for the Listener subscription: %v", err)
	}
	expectClosedNoBytes(t, addr, "127.0.0.1")
	s.modes.expectNone(t, addr, defaultTestShortTimeout)

	env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall while serving: %v, want OK", got)
	}
	st := c.startStream(ctx, t)

	// Deleted.
	env.update(ctx, t, nil, nil)
	args := s.modes.wait(ctx, t, addr, connectivity.ServingModeNotServing)
	if !errors.Is(args.Err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("NotServing error %v, want one matching xdsclient.ErrResourceDoesNotExist", args.Err)
	}
	expectClosedNoBytes(t, addr, "127.0.0.1")
	// The RPC started before the deletion finishes normally.
	st.pingPong(t)
	st.finish(t)
	// The connection was drained, and reconnecting fails.
	waitForCode(ctx, t, "EmptyCall of the drained client while not serving", codes.Unavailable, c.emptyCallNoOpts)
	// A new client cannot connect.
	c2 := newClient(t, addr, "127.0.0.1", 0)
	sctx, cancel := context.WithTimeout(ctx, defaultTestShortTimeout)
	if got := c2.emptyCall(sctx); got == codes.OK {
		t.Errorf("EmptyCall on a new connection while not serving succeeded")
	}
	cancel()
	s.modes.expectNoneBy(ctx, t, env.ms, addr)

	// Back.
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	waitForCode(ctx, t, "EmptyCall after the Listener is back", codes.OK, func(ctx context.Context) codes.Code { return c2.emptyCall(ctx) })
	waitForCode(ctx, t, "EmptyCall on the first client after the Listener is back", codes.OK, func(ctx context.Context) codes.Code { return c.emptyCall(ctx) })
	s.modes.expectNoneBy(ctx, t, env.ms, addr)
}

// TestServingModes_AddressMismatch checks that a Listener whose address is
// not the listening address makes the listener not serving, from the start
// and after serving, and that fixing it makes it serve.
func TestServingModes_AddressMismatch(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, port := listen(t, "127.0.0.1")
	s.serveOn(lis)
	addr := lis.Addr()
	wrongPort := &net.TCPAddr{IP: addr.(*net.TCPAddr).IP, Port: int(port) + 1}
	wrongIP := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: int(port)}

	env.update(ctx, t, []*listenerpb.Listener{listenerAt(addr, wrongPort, []chainSpec{{name: "A"}}, nil)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeNotServing)
	expectClosedNoBytes(t, addr, "127.0.0.1")

	env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall while serving: %v, want OK", got)
	}

	env.update(ctx, t, []*listenerpb.Listener{listenerAt(addr, wrongIP, []chainSpec{{name: "A"}}, nil)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeNotServing)
	expectClosedNoBytes(t, addr, "127.0.0.1")
	s.modes.expectNoneBy(ctx, t, env.ms, addr)
}

// TestServingModes_AnyPort checks the 2026 update of gRFC A36
// (grpc/proposal#559): a Listener whose port is 0 serves instances on any
// port, so that a control plane can send one Listener to servers whose
// ports are assigned dynamically; its IP must still match. Two servers of
// one bootstrap, whose template has no "%s" and so names one Listener for
// both, listen on two ephemeral ports.
func TestServingModes_AnyPort(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	const name = "grpc/server/dynamic-ports"
	env := &testEnv{ms: ms, nodeID: "node-any-port", bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{ms.Address},
		NodeID:                             "node-any-port",
		ServerListenerResourceNameTemplate: name,
	})}
	s1, s2 := env.newServer(t), env.newServer(t)
	lis1, _ := listen(t, "127.0.0.1")
	lis2, _ := listen(t, "127.0.0.1")
	s1.serveOn(lis1)
	s2.serveOn(lis2)
	anyPort := func(ip net.IP) *listenerpb.Listener {
		l := listenerAt(lis1.Addr(), &net.TCPAddr{IP: ip, Port: 0}, []chainSpec{{name: "A"}}, nil)
		l.Name = name
		return l
	}

	env.update(ctx, t, []*listenerpb.Listener{anyPort(net.IPv4(127, 0, 0, 1))}, nil)
	for _, st := range []struct {
		s   *testServer
		lis net.Listener
	}{{s1, lis1}, {s2, lis2}} {
		st.s.modes.wait(ctx, t, st.lis.Addr(), connectivity.ServingModeServing)
		if got := newClient(t, st.lis.Addr(), "127.0.0.1", 0).emptyCall(ctx); got != codes.OK {
			t.Errorf("EmptyCall to %v under a port-0 Listener: %v, want OK", st.lis.Addr(), got)
		}
	}

	// Port 0 does not make the IP a wildcard.
	env.update(ctx, t, []*listenerpb.Listener{anyPort(net.IPv4(127, 0, 0, 2))}, nil)
	for _, st := range []struct {
		s   *testServer
		lis net.Listener
	}{{s1, lis1}, {s2, lis2}} {
		args := st.s.modes.wait(ctx, t, st.lis.Addr(), connectivity.ServingModeNotServing)
		var me *filterchain.AddressMismatchError
		if !errors.As(args.Err, &me) {
			t.Errorf("NotServing error %v, want a *filterchain.AddressMismatchError", args.Err)
		}
		expectClosedNoBytes(t, st.lis.Addr(), "127.0.0.1")
	}
}

// TestServingModes_DoesNotExist checks that a Listener the management
// server never sends makes the listener not serving when the
// does-not-exist timer fires, with an error saying so.
func TestServingModes_DoesNotExist(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	// The public pool and its option, as a user shortens the timer.
	s := env.newServer(t, xds.ClientPool(pubxdsclient.NewPool(pubxdsclient.Options{WatchExpiryTimeout: 500 * time.Millisecond})))
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	args := s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeNotServing)
	if !errors.Is(args.Err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("NotServing error %v, want one matching xdsclient.ErrResourceDoesNotExist", args.Err)
	}
	expectClosedNoBytes(t, lis.Addr(), "127.0.0.1")

	// A late Listener still makes it serve.
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK", got)
	}
}

// TestServe_SeveralListenersIndependent checks that listeners of one server
// have their own Listener resources and serving modes.
func TestServe_SeveralListenersIndependent(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis1, _ := listen(t, "127.0.0.1")
	lis2, _ := listen(t, "127.0.0.1")
	s.serveOn(lis1)
	s.serveOn(lis2)
	a1, a2 := lis1.Addr(), lis2.Addr()

	env.update(ctx, t, []*listenerpb.Listener{simpleListener(a1)}, nil)
	s.modes.wait(ctx, t, a1, connectivity.ServingModeServing)
	c1 := newClient(t, a1, "127.0.0.1", 0)
	if got := c1.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall on listener 1: %v, want OK", got)
	}
	expectClosedNoBytes(t, a2, "127.0.0.1")
	s.modes.expectNoneBy(ctx, t, env.ms, a2)

	// Swap: listener 1 loses its Listener, listener 2 gets one.
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(a2)}, nil)
	s.modes.wait(ctx, t, a1, connectivity.ServingModeNotServing)
	s.modes.wait(ctx, t, a2, connectivity.ServingModeServing)
	expectClosedNoBytes(t, a1, "127.0.0.1")
	c2 := newClient(t, a2, "127.0.0.1", 0)
	if got := c2.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall on listener 2: %v, want OK", got)
	}

	// Both.
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(a1), simpleListener(a2)}, nil)
	s.modes.wait(ctx, t, a1, connectivity.ServingModeServing)
	s.modes.expectNoneBy(ctx, t, env.ms, a2)
	waitForCode(ctx, t, "EmptyCall on listener 1", codes.OK, func(ctx context.Context) codes.Code { return c1.emptyCall(ctx) })
}

// TestGracefulStop_WaitsForRPCs checks that GracefulStop lets an in-flight
// stream finish and only then returns, and that Serve then returns nil.
func TestGracefulStop_WaitsForRPCs(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	st := c.startStream(ctx, t)

	stopped := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned while a stream was in flight")
	case <-time.After(defaultTestShortTimeout):
	}
	st.pingPong(t)
	st.finish(t)
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("GracefulStop did not return after the last stream ended")
	}
	s.waitServeReturned(nil)
}

// TestStop_ClosesConnections checks that Stop ends in-flight RPCs and
// returns at once.
func TestStop_ClosesConnections(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	st := c.startStream(ctx, t)
	s.Stop()
	s.waitServeReturned(nil)
	if _, err := st.Recv(); err == nil {
		t.Fatal("stream Recv after Stop succeeded, want an error")
	}
}

// TestStop_ReleasesWatchesAndClient checks that stopping a server cancels
// its Listener watches (the shared XdsClient unsubscribes from them) and
// that stopping the last server of a bootstrap releases the XdsClient (its
// ADS stream ends).
func TestStop_ReleasesWatchesAndClient(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	closed := make(chan int64, 10)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{
		OnStreamClosed: func(id int64) { closed <- id },
	})
	env := &testEnv{ms: ms, bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{ms.Address},
		NodeID:                             "node-release",
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
	})}
	s1, s2 := env.newServer(t), env.newServer(t)
	lis1, _ := listen(t, "127.0.0.1")
	lis2, _ := listen(t, "127.0.0.1")
	s1.serveOn(lis1)
	s2.serveOn(lis2)
	n1 := e2e.ServerListenerName(hostPort(lis1.Addr()))
	n2 := e2e.ServerListenerName(hostPort(lis2.Addr()))
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.ListenerType, n1, n2)); err != nil {
		t.Fatalf("waiting for one subscription to both Listeners (one shared client): %v", err)
	}
	s1.stopAndWait()
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.ListenerType, n2)); err != nil {
		t.Fatalf("waiting for the unsubscription of the stopped server's Listener: %v", err)
	}
	select {
	case id := <-closed:
		t.Fatalf("ADS stream %d closed while a server still uses the client", id)
	case <-time.After(defaultTestShortTimeout):
	}
	s2.GracefulStop()
	s2.waitServeReturned(nil)
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the ADS stream is still open after the last server stopped: the XdsClient was not released")
	}
}

// TestListenerNACK checks that an invalid Listener (gRFC A36 validation) is
// NACKed and changes nothing: before a good one, the listener does not
// serve; after one, the good configuration keeps serving its connections.
func TestListenerNACK(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	addr := lis.Addr()
	bad := func() *listenerpb.Listener {
		l := simpleListener(addr)
		l.UseOriginalDst = wrapperspb.Bool(true) // must be NACKed
		return l
	}

	env.update(ctx, t, []*listenerpb.Listener{bad()}, nil)
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsNACK(resourcev3.ListenerType)); err != nil {
		t.Fatalf("waiting for a NACK: %v", err)
	}
	// Without a good version, the rejected Listener is a reason not to serve.
	s.modes.wait(ctx, t, addr, connectivity.ServingModeNotServing)
	expectClosedNoBytes(t, addr, "127.0.0.1")

	env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	c := newClient(t, addr, "127.0.0.1", 0)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK", got)
	}
	seen := len(env.ms.Requests())
	env.update(ctx, t, []*listenerpb.Listener{bad()}, nil)
	if _, err := env.ms.WaitForRequest(ctx, after(seen, e2e.IsNACK(resourcev3.ListenerType))); err != nil {
		t.Fatalf("waiting for the second NACK: %v", err)
	}
	s.modes.expectNoneBy(ctx, t, env.ms, addr)
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall after a NACKed update: %v, want OK", got)
	}
	if got := c.dials.Load(); got != 1 {
		t.Errorf("client dialed %d times, want 1 (a NACKed update must not drain)", got)
	}
	c2 := newClient(t, addr, "127.0.0.1", 0)
	if got := c2.emptyCall(ctx); got != codes.OK {
		t.Errorf("EmptyCall on a new connection after a NACKed update: %v, want OK", got)
	}
}

// TestServe_StopRightAway checks that Stop and GracefulStop right after
// Serve was called (before or while it starts its watch) make Serve return
// nil, or grpc.ErrServerStopped if Serve had not started yet, and that Stop
// after Stop does nothing.
func TestServe_StopRightAway(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	for i := range 10 {
		s, err := xds.NewGRPCServer(xds.BootstrapContents(env.bootstrap))
		if err != nil {
			t.Fatal(err)
		}
		lis, _ := listen(t, "127.0.0.1")
		done := make(chan error, 1)
		go func() { done <- s.Serve(lis) }()
		if i%2 == 0 {
			s.Stop()
		} else {
			s.GracefulStop()
		}
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				t.Errorf("Serve returned %v, want nil or grpc.ErrServerStopped", err)
			}
		case <-time.After(defaultTestTimeout):
			t.Fatal("Serve did not return after Stop")
		}
		s.Stop()
		s.GracefulStop()
		lis.Close()
	}
}

// TestServingModes_RapidFlaps deletes and re-adds the Listener many times in
// quick succession: the serving-mode callbacks must alternate (one per
// transition, never the same mode twice in a row) and end in the final
// state, which serves RPCs and which ReadinessHealth reports.
func TestServingModes_RapidFlaps(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	hs := health.NewServer()
	s, addr := startServing(ctx, t, env, simpleListener, nil, xds.ReadinessHealth(hs, xds.ReadinessOptions{}))
	const flaps = 40
	for i := range flaps {
		if i%2 == 0 {
			env.update(ctx, t, nil, nil)
		} else {
			env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil)
		}
	}
	// The last update re-added the Listener (i = flaps-1 is odd).
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsACK(resourcev3.ListenerType, strconv.Itoa(flaps+1))); err != nil {
		t.Fatalf("waiting for the ACK of the last update: %v", err)
	}
	c := newClient(t, addr, "127.0.0.1", 0)
	waitForCode(ctx, t, "EmptyCall after the flaps", codes.OK, c.emptyCallNoOpts)
	// The xDS client reads a response only once the listener has handled
	// the one before, but ACKs it before the listener handles it, and the
	// RPC succeeds before the listener calls the callback
	// (TestServingModes_CallbackAfterACK): by now every callback has been
	// recorded but perhaps the last update's, which can only be to SERVING.
	n := s.modes.waitSettled(ctx, t, addr, connectivity.ServingModeServing, connectivity.ServingModeServing)
	// ReadinessHealth is told of a transition before the callback.
	if resp, err := hs.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("readiness after the flaps: %v (err %v), want SERVING", resp.GetStatus(), err)
	}
	t.Logf("%d callbacks for %d updates", n, flaps)
}

// TestServingModes_CallbackAfterACK checks the order of the events a test
// of serving modes can wait for: the xDS client ACKs a Listener before the
// listener has handled it (it waits for the listener only before reading
// the next response), and the listener serves connections as soon as it
// has stored the new configuration, before it calls the serving-mode
// callback. So with the callback of a re-added Listener held back (the
// listener's goroutine not scheduled for a while), the management server
// gets the ACK and an RPC succeeds while the last callback recorded is
// still the one to NOT_SERVING; the one to SERVING follows.
func TestServingModes_CallbackAfterACK(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s, addr := startServing(ctx, t, env, simpleListener, nil) // version 1
	env.update(ctx, t, nil, nil)                              // version 2: deleted
	s.modes.wait(ctx, t, addr, connectivity.ServingModeNotServing)

	s.modes.holdNext(t, addr, connectivity.ServingModeServing)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(addr)}, nil) // version 3
	if _, err := env.ms.WaitForRequest(ctx, e2e.IsACK(resourcev3.ListenerType, "3")); err != nil {
		t.Fatalf("waiting for the ACK of the re-added Listener while its serving-mode callback is held: %v", err)
	}
	c := newClient(t, addr, "127.0.0.1", 0)
	waitForCode(ctx, t, "EmptyCall while the serving-mode callback is held", codes.OK, c.emptyCallNoOpts)
	// Both came before the callback, which waitSettled now lets through.
	if n := s.modes.waitSettled(ctx, t, addr, connectivity.ServingModeNotServing, connectivity.ServingModeServing); n != 1 {
		t.Errorf("%d serving-mode changes after the re-add, want 1", n)
	}
}

// TestListenerNACK_Reasons checks, for Listeners that gRFC A36 says to
// NACK, that the update is NACKed and the good configuration keeps serving
// its connections, without a drain or a serving-mode change.
func TestListenerNACK_Reasons(t *testing.T) {
	t.Parallel()
	dup := func(a net.Addr) *listenerpb.Listener {
		// Duplicate matchers; server_names never match, but still count.
		m := &listenerpb.FilterChainMatch{ServerNames: []string{"x.test"}}
		return testListener(a, []chainSpec{{name: "A"}, {name: "S1", match: m}, {name: "S2", match: m}}, nil)
	}
	tests := []struct {
		desc string
		bad  func(net.Addr) *listenerpb.Listener
	}{
		{desc: "use_original_dst", bad: func(a net.Addr) *listenerpb.Listener {
			l := simpleListener(a)
			l.UseOriginalDst = wrapperspb.Bool(true)
			return l
		}},
		{desc: "listener_filters", bad: func(a net.Addr) *listenerpb.Listener {
			l := simpleListener(a)
			l.ListenerFilters = []*listenerpb.ListenerFilter{{Name: "envoy.filters.listener.tls_inspector"}}
			return l
		}},
		{desc: "duplicate matchers, with fields that never match", bad: dup},
		{desc: "no HttpConnectionManager", bad: func(a net.Addr) *listenerpb.Listener {
			l := simpleListener(a)
			l.FilterChains[0].Filters = nil
			return l
		}},
		{desc: "bad route in an inline RouteConfiguration", bad: func(a net.Addr) *listenerpb.Listener {
			rc := routeConfig("bad", []*routepb.Route{nonForwarding(&routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_SafeRegex{
				SafeRegex: &matcherpb.RegexMatcher{Regex: "(unbalanced"},
			}})})
			return testListener(a, []chainSpec{{name: "A", routes: rc}}, nil)
		}},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			env := newTestEnv(t)
			s, addr := startServing(ctx, t, env, simpleListener, nil)
			c := newClient(t, addr, "127.0.0.1", 0)
			if got := c.emptyCall(ctx); got != codes.OK {
				t.Fatalf("EmptyCall: %v, want OK", got)
			}
			env.update(ctx, t, []*listenerpb.Listener{test.bad(addr)}, nil)
			if _, err := env.ms.WaitForRequest(ctx, e2e.IsNACK(resourcev3.ListenerType)); err != nil {
				t.Fatalf("waiting for a NACK: %v", err)
			}
			s.modes.expectNoneBy(ctx, t, env.ms, addr)
			if got := c.emptyCall(ctx); got != codes.OK {
				t.Errorf("EmptyCall after the NACK: %v, want OK", got)
			}
			if got := c.dials.Load(); got != 1 {
				t.Errorf("client dialed %d times, want 1", got)
			}
			if got := newClient(t, addr, "127.0.0.1", 0).emptyCall(ctx); got != codes.OK {
				t.Errorf("EmptyCall on a new connection after the NACK: %v, want OK", got)
			}
		})
	}
}
