// Command quickstart shows, in a few seconds and with no setup, what an
// xDS-managed gRPC server is:
//
//	go run ./examples/quickstart
//
// It starts, in one process and on 127.0.0.1 only, an xDS control plane
// (go-control-plane), a gRPC server built with xds.NewGRPCServer (a greeter
// service), and a plain gRPC admin server with CSDS beside it, as in
// production: the xDS port closes its connections while not serving, when
// CSDS is most needed. The xDS server's bootstrap is passed in memory with
// xds.BootstrapContents (no file, no environment variable). A client then
// calls the server while the control plane changes its configuration, and
// the program prints what happens, each line with the time since the start:
//
//  1. Before the control plane has a Listener for it, the server is not
//     serving: it accepts connections and closes them, so RPCs fail.
//  2. The control plane publishes a Listener whose HttpConnectionManager
//     takes its routes from a RouteConfiguration over RDS, and routes that
//     let every RPC through: the server becomes SERVING and RPCs succeed.
//  3. A new Listener runs an RBAC filter before the router, denying RPCs
//     with the header x-user: mallory: mallory gets PERMISSION_DENIED, alice
//     is served.
//  4. Only the RouteConfiguration changes (RDS): UnaryCall now fails with
//     UNAVAILABLE on the open connection at once; the client does not dial
//     again (it counts its dials).
//  5. A new Listener without the RBAC filter: the changed filter chain's
//     connection is drained, and a stream opened before the update still
//     finishes normally.
//  6. The client calls CSDS on the admin port and prints each xDS
//     resource with its version and status.
//  7. The control plane turns on mTLS: the server's certificate and the
//     roots for client certificates come from the bootstrap's certificate
//     provider (files the demo writes at start). A client with a
//     certificate is served; one without is refused in the handshake.
//  8. The control plane deletes the Listener: the server is NOT_SERVING
//     again, and the callback says why.
//
// Then everything is stopped and the program exits 0; on any failure, or
// after 20 seconds, it exits 1 with the reason.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/csds"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, os.Stdout) }()
	// run gives up when ctx is done; the watchdog also catches a Stop that
	// would never return.
	watchdog := time.NewTimer(25 * time.Second)
	defer watchdog.Stop()
	var err error
	select {
	case err = <-done:
	case <-watchdog.C:
		err = errors.New("still running after 25 s")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nquickstart FAILED: %v\n", err)
		os.Exit(1)
	}
}

