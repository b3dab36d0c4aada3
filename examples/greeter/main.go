// Command greeter is a production-shaped xDS-managed gRPC server: the shape
// to copy when moving a real server to xds.NewGRPCServer.
//
//	GRPC_XDS_BOOTSTRAP=examples/greeter/bootstrap.json go run ./examples/greeter -addr 127.0.0.1:50051
//
// It reads its xDS bootstrap the standard way (the file named by
// GRPC_XDS_BOOTSTRAP, else GRPC_XDS_BOOTSTRAP_CONFIG), lets the control plane choose
// each connection's security (xds.NewServerCredentials, plaintext when the
// filter chain has no TLS), logs serving-mode changes and mirrors them in the
// gRPC health service, and registers CSDS and server reflection next to its
// service (grpc.testing.TestService: UnaryCall greets, EmptyCall answers).
// SIGINT or SIGTERM stops it gracefully: GracefulStop, then Stop after
// -shutdown-timeout. See README.md to run it against examples/controlplane.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/csds"
)

// config is what run needs; parseFlags fills it from the command line.
type config struct {
	addr            string        // where to listen
	shutdownTimeout time.Duration // how long GracefulStop may take before Stop
	drainGrace      time.Duration // xds.DrainGraceTime
	log             *log.Logger
	// listening, if set, is called with the listening address once Serve is
	// about to run (tests listen on port 0).
	listening func(net.Addr)
}

func parseFlags(args []string, output io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("greeter", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:50051", "the `address` to listen on (ip:port; 0.0.0.0:50051 for every interface). The control plane must have a Listener for it")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long to let RPCs in flight finish before closing every connection")
	fs.DurationVar(&cfg.drainGrace, "drain-grace", xds.DefaultDrainGraceTime, "how long a connection drained by a configuration change may finish its RPCs")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(2)
	}
	cfg.log = log.New(os.Stderr, "greeter: ", log.LstdFlags|log.Lmicroseconds)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		cfg.log.Print(err)
		os.Exit(1)
	}
}

// run serves on cfg.addr until ctx is done, then stops gracefully. It fails
// at once without a valid bootstrap or when it cannot listen.
func run(ctx context.Context, cfg config) error {
	// The control plane picks each connection's security; a filter chain
	// without transport_socket is plaintext.
	creds, err := xds.NewServerCredentials(xds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	healthSrv := health.NewServer()
	// Not serving until the control plane's Listener arrives.
	healthSrv.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s, err := xds.NewGRPCServer(
		grpc.Creds(creds),
		xds.DrainGraceTime(cfg.drainGrace),
		xds.ServingModeCallback(func(addr net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				cfg.log.Printf("%v is SERVING", addr)
				healthSrv.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
				return
			}
			// Connections are refused until the control plane fixes it:
			// see Troubleshooting in the module's README.
			cfg.log.Printf("%v is %v: %v", addr, args.Mode, args.Err)
			healthSrv.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		}),
	)
	if err != nil {
		return err // no bootstrap, an invalid one, or no server_listener_resource_name_template
	}
	testgrpc.RegisterTestServiceServer(s, greeter{})
	healthpb.RegisterHealthServer(s, healthSrv)
	if err := csds.Register(s); err != nil {
		s.Stop()
		return err
	}
	reflection.Register(s)

	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		s.Stop()
		return err
	}
	cfg.log.Printf("listening on %v; waiting for the control plane's Listener", lis.Addr())
	if cfg.listening != nil {
		cfg.listening(lis.Addr())
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()

	select {
	case err := <-served: // the listener failed
		s.Stop()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	cfg.log.Printf("stopping: letting RPCs in flight finish (at most %v)", cfg.shutdownTimeout)
	healthSrv.Shutdown() // health checks answer NOT_SERVING from now on
	stopped := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(stopped)
	}()
	timeout := time.NewTimer(cfg.shutdownTimeout)
	defer timeout.Stop()
	select {
	case <-stopped:
	case <-timeout.C:
		cfg.log.Printf("RPCs still running after %v: closing every connection", cfg.shutdownTimeout)
		s.Stop()
		<-stopped
	}
	if err := <-served; err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	cfg.log.Print("stopped")
	return nil
}

// greeter is the example's service.
type greeter struct {
	testgrpc.UnimplementedTestServiceServer
}

func (greeter) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

func (greeter) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte("Hello, " + string(req.GetPayload().GetBody()))}}, nil
}
