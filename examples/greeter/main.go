// Command greeter is the production template of an xDS-managed gRPC server:
// the shape to copy when moving a real server to xds.NewGRPCServer.
//
//	cd examples/greeter && GRPC_XDS_BOOTSTRAP=bootstrap.json go run .
//
// Three ports:
//   - -addr: the xDS server (xds.NewGRPCServer), the application service only
//     (grpc.testing.TestService: UnaryCall greets, EmptyCall answers). The
//     control plane decides each connection's security and RPCs.
//   - -admin-grpc-addr: a plain grpc.Server for operators: health
//     (grpc.health.v1, kept by xds.ReadinessHealth: NOT_SERVING until the
//     xDS listener serves and from the start of shutdown), CSDS and
//     reflection. It answers while the xDS server does not serve.
//   - -admin-http-addr: the status page at /xds/, Prometheus metrics at
//     /metrics (the library's and gRPC's OpenTelemetry metrics through the
//     OpenTelemetry Prometheus exporter) and, with -pprof, /debug/pprof/.
//
// SIGINT or SIGTERM: readiness goes NOT_SERVING, the greeter waits
// -shutdown-delay (for load balancers to notice), then GracefulStop, then
// Stop after -shutdown-timeout. With -access-log-file, every RPC is logged
// in Istio's format (xds.AccessLogFile), and SIGUSR1 reopens the file
// (GRPCServer.ReopenAccessLogs), as Envoy reopens its logs, for
// logrotate. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats/opentelemetry"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/admin"
	"github.com/proxyless-grpc/xds/csds"
)

// config is what run needs; parseFlags fills it from the command line.
type config struct {
	addr            string        // the xDS server's address
	adminGRPCAddr   string        // health, CSDS, reflection
	adminHTTPAddr   string        // status page, metrics, pprof
	pprof           bool          // serve /debug/pprof/ on the admin HTTP port
	shutdownDelay   time.Duration // NOT_SERVING before GracefulStop for this long
	shutdownTimeout time.Duration // how long GracefulStop may take before Stop
	drainGrace      time.Duration // xds.DrainGraceTime
	noMeshMetrics   bool          // without xds.MeshMetrics (-mesh-metrics=false)
	accessLogFile   string        // xds.AccessLogFile; "" for none
	log             *log.Logger

	// Test hooks, nil in the command.
	// listening is called with the three listening addresses once they
	// accept connections (tests listen on port 0).
	listening func(addrs addrs)
	// shuttingDown is called once readiness is NOT_SERVING, as the
	// shutdown delay starts.
	shuttingDown func()
	// endDelay, when closed, ends the shutdown delay early.
	endDelay <-chan struct{}
	// register, if set, registers more services on the xDS server.
	register func(grpc.ServiceRegistrar)
}

// addrs are the greeter's listening addresses.
type addrs struct {
	xds, adminGRPC, adminHTTP net.Addr
}

