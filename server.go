package xds

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/tap"

	pubbootstrap "github.com/proxyless-grpc/xds/bootstrap"
	"github.com/proxyless-grpc/xds/internal/accesslog/sink"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/meshmetrics"
	"github.com/proxyless-grpc/xds/internal/server/connserver"
	"github.com/proxyless-grpc/xds/internal/server/listener"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// GRPCServer is a gRPC server whose listeners are configured by an xDS
// control plane (gRFC A36): which connections it accepts, with which filter
// chain, and which RPCs are routed to the registered services. It implements
// grpc.ServiceRegistrar and reflection.ServiceInfoProvider, so generated
// Register functions, the health service and server reflection work with it
// as with a *grpc.Server.
//
// Create one with NewGRPCServer. All methods are safe for concurrent use.
type GRPCServer struct {
	opts   *serverOptions        // immutable
	client *xdsclient.Client     // immutable; released by the first Stop/GracefulStop
	mesh   *meshmetrics.Recorder // immutable; nil without MeshMetrics
	// accessLogs are the outputs of every access log of the server's
	// filter chains; closed (flushed) when the server stops. Immutable.
	accessLogs *sink.Outputs
	release    func() // immutable
	// catalog is a grpc.Server built from the user's options that never
	// serves: it validates registrations as grpc.Server does and answers
	// GetServiceInfo. Immutable pointer; grpc.Server is safe for concurrent
	// use.
	catalog *grpc.Server
	// ready reports the serving state to the health server of
	// ReadinessHealth; nil without that option. Immutable pointer.
	ready *readiness

	mu sync.Mutex
	// services are the registrations, replayed into every grpc.Server the
	// server creates. Guarded by mu; never changes once serving is true.
	services []connserver.Service
	serving  bool                            // guarded by mu; a Serve was called
	stopped  bool                            // guarded by mu; Stop or GracefulStop was called
	lis      map[*listener.Listener]struct{} // guarded by mu; every Serve's listener
	// stopDone is closed when the first Stop or GracefulStop has finished;
	// later calls wait for it. Immutable pointer.
	stopDone chan struct{}
}