// run tells the story of the package documentation on out. It returns an
// error if anything does not happen as told, or when ctx is done.
func run(ctx context.Context, out io.Writer) error {
	start := time.Now()
	// say prints a line with the time since the start; more continues it.
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[+%.2fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	more := func(format string, args ...any) { fmt.Fprintf(out, "         "+format+"\n", args...) }
	step := func(format string, args ...any) {
		fmt.Fprintln(out)
		say(format, args...)
	}

	// The control plane.
	cp, err := startControlPlane(ctx)
	if err != nil {
		return err
	}
	stopControlPlane := sync.OnceValue(cp.stop)
	defer stopControlPlane()
	say("Started an xDS control plane (go-control-plane) on %s.", cp.addr)

	// The xDS-managed server: a bootstrap pointing at the control plane and
	// naming the certificate files, xDS credentials (the control plane
	// decides whether a connection uses TLS), a callback reporting the
	// serving mode, a greeter service and CSDS.
	pki, err := newDemoPKI()
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	defer pki.remove()
	bootstrap, err := bootstrapJSON(cp.addr, pki)
	if err != nil {
		return err
	}
	// Filter chains without TLS use the fallback: plaintext.
	creds, err := xds.NewServerCredentials(xds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	modes := make(chan xds.ServingModeChangeArgs, 8)
	stopping := make(chan struct{})
	conns := &connWatcher{closed: make(chan string, 16), stopping: stopping}
	srv, err := xds.NewGRPCServer(
		grpc.Creds(creds),
		grpc.StatsHandler(conns), // any grpc.ServerOption works as with grpc.NewServer
		xds.BootstrapContents(bootstrap),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) {
			select { // printed by run, so that the story stays in order
			case modes <- args:
			case <-stopping:
			}
		}),
		// How long a drained connection may finish its RPCs; the default is
		// 10 minutes.
		xds.DrainGraceTime(5*time.Second),
	)
	if err != nil {
		return err
	}
	testgrpc.RegisterTestServiceServer(srv, greeter{})
	// CSDS on an admin server of its own: what xDS configuration the
	// process runs with, reachable also while the xDS port is not serving.
	admin := grpc.NewServer()
	defer admin.Stop()
	if err := csds.Register(admin); err != nil {
		srv.Stop()
		return err
	}
	adminLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Stop()
		return err
	}
	go admin.Serve(adminLis)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Stop()
		return err
	}
	addr := lis.Addr().(*net.TCPAddr)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	stopServer := sync.OnceValue(func() error {
		close(stopping)
		srv.Stop()
		return <-served
	})
	defer stopServer()
	say("Started an xDS-managed gRPC server (xds.NewGRPCServer) on %s, with a greeter service (CSDS on the admin port %s),", addr, adminLis.Addr())
	more("and this bootstrap (passed in memory with xds.BootstrapContents):\n            %s", strings.ReplaceAll(string(bootstrap), "\n", "\n            "))
	more("It asks the control plane for its configuration: the Listener %q.", fmt.Sprintf(listenerNameTemplate, addr))

	// A plain gRPC client that counts its connections. A short reconnect
	// backoff keeps the demo quick after the server has refused connections.
	var dials atomic.Int64
	conn, err := grpc.NewClient(addr.String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", a)
		}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	// 1. No configuration yet. The server reports NOT_SERVING only when the
	// Listener is known not to exist: when it is deleted, or when the control
	// plane has not sent it within 15 s of the request (the xDS
	// does-not-exist timer). Until then it is not serving either, without a
	// callback.
	step("1. The control plane has no Listener for the server yet, so the server is not serving.")
	_, rpcErr := greet(ctx, client, "before any configuration", "", false)
	if status.Code(rpcErr) != codes.Unavailable {
		return fmt.Errorf("an RPC to a server that is not serving: got %v, want code Unavailable", rpcErr)
	}
	say("   client:   UnaryCall failed with code %v: the server closes every connection until it is configured.", status.Code(rpcErr))

	// 2. A Listener whose routes come from RDS, and routes that let every
	// RPC through.
	step("2. The control plane publishes a Listener: one filter chain, the router, and the routes of the")
	more("   RouteConfiguration %q (RDS), which it publishes too: route %q lets every RPC through.", routesName, "everything")
	cp.setRoutes(routeConfig(routesName, serveRoute("everything", "/")))
	cp.setListeners(serverListener(addr, routesName))
	if err := expectMode(ctx, modes, connectivity.ServingModeServing, say); err != nil {
		return err
	}
	reply, err := greet(ctx, client, "newcomer", "", true)
	if err != nil {
		return fmt.Errorf("UnaryCall on a serving server: %w", err)
	}
	say("   client:   UnaryCall succeeded: %q", reply)

	// 3. An RBAC policy: a new Listener whose filter chain runs the RBAC
	// filter before the router.
	step("3. The control plane publishes a new Listener whose filter chain runs an RBAC filter before the")
	more("   router: DENY every RPC with the header x-user: mallory.")
	cp.setListeners(serverListener(addr, routesName, denyHeader("x-user", "mallory")))
	// The serving mode does not change; the client's connection, configured
	// by the old Listener, is drained, and the next one has the policy.
	denied, err := untilStatus(ctx, func(ctx context.Context) error {
		_, err := greet(ctx, client, "mallory", "mallory", true)
		return err
	}, codes.PermissionDenied, "RBAC")
	if err != nil {
		return fmt.Errorf("UnaryCall as mallory after the RBAC policy: %w", err)
	}
	say("   client:   UnaryCall as mallory failed with code %v: %s", denied.Code(), denied.Message())
	more("   (the client's connection made under the old Listener was drained; its new one has the policy)")
	if reply, err = greet(ctx, client, "alice", "alice", true); err != nil {
		return fmt.Errorf("UnaryCall as alice, whom the RBAC policy allows: %w", err)
	}
	say("   client:   UnaryCall as alice succeeded: %q", reply)

	// A stream, opened now, that stays open through steps 4 and 5.
	streamCtx, cancelStream := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStream()
	stream, err := client.FullDuplexCall(streamCtx, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("opening a stream: %w", err)
	}
	if err := echo(stream, "ping 1"); err != nil {
		return fmt.Errorf("stream before the updates: %w", err)
	}
	streamPeer, ok := peer.FromContext(stream.Context())
	if !ok || streamPeer.LocalAddr == nil {
		return errors.New("the stream has no peer")
	}
	say("   client:   opened a FullDuplexCall stream (connection from %v) and exchanged one message; it stays open.", streamPeer.LocalAddr)

	// 4. A route change over RDS: no new Listener, so no drain and no new
	// connection.
	step("4. The control plane changes only the RouteConfiguration %q: a new route %q", routesName, "unary-to-a-cluster")
	more("   sends UnaryCall to a cluster (a proxy's job, not a server's); %q still serves the rest.", "everything")
	dialsBefore := dials.Load()
	cp.setRoutes(routeConfig(routesName,
		forwardMethod("unary-to-a-cluster", "/"+testgrpc.TestService_ServiceDesc.ServiceName+"/UnaryCall", "elsewhere"),
		serveRoute("everything", "/")))
	var unaryPeer peer.Peer
	denied, err = untilStatus(ctx, func(ctx context.Context) error {
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Peer(&unaryPeer))
		return err
	}, codes.Unavailable, "unary-to-a-cluster")
	if err != nil {
		return fmt.Errorf("UnaryCall after the route change: %w", err)
	}
	say("   client:   UnaryCall failed with code %v: %s", denied.Code(), denied.Message())
	emptyCtx, cancelEmpty := context.WithTimeout(ctx, 2*time.Second)
	defer cancelEmpty()
	if _, err := client.EmptyCall(emptyCtx, &testgrpc.Empty{}); err != nil {
		return fmt.Errorf("EmptyCall, which the new routes serve: %w", err)
	}
	say("   client:   EmptyCall succeeded.")
	if err := echo(stream, "ping 2"); err != nil {
		return fmt.Errorf("the stream after the route change: %w", err)
	}
	if n := dials.Load(); n != dialsBefore || unaryPeer.LocalAddr == nil || unaryPeer.LocalAddr.String() != streamPeer.LocalAddr.String() {
		return fmt.Errorf("the route change made the client reconnect: %d dial(s) before, %d after; the refused UnaryCall went from %v, the stream from %v",
			dialsBefore, n, unaryPeer.LocalAddr, streamPeer.LocalAddr)
	}
	say("   client:   the stream exchanged another message. Still one connection (from %v), no new dial:", streamPeer.LocalAddr)
	more("   the new routes applied to the open connection without reconnecting.")

	// 5. A Listener change drains the connection, and the stream opened
	// before it finishes.
	step("5. The control plane publishes a new Listener without the RBAC filter: the filter chain changed,")
	more("   so its connections are drained.")
	cp.setListeners(serverListener(addr, routesName))
	// Once the client has the GOAWAY, its new RPCs go to a new connection,
	// configured without the policy.
	var malloryPeer peer.Peer
	if _, err := untilStatus(ctx, func(ctx context.Context) error {
		_, err := client.EmptyCall(asUser(ctx, "mallory"), &testgrpc.Empty{}, grpc.WaitForReady(true), grpc.Peer(&malloryPeer))
		return err
	}, codes.OK, ""); err != nil {
		return fmt.Errorf("EmptyCall as mallory after the RBAC filter was removed: %w", err)
	}
	if dials.Load() == dialsBefore || malloryPeer.LocalAddr.String() == streamPeer.LocalAddr.String() {
		return fmt.Errorf("EmptyCall as mallory succeeded on the old connection (from %v), want a new one", malloryPeer.LocalAddr)
	}
	say("   client:   EmptyCall as mallory succeeded, on a new connection (from %v).", malloryPeer.LocalAddr)
	if err := echo(stream, "ping 3"); err != nil {
		return fmt.Errorf("the stream opened before the update: %w", err)
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("closing the stream: %w", err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		return fmt.Errorf("the stream opened before the update ended with %v, want OK", err)
	}
	cancelStream()
	say("   client:   the stream opened before the update exchanged another message and ended OK.")
	if err := conns.waitClosed(ctx, streamPeer.LocalAddr.String()); err != nil {
		return fmt.Errorf("the connection of the stream opened before the update: %w", err)
	}
	say("   server:   that stream's connection (from %v) then closed: the update drained it", streamPeer.LocalAddr)
	more("   (GOAWAY, in-flight RPCs finish under the old config, then close) instead of cutting it.")

	// 6. CSDS, while the server still serves.
	step("6. The client asks CSDS (envoy.service.status.v3.ClientStatusDiscoveryService) on the admin port")
	more("   which xDS configuration the server runs with:")
	adminConn, err := grpc.NewClient(adminLis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer adminConn.Close()
	lines, err := csdsSummary(ctx, adminConn)
	if err != nil {
		return err
	}
	for _, l := range lines {
		more("   %s", l)
	}

	// 7. mTLS: the control plane turns TLS on and requires client
	// certificates; the server's certificate and the client roots come from
	// the bootstrap's certificate provider.
	step("7. The control plane publishes a Listener whose filter chain requires mTLS: the server's certificate")
	more("   and the roots that verify clients come from the bootstrap's certificate provider %q.", certProvider)
	cp.setListeners(requireMTLS(serverListener(addr, routesName)))
	withCert, err := tlsClient(addr, pki, true)
	if err != nil {
		return err
	}
	defer withCert.Close()
	var tlsPeer peer.Peer
	if _, err := untilStatus(ctx, func(ctx context.Context) error {
		_, err := testgrpc.NewTestServiceClient(withCert).EmptyCall(ctx, &testgrpc.Empty{}, grpc.Peer(&tlsPeer))
		return err
	}, codes.OK, ""); err != nil {
		return fmt.Errorf("EmptyCall with a client certificate under mTLS: %w", err)
	}
	serverID := "(none)"
	if info, ok := tlsPeer.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 && len(info.State.PeerCertificates[0].URIs) > 0 {
		serverID = info.State.PeerCertificates[0].URIs[0].String()
	}
	say("   client:   with alice's certificate: EmptyCall succeeded over mTLS; the server is %s.", serverID)
	noCert, err := tlsClient(addr, pki, false)
	if err != nil {
		return err
	}
	defer noCert.Close()
	callCtx, cancelCall := context.WithTimeout(ctx, 2*time.Second)
	defer cancelCall()
	_, rpcErr = testgrpc.NewTestServiceClient(noCert).EmptyCall(callCtx, &testgrpc.Empty{})
	if status.Code(rpcErr) != codes.Unavailable {
		return fmt.Errorf("EmptyCall without a client certificate under mTLS: got %v, want code Unavailable", rpcErr)
	}
	say("   client:   without a certificate: EmptyCall failed with code %v: the server refused the TLS handshake.", status.Code(rpcErr))

	// 8. The Listener is deleted.
	step("8. The control plane deletes the Listener.")
	cp.setListeners()
	if err := expectMode(ctx, modes, connectivity.ServingModeNotServing, say); err != nil {
		return err
	}

	// 9. Stop.
	if err := stopServer(); err != nil {
		return fmt.Errorf("xds server: Serve returned %w", err)
	}
	if err := stopControlPlane(); err != nil {
		return fmt.Errorf("control plane: Serve returned %w", err)
	}
	step("9. Stopped the server and the control plane. Done.")
	return nil
}

// tlsClient returns a client of the server at addr over TLS, trusting the
// demo's CA, with alice's certificate if withCert.
func tlsClient(addr *net.TCPAddr, pki *demoPKI, withCert bool) (*grpc.ClientConn, error) {
	cfg := &tls.Config{RootCAs: pki.roots, MinVersion: tls.VersionTLS12}
	if withCert {
		cfg.Certificates = []tls.Certificate{pki.client}
	}
	return grpc.NewClient(addr.String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
}

// routesName is the RouteConfiguration of the demo's Listeners.
const routesName = "greeter-routes"

// csdsSummary calls FetchClientStatus over conn and returns one line per
// resource: type, name, version, status. Every resource must be ACKED.
func csdsSummary(ctx context.Context, conn *grpc.ClientConn) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := csdspb.NewClientStatusDiscoveryServiceClient(conn).FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("CSDS FetchClientStatus: %w", err)
	}
	var lines []string
	found := map[string]bool{}
	for _, c := range resp.GetConfig() {
		lines = append(lines, fmt.Sprintf("xDS client %q of node %q:", c.GetClientScope(), c.GetNode().GetId()))
		lines = append(lines, fmt.Sprintf("  %-19s %-62s %-8s %s", "TYPE", "NAME", "VERSION", "STATUS"))
		for _, g := range c.GetGenericXdsConfigs() {
			typ := g.GetTypeUrl()[strings.LastIndex(g.GetTypeUrl(), ".")+1:]
			lines = append(lines, fmt.Sprintf("  %-19s %-62s %-8s %v", typ, g.GetName(), g.GetVersionInfo(), g.GetClientStatus()))
			if g.GetClientStatus() != adminpb.ClientResourceStatus_ACKED {
				return lines, fmt.Errorf("CSDS: %s %q is %v, want ACKED", typ, g.GetName(), g.GetClientStatus())
			}
			found[typ] = true
		}
	}
	if !found["Listener"] || !found["RouteConfiguration"] {
		return lines, fmt.Errorf("CSDS: the dump lacks the Listener or the RouteConfiguration:\n%s", strings.Join(lines, "\n"))
	}
	return lines, nil
}

