// Command quickstart shows, in a few seconds and with no setup, what an
// xDS-managed gRPC server is:
//
//	go run ./examples/quickstart
//
// It starts, in one process and on 127.0.0.1 only, an xDS control plane
// (go-control-plane) and a gRPC server built with xds.NewGRPCServer, whose
// bootstrap is passed in memory with xds.BootstrapContents (no file, no
// environment variable). A client then calls the server while the control
// plane changes its configuration, and the program prints what happens:
//
//  1. Before the control plane has a Listener for it, the server is not
//     serving: it accepts connections and closes them, so RPCs fail.
//  2. The control plane publishes a Listener whose routes let every RPC
//     through: the server becomes SERVING and RPCs succeed.
//  3. The control plane publishes a Listener that lets only EmptyCall
//     through: other methods now fail with UNAVAILABLE, while a stream
//     opened before the update still finishes normally, because the old
//     connection is drained rather than cut.
//  4. The control plane deletes the Listener: the server is NOT_SERVING
//     again, and the callback says why.
//
// Then everything is stopped and the program exits 0; on any failure, or
// after 20 seconds, it exits 1 with the reason.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds"
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
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	// The control plane.
	cp, err := startControlPlane(ctx)
	if err != nil {
		return err
	}
	stopControlPlane := sync.OnceValue(cp.stop)
	defer stopControlPlane()
	say("Started an xDS control plane (go-control-plane) on %s.", cp.addr)

	// The xDS-managed server: a bootstrap pointing at the control plane, a
	// callback reporting the serving mode, and a greeter service.
	bootstrap, err := bootstrapJSON(cp.addr)
	if err != nil {
		return err
	}
	modes := make(chan xds.ServingModeChangeArgs, 8)
	stopping := make(chan struct{})
	conns := &connWatcher{closed: make(chan string, 16), stopping: stopping}
	srv, err := xds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
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
	say("Started an xDS-managed gRPC server (xds.NewGRPCServer) on %s, with this bootstrap", addr)
	say("(passed in memory with xds.BootstrapContents):\n   %s", strings.ReplaceAll(string(bootstrap), "\n", "\n   "))
	say("It asks the control plane for its configuration: the Listener %q.", fmt.Sprintf(listenerNameTemplate, addr))

	// A plain gRPC client. A short reconnect backoff keeps the demo quick
	// after the server has refused connections.
	conn, err := grpc.NewClient(addr.String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	// 1. No configuration yet. The server reports NOT_SERVING only when the Listener is known not to
	// exist: when it is deleted, or when the control plane has not sent it
	// within 15 s of the request (the xDS does-not-exist timer). Until then
	// it is not serving either, without a callback.
	say("\n1. The control plane has no Listener for the server yet, so the server is not serving.")
	_, rpcErr := greet(ctx, client, "before any configuration", false)
	if status.Code(rpcErr) != codes.Unavailable {
		return fmt.Errorf("an RPC to a server that is not serving: got %v, want code Unavailable", rpcErr)
	}
	say("   client:   UnaryCall failed with code %v: the server closes every connection until it is configured.", status.Code(rpcErr))

	// 2. A Listener that lets every RPC through.
	say("\n2. The control plane publishes a Listener: one filter chain, whose route %q lets every RPC (prefix \"/\") through.", "everything")
	cp.setListeners(serverListener(addr, routeConfig("open", serveRoute("everything", "/"))))
	if err := expectMode(ctx, modes, connectivity.ServingModeServing, say); err != nil {
		return err
	}
	reply, err := greet(ctx, client, "newcomer", true)
	if err != nil {
		return fmt.Errorf("UnaryCall on a serving server: %w", err)
	}
	say("   client:   UnaryCall succeeded: %q", reply)
	streamCtx, cancelStream := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStream()
	stream, err := client.FullDuplexCall(streamCtx, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("opening a stream: %w", err)
	}
	if err := echo(stream, "ping 1"); err != nil {
		return fmt.Errorf("stream before the update: %w", err)
	}
	streamPeer, ok := peer.FromContext(stream.Context())
	if !ok || streamPeer.LocalAddr == nil {
		return errors.New("the stream has no peer")
	}
	say("   client:   opened a FullDuplexCall stream and exchanged one message; it stays open.")

	// 3. A Listener that lets only EmptyCall through.
	say("\n3. The control plane publishes a new Listener: route %q lets only EmptyCall through;", "only-empty-call")
	say("   route %q sends everything else to a cluster, which is a proxy's job, not a server's.", "everything-else")
	cp.setListeners(serverListener(addr, routeConfig("restricted",
		serveRoute("only-empty-call", "/"+testgrpc.TestService_ServiceDesc.ServiceName+"/EmptyCall"),
		forwardRoute("everything-else", "/", "elsewhere"))))
	// The serving mode does not change; wait until a new connection has the
	// new configuration.
	denied, err := untilDenied(ctx, client)
	if err != nil {
		return err
	}
	say("   client:   UnaryCall failed with code %v: %s", denied.Code(), denied.Message())
	emptyCtx, cancelEmpty := context.WithTimeout(ctx, 2*time.Second)
	defer cancelEmpty()
	if _, err := client.EmptyCall(emptyCtx, &testgrpc.Empty{}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("EmptyCall, which the new routes allow: %w", err)
	}
	say("   client:   EmptyCall succeeded.")
	if err := echo(stream, "ping 2"); err != nil {
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
	say("             (GOAWAY, in-flight RPCs finish under the old config, then close) instead of cutting it.")

	// 4. The Listener is deleted.
	say("\n4. The control plane deletes the Listener.")
	cp.setListeners()
	if err := expectMode(ctx, modes, connectivity.ServingModeNotServing, say); err != nil {
		return err
	}

	// 5. Stop.
	if err := stopServer(); err != nil {
		return fmt.Errorf("xds server: Serve returned %w", err)
	}
	if err := stopControlPlane(); err != nil {
		return fmt.Errorf("control plane: Serve returned %w", err)
	}
	say("\n5. Stopped the server and the control plane. Done.")
	return nil
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

// greet makes a UnaryCall and returns the greeting. With waitForReady, the
// call waits (up to a second) for the server to be reachable.
func greet(ctx context.Context, client testgrpc.TestServiceClient, name string, waitForReady bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{
		Payload: &testgrpc.Payload{Body: []byte(name)},
	}, grpc.WaitForReady(waitForReady))
	return string(resp.GetPayload().GetBody()), err
}

// untilDenied repeats a UnaryCall until the server refuses it by its routes,
// and returns the refusal. RPCs succeed until the client's connection
// configured by the old Listener is drained and it connects again.
func untilDenied(ctx context.Context, client testgrpc.TestServiceClient) (*status.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-pause.C:
		case <-ctx.Done():
			return nil, errors.New("the server still accepts UnaryCall 5s after the control plane denied it")
		}
		_, err := greet(ctx, client, "after the update", true)
		if st := status.Convert(err); st.Code() == codes.Unavailable && strings.Contains(st.Message(), "everything-else") {
			return st, nil
		}
		if err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("UnaryCall after the update: got %v, want OK or denied by route %q", err, "everything-else")
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