// NewGRPCServer returns an xDS-enabled gRPC server. opts may mix this
// package's options (ServingModeCallback, ReadinessHealth, DrainGraceTime,
// DrainJitter, BootstrapContents, ClientPool, MeterProvider) with any
// grpc.ServerOption, which is passed to every grpc.Server the GRPCServer
// creates (credentials, interceptors, stats handlers, keepalive, ...).
//
// The xDS bootstrap is read now: from BootstrapContents, else from the file
// named by the environment variable GRPC_XDS_BOOTSTRAP, else from the
// contents of GRPC_XDS_BOOTSTRAP_CONFIG (the order of every gRPC
// implementation); the environment is read on every call, and the source
// used is logged at INFO. NewGRPCServer
// fails when the bootstrap is missing or invalid, when it has no
// server_listener_resource_name_template, or when that template is an
// xdstp:// name whose authority the bootstrap does not list (gRFC A47).
//
// The security of each connection is the control plane's when the
// credentials (grpc.Creds) are xDS credentials: those of
// NewServerCredentials, or grpc-go's google.golang.org/grpc/credentials/xds,
// which the server serves exactly like NewServerCredentials with the same
// fallback. With other credentials, or none, a filter chain's
// transport_socket is served with those credentials (gRFC A29); the server
// then warns once per Listener version, counts each such connection in
// grpc.xds_server.connections.tls_not_applied, and says so on the status
// page. The credentials are found in grpc.Creds however it is passed,
// inside a type of the program's that embeds grpc.ServerOption included.
// If the options do not let the server tell which credentials they set,
// it warns, and refuses the connections of every filter chain whose
// transport_socket asks for TLS (counted in
// grpc.xds_server.connections.rejected with reason unknown_credentials,
// and shown on the status page) rather than risk serving them in
// plaintext.
//
// The server owns the tap handle of its grpc.Servers: it routes every RPC
// there (see the package documentation), so grpc.InTapHandle cannot be
// combined with it and makes NewGRPCServer fail.
//
// The server holds a reference on the pool's xDS client for its bootstrap
// until Stop or GracefulStop.
func NewGRPCServer(opts ...grpc.ServerOption) (*GRPCServer, error) {
	so, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	// The public package's Load: its errors are what users can name.
	pub, err := pubbootstrap.Load(so.bootstrap)
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	cfg := bootstrap.ConfigOf(pub)
	serverlog.Component.Infof("xds: using the xDS bootstrap from %s", cfg.Source())
	// Template errors do not depend on the address: check them now.
	if _, err := cfg.ServerListenerName(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	catalog, err := newCatalogServer(so.grpcOpts)
	if err != nil {
		return nil, err
	}
	client, release, err := so.pool.GetWithMeterProvider(cfg, so.meters)
	if err != nil {
		catalog.Stop()
		return nil, fmt.Errorf("xds: creating the xDS client: %w", err)
	}
	var mesh *meshmetrics.Recorder
	if so.mesh {
		if mesh, err = meshmetrics.New(so.meters, cfg.Node.GetId(), cfg.Node.GetMetadata()); err != nil {
			serverlog.Component.Errorf("xds: creating the mesh metrics: %v", err)
		}
	}
	s := &GRPCServer{
		opts:       so,
		mesh:       mesh,
		accessLogs: sink.New(sink.Options{Metrics: so.metrics}),
		client:     client,
		release:    release,
		catalog:    catalog,
		lis:        make(map[*listener.Listener]struct{}),
		stopDone:   make(chan struct{}),
	}
	if so.readiness != nil {
		s.ready = newReadiness(*so.readiness)
	}
	return s, nil
}

// newCatalogServer builds the grpc.Server that records registrations, and
// checks on the way that the user's options leave the tap handle to us:
// grpc.InTapHandle panics when it is set twice.
func newCatalogServer(grpcOpts []grpc.ServerOption) (srv *grpc.Server, err error) {
	nop := func(ctx context.Context, _ *tap.Info) (context.Context, error) { return ctx, nil }
	defer func() {
		if r := recover(); r != nil {
			srv, err = nil, fmt.Errorf("xds: the server options set grpc.InTapHandle, which an xDS server uses to route RPCs; the two cannot be combined (%v)", r)
		}
	}()
	return grpc.NewServer(append(grpcOpts[:len(grpcOpts):len(grpcOpts)], grpc.InTapHandle(nop))...), nil
}

// RegisterService registers a service and its implementation, as
// grpc.Server.RegisterService does (which it calls, so the same checks
// apply). It must be called before the first Serve; a later call is logged
// as an error and ignored.
func (s *GRPCServer) RegisterService(sd *grpc.ServiceDesc, ss any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		serverlog.Component.Errorf("xds: RegisterService(%q) after Serve: ignored", sd.ServiceName)
		return
	}
	s.catalog.RegisterService(sd, ss)
	s.services = append(s.services, connserver.Service{Desc: sd, Impl: ss})
}

// GetServiceInfo returns the registered services and their methods, as
// grpc.Server.GetServiceInfo does.
func (s *GRPCServer) GetServiceInfo() map[string]grpc.ServiceInfo {
	return s.catalog.GetServiceInfo()
}