// expectMode waits for the next serving-mode change, prints it and checks
// that it is want.
func expectMode(ctx context.Context, modes <-chan xds.ServingModeChangeArgs, want connectivity.ServingMode, say func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	select {
	case args := <-modes:
		if args.Err != nil {
			say("   callback: the server is %v (%v)", args.Mode, args.Err)
		} else {
			say("   callback: the server is %v", args.Mode)
		}
		if args.Mode != want {
			return fmt.Errorf("the server went %v, want %v", args.Mode, want)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the server to be %v: %w", want, ctx.Err())
	}
}

// greet makes a UnaryCall as user (none if "") and returns the greeting.
// With waitForReady, the call waits (up to a second) for the server to be
// reachable.
func greet(ctx context.Context, client testgrpc.TestServiceClient, name, user string, waitForReady bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := client.UnaryCall(asUser(ctx, user), &testgrpc.SimpleRequest{
		Payload: &testgrpc.Payload{Body: []byte(name)},
	}, grpc.WaitForReady(waitForReady))
	return string(resp.GetPayload().GetBody()), err
}

// asUser adds the header x-user: user to the RPCs made with ctx (none if
// user is "").
func asUser(ctx context.Context, user string) context.Context {
	if user == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "x-user", user)
}

// untilStatus repeats call until it ends with code, and a message containing
// msg, and returns that status. Configuration changes reach the server
// within milliseconds, and the client's connection a moment later (at once
// over RDS; after a drain and a reconnection for a Listener change), so the
// previous behaviour is seen for a while.
func untilStatus(ctx context.Context, call func(context.Context) error, code codes.Code, msg string) (*status.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pause := time.NewTimer(0)
	defer pause.Stop()
	var last error
	for {
		select {
		case <-pause.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("no %v (%q) within 5 s; the last call ended with %v", code, msg, last)
		}
		callCtx, cancelCall := context.WithTimeout(ctx, time.Second)
		last = call(callCtx)
		cancelCall()
		if st := status.Convert(last); st.Code() == code && strings.Contains(st.Message(), msg) {
			return st, nil
		}
		pause.Reset(20 * time.Millisecond)
	}
}

