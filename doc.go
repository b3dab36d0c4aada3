// Package xds is an xDS-enabled gRPC server (gRFC A36): a drop-in
// replacement for grpc.NewServer whose listeners are configured by an xDS
// control plane (Istio, Traffic Director, go-control-plane, ...). The control
// plane decides which connections are accepted and with which filter chain,
// which RPCs are routed to the registered services, and can change all of it
// live without failing an RPC in flight.
//
//	s, err := xds.NewGRPCServer(grpc.Creds(insecure.NewCredentials()),
//		xds.ServingModeCallback(func(addr net.Addr, a xds.ServingModeChangeArgs) {
//			log.Printf("%v is now %v (err: %v)", addr, a.Mode, a.Err)
//		}))
//	if err != nil {
//		log.Fatal(err)
//	}
//	pb.RegisterGreeterServer(s, &server{})
//	lis, _ := net.Listen("tcp4", "0.0.0.0:50051") // "tcp" may report [::]: the Listener is named after lis.Addr()
//	s.Serve(lis)
//
// The public API mirrors google.golang.org/grpc/xds, so moving from grpc-go's
// package to this one is a change of import path.
//
// # Configuration
//
// NewGRPCServer reads the xDS bootstrap (BootstrapContents, else the file
// named by GRPC_XDS_BOOTSTRAP, else GRPC_XDS_BOOTSTRAP_CONFIG, as every gRPC
// implementation does) when it is called. Serve watches the Listener resource named by the bootstrap's
// server_listener_resource_name_template with "%s" replaced by the listening
// "ip:port", and the RouteConfigurations its filter chains name.
//
// # Serving modes
//
// A listener serves once its Listener resource, and the RouteConfigurations
// it uses, have arrived. Until then, and whenever the Listener does not exist
// or names another address, it is "not serving": connections are accepted and
// closed without a byte written. Losing the control plane does not change the
// mode; the last good configuration keeps serving. ServingModeCallback is
// told of every transition.
//
// # Updates and drain
//
// A new Listener applies to new connections at once. An existing connection
// keeps running untouched when its filter chain is unchanged in the new
// Listener and the new Listener would still pick that chain for it (as Envoy
// does); otherwise it is drained: sent a GOAWAY, its RPCs in flight finish,
// and it is closed after DrainGraceTime at the latest. DrainJitter spreads the
// GOAWAYs of one drain over a window. An update of a RouteConfiguration
// (RDS) applies to existing connections at once, without a drain.
//
// # Observability
//
// The server logs through grpclog (component "xds-server", each line
// prefixed with its listener), so gRPC's log settings apply: serving-mode
// transitions, drains, NACKs and handshake failures are logged once each,
// never per RPC. With MeterProvider it records OpenTelemetry metrics, its
// own (grpc.xds_server.*) and the xDS client's (grpc.xds_client.*, gRFC
// A78). Package csds serves the xDS configuration of every xDS client of the
// process (gRFC A40). ReadinessHealth reports the serving state to a
// grpc.health.v1 server, for readiness probes; package admin serves a status
// page of the server for people.
//
// # Per-RPC routing and the tap handle
//
// Each RPC is routed by the tap handle (grpc.InTapHandle) of its connection's
// filter chain: the virtual host is picked by :authority, the route by path
// and headers, and the chain's HTTP filters run; an RPC with no matching
// route, on a route whose action is not non_forwarding_action, or on a chain
// whose RouteConfiguration is unusable fails with UNAVAILABLE. The tap runs
// before gRPC looks up the method and before any user interceptor; filters
// whose work must wait (ext_authz, the rate limits, fault delays) finish it
// in an interceptor of the server's that runs before every interceptor of
// the user's, so a refused RPC never reaches user code. Because the server
// owns the tap handle, grpc.InTapHandle cannot be passed to NewGRPCServer.
// Every other grpc.ServerOption (credentials, interceptors, stats handlers,
// ...) applies as with grpc.NewServer, for every RPC the filters let
// through; a grpc.UnaryInterceptor or grpc.StreamInterceptor, which gRPC
// runs before every other interceptor, runs after the filters, chained
// before the grpc.ChainUnaryInterceptor ones.
//
// # Implementation
//
// grpc.Server cannot drain one connection through its public API, so each
// accepted connection is served by an unexported grpc.Server of its own,
// built from the user's options, its filter chain's tap handle (and, on a
// chain whose filters may wait, the interceptors that run their work after
// the tap) and the registered services; draining
// a connection gracefully stops its server,
// never the listening socket. An idle connection costs about 2.7 KB of heap
// more than on a plain grpc.Server and a new one a few tens of microseconds of CPU
// (see docs/performance.md). Besides gRPC's own goroutines, an
// idle listener runs none: its configuration serializer and the one that
// stops the servers of closed connections run only while they have work,
// and a draining connection has one until its drain ends. ARCHITECTURE.md in the repository describes the packages,
// the paths of a configuration update and of an RPC, and the goroutines.
//
// # Stability
//
// Stable: NewGRPCServer, GRPCServer's methods, NewServerCredentials, the
// server options and ReadinessHealth keep their names and meaning, which are
// grpc-go's where grpc-go has the same name. MeterProvider and the metrics
// it records are experimental. The exported API of every package of the
// module is pinned in api/ at the root of the repository.
package xds