// Serve accepts connections on lis and serves them under the xDS
// configuration of the Listener resource named after lis's address (the
// bootstrap's server_listener_resource_name_template with every "%s"
// replaced by "ip:port"; a listener bound to port 0 is named with the port
// it got). lis.Addr() must be a *net.TCPAddr.
//
// Until the Listener resource arrives, and whenever it does not exist or
// names another address, connections are accepted and closed at once
// without a byte written (gRFC A36 "not serving").
//
// Serve blocks until Stop or GracefulStop, then returns nil; it returns the
// error of lis.Accept earlier if the listener fails (temporary errors are
// retried). Serve may be called for several listeners, each configured
// independently. A Serve called after Stop or GracefulStop closes lis and
// returns grpc.ErrServerStopped at once.
func (s *GRPCServer) Serve(lis net.Listener) error {
	tcp, ok := lis.Addr().(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("xds: Serve needs a TCP listener, got address %v of type %T", lis.Addr(), lis.Addr())
	}
	addr, ok := connserver.AddrPortOf(tcp)
	if !ok {
		return fmt.Errorf("xds: Serve needs a listener bound to an IP address, got %v", tcp)
	}
	name, err := s.client.BootstrapConfig().ServerListenerName(addr)
	if err != nil {
		return fmt.Errorf("xds: %w", err) // checked by NewGRPCServer: cannot happen
	}
	// The readiness entry exists before the listener watches, so that no
	// transition is missed; after a Stop it stays not serving.
	var ready *readyEntry
	var observe func(connectivity.ServingMode)
	if s.ready != nil {
		ready = s.ready.add(lis.Addr())
		observe = func(mode connectivity.ServingMode) {
			s.ready.set(ready, mode == connectivity.ServingModeServing)
		}
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		lis.Close()
		return grpc.ErrServerStopped
	}
	s.serving = true
	l := listener.New(listener.Params{
		Lis:          lis,
		Addr:         addr,
		Name:         name,
		Client:       s.client,
		ModeCallback: s.opts.modeCallback(),
		ModeObserver: observe,
		Conns: connserver.Options{
			GRPC:        s.opts.userOpts,
			Services:    s.services,
			DrainGrace:  s.opts.drainGrace,
			DrainJitter: s.opts.drainJitter,
			Mesh:        s.mesh,
			AccessLogs:  s.accessLogs,
			AccessLog:   s.opts.accessLog,
		},
		Metrics:      s.opts.metrics.Listener(addr.String()),
		NonXDSCreds:  s.opts.nonXDSCreds,
		UnknownCreds: s.opts.unknownCreds,
	})
	s.lis[l] = struct{}{}
	s.mu.Unlock()
	err = l.Serve()
	if err != nil && ready != nil {
		s.ready.fail(ready)
	}
	return err
}

// Stop stops the server at once: it closes every listener passed to Serve
// and every connection (RPCs in flight fail), cancels every xDS watch and
// releases the xDS client. Every Serve returns nil. Stop returns when every
// goroutine of the server has exited. With an access log, it also waits for
// the handlers of the RPCs it cut short to return, at most 5 seconds, so
// that their lines are written. Later calls wait for the first.
func (s *GRPCServer) Stop() { s.stop(false) }

// GracefulStop stops the server like Stop, except that connections are sent
// a GOAWAY and closed once their RPCs in flight have finished (drains in
// progress keep their grace deadline); it returns when they have.
func (s *GRPCServer) GracefulStop() { s.stop(true) }

// accessLogFlushTime bounds how long Stop and GracefulStop wait for the
// access logs' last lines to be written.
const accessLogFlushTime = 5 * time.Second

// ReopenAccessLogs writes what the access logs hold to the files open now,
// then opens every access log file again at its path: call it after
// logrotate (or anything else) moved a log file, for example from the
// program's SIGUSR1 handler, as Envoy reopens its logs on SIGUSR1 (a library
// does not take a process's signals). A file that cannot be opened is
// reported, its lines dropped and counted, and it is tried again at the
// next reopen. It returns ctx's error if ctx ends first.
//
// # Experimental
//
// This method may change in a later release.
func (s *GRPCServer) ReopenAccessLogs(ctx context.Context) error {
	return s.accessLogs.Reopen(ctx)
}

func (s *GRPCServer) stop(graceful bool) {
	s.mu.Lock()
	if s.stopped {
		var ls []*listener.Listener
		if !graceful {
			for l := range s.lis {
				ls = append(ls, l)
			}
		}
		s.mu.Unlock()
		// As with grpc.Server: a Stop during a GracefulStop cuts it short,
		// closing the connections whose RPCs it was waiting for.
		for _, l := range ls {
			l.ForceStop()
		}
		<-s.stopDone
		return
	}
	s.stopped = true
	ls := make([]*listener.Listener, 0, len(s.lis))
	for l := range s.lis {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	if s.ready != nil {
		// Before any connection is drained: a probe must see the server
		// going away as soon as it starts to.
		s.ready.stop()
	}

	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Close(graceful)
		}()
	}
	wg.Wait()
	s.catalog.Stop()
	// Every connection is closed. The access logs' outputs are closed once
	// the chains' loggers are, each after the handlers of its RPCs cut
	// short have returned (rpclog.Chain.Close): what every RPC logged is
	// written before Stop returns, unless that takes longer than
	// accessLogFlushTime.
	ctx, cancel := context.WithTimeout(context.Background(), accessLogFlushTime)
	if err := s.accessLogs.Close(ctx); err != nil {
		serverlog.Component.Warningf("xds: writing the access logs' last lines: %v", err)
	}
	cancel()
	s.mesh.Close()
	s.release()
	close(s.stopDone)
}