func parseFlags(args []string, output io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("greeter", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:50051", "the `address` of the xDS server (ip:port; 0.0.0.0:50051 for every interface). The control plane must have a Listener for it")
	fs.StringVar(&cfg.adminGRPCAddr, "admin-grpc-addr", "127.0.0.1:50052", "the `address` of the admin gRPC server: health (readiness), CSDS, reflection")
	fs.StringVar(&cfg.adminHTTPAddr, "admin-http-addr", "127.0.0.1:50053", "the `address` of the admin HTTP server: /xds/ (status page), /metrics (Prometheus), /debug/pprof/ with -pprof")
	fs.BoolVar(&cfg.pprof, "pprof", false, "serve net/http/pprof at /debug/pprof/ on the admin HTTP server")
	fs.DurationVar(&cfg.shutdownDelay, "shutdown-delay", 5*time.Second, "on SIGINT/SIGTERM, how long to report NOT_SERVING while still serving, before GracefulStop")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 30*time.Second, "after -shutdown-delay, how long to let RPCs in flight finish before closing every connection")
	fs.DurationVar(&cfg.drainGrace, "drain-grace", xds.DefaultDrainGraceTime, "how long a connection drained by a configuration change may finish its RPCs")
	fs.StringVar(&cfg.accessLogFile, "access-log-file", "", "write an access log line for every RPC to this `path` (/dev/stdout for the pod's log), in Istio's default format (xds.AccessLogFile); SIGUSR1 reopens it, for logrotate")
	meshMetrics := fs.Bool("mesh-metrics", true, "record Istio's standard metrics (istio_requests_total, ...) as a sidecar would, for Istio's dashboards and Kiali (xds.MeshMetrics)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.noMeshMetrics = !*meshMetrics
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

// run serves until ctx is done, then shuts down in order. It fails at once
// without a valid bootstrap or when it cannot listen.
func run(ctx context.Context, cfg config) (err error) {
	// Metrics: one MeterProvider for the library (xds.MeterProvider) and for
	// gRPC's own RPC metrics, read by Prometheus through /metrics.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { err = errors.Join(err, mp.Shutdown(context.Background())) }()

	// The control plane picks each connection's security; a filter chain
	// without transport_socket is plaintext.
	creds, err := xds.NewServerCredentials(xds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	healthSrv := health.NewServer()
	opts := []grpc.ServerOption{
		grpc.Creds(creds),
		xds.DrainGraceTime(cfg.drainGrace),
		// NOT_SERVING until the Listener arrives, and from Stop/GracefulStop.
		xds.ReadinessHealth(healthSrv, xds.ReadinessOptions{}),
		xds.MeterProvider(mp),
		opentelemetry.ServerOption(opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp}}),
		xds.ServingModeCallback(func(addr net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				cfg.log.Printf("%v is SERVING", addr)
				return
			}
			// Connections are refused until the control plane fixes it:
			// see docs/troubleshooting.md.
			cfg.log.Printf("%v is %v: %v", addr, args.Mode, args.Err)
		}),
	}
	if !cfg.noMeshMetrics {
		// istio_requests_total and the rest, in the same MeterProvider:
		// Istio's dashboards and Kiali see the greeter as if it had a sidecar.
		opts = append(opts, xds.MeshMetrics())
	}
	if cfg.accessLogFile != "" {
		// A line per RPC, as an Istio sidecar writes with meshConfig
		// accessLogFile.
		opts = append(opts, xds.AccessLogFile(cfg.accessLogFile))
	}
	s, err := xds.NewGRPCServer(opts...)
	if err != nil {
		return err // no bootstrap, an invalid one, or no server_listener_resource_name_template
	}
	if cfg.accessLogFile != "" {
		// SIGUSR1 reopens the access log, as it does Envoy's: logrotate
		// moves the file, then signals (its postrotate). A library takes
		// no signal; the program does.
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		reopenDone := make(chan struct{})
		defer func() {
			signal.Stop(usr1)
			close(usr1)
			<-reopenDone
		}()
		go func() {
			defer close(reopenDone)
			for range usr1 {
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := s.ReopenAccessLogs(rctx); err != nil {
					cfg.log.Printf("SIGUSR1: reopening the access log: %v", err)
				} else {
					cfg.log.Printf("SIGUSR1: reopened the access log %s", cfg.accessLogFile)
				}
				cancel()
			}
		}()
	}
	testgrpc.RegisterTestServiceServer(s, greeter{})
	if cfg.register != nil {
		cfg.register(s)
	}

	adminGRPC := grpc.NewServer()
	healthpb.RegisterHealthServer(adminGRPC, healthSrv)
	if err := csds.Register(adminGRPC); err != nil {
		s.Stop()
		return err
	}
	reflection.Register(adminGRPC)

	mux := http.NewServeMux()
	mux.Handle("/xds/", http.StripPrefix("/xds", admin.NewStatusHandler(s)))
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	if cfg.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	adminHTTP := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	var lis [3]net.Listener
	for i, a := range []string{cfg.addr, cfg.adminGRPCAddr, cfg.adminHTTPAddr} {
		if lis[i], err = net.Listen(listenNetwork(a), a); err != nil {
			for _, l := range lis[:i] {
				l.Close()
			}
			s.Stop()
			adminGRPC.Stop()
			return err
		}
	}
	cfg.log.Printf("xDS server on %v (waiting for the control plane's Listener), admin gRPC on %v, admin HTTP on %v", lis[0].Addr(), lis[1].Addr(), lis[2].Addr())
	served := make(chan error, 3)
	go func() { served <- s.Serve(lis[0]) }()
	go func() { served <- adminGRPC.Serve(lis[1]) }()
	go func() {
		if err := adminHTTP.Serve(lis[2]); !errors.Is(err, http.ErrServerClosed) {
			served <- err
			return
		}
		served <- nil
	}()
	if cfg.listening != nil {
		cfg.listening(addrs{lis[0].Addr(), lis[1].Addr(), lis[2].Addr()})
	}

	var serveErr error
	select {
	case serveErr = <-served: // a listener failed
		cfg.log.Printf("serve: %v; stopping", serveErr)
	case <-ctx.Done():
	}

	// 1. Readiness: NOT_SERVING from now on, whatever the xDS state.
	healthSrv.Shutdown()
	cfg.log.Printf("stopping: NOT_SERVING; serving on for %v (-shutdown-delay)", cfg.shutdownDelay)
	if cfg.shuttingDown != nil {
		cfg.shuttingDown()
	}
	// 2. Let load balancers and probes notice.
	if serveErr == nil {
		delay := time.NewTimer(cfg.shutdownDelay)
		select {
		case <-delay.C:
		case <-cfg.endDelay:
		}
		delay.Stop()
	}
	// 3. GracefulStop, 4. Stop after -shutdown-timeout.
	cfg.log.Printf("GracefulStop: letting RPCs in flight finish (at most %v)", cfg.shutdownTimeout)
	stopped := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(stopped)
	}()
	timeout := time.NewTimer(cfg.shutdownTimeout)
	select {
	case <-stopped:
	case <-timeout.C:
		cfg.log.Printf("RPCs still running after %v: closing every connection", cfg.shutdownTimeout)
		s.Stop()
		<-stopped
	}
	timeout.Stop()
	// The admin servers last: they answer until the xDS server is gone.
	adminGRPC.Stop()
	httpCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := adminHTTP.Shutdown(httpCtx); err != nil {
		adminHTTP.Close()
	}
	for range 3 - btoi(serveErr != nil) {
		if err := <-served; err != nil && serveErr == nil {
			serveErr = err
		}
	}
	if serveErr != nil {
		return fmt.Errorf("serve: %w", serveErr)
	}
	cfg.log.Print("stopped")
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
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

// listenNetwork is "tcp4" for an IPv4 address (0.0.0.0 included) and "tcp"
// otherwise. On a dual-stack host Go reports a "tcp" socket on 0.0.0.0:p as
// [::]:p, and the server asks for the Listener named after that; on "tcp4" it
// is 0.0.0.0:p, the name -addr says (docs/troubleshooting.md, "Which Listener
// the server asks for").
func listenNetwork(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "tcp"
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
		return "tcp4"
	}
	return "tcp"
}