// echo sends msg on stream and waits for the echo.
func echo(stream testgrpc.TestService_FullDuplexCallClient, msg string) error {
	if err := stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(msg)}}); err != nil {
		return err
	}
	resp, err := stream.Recv()
	if err != nil {
		return err
	}
	if got := string(resp.GetPayload().GetBody()); got != msg {
		return fmt.Errorf("sent %q, got %q back", msg, got)
	}
	return nil
}

// connWatcher is a server stats handler that reports the client address of
// every connection the server closes.
type connWatcher struct {
	closed   chan string
	stopping <-chan struct{}
}

type remoteAddrKey struct{}

func (w *connWatcher) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, remoteAddrKey{}, info.RemoteAddr.String())
}

func (w *connWatcher) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); ok {
		select {
		case w.closed <- ctx.Value(remoteAddrKey{}).(string):
		case <-w.stopping:
		}
	}
}

func (*connWatcher) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (*connWatcher) HandleRPC(context.Context, stats.RPCStats)                       {}

// waitClosed waits until the server has closed the connection from addr.
func (w *connWatcher) waitClosed(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for {
		select {
		case a := <-w.closed:
			if a == addr {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("the server did not close it: %w", ctx.Err())
		}
	}
}

// greeter is the demo's service: UnaryCall greets, EmptyCall answers, and
// FullDuplexCall echoes every message.
type greeter struct {
	testgrpc.UnimplementedTestServiceServer
}

func (greeter) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

func (greeter) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte("Hello, " + string(req.GetPayload().GetBody()))}}, nil
}

func (greeter) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}
