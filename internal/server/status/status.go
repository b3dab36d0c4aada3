// Package status is a point-in-time view of an xDS server for people: what
// each listener serves with, its connections and drains, and the xDS
// client's state. The server builds it on request (nothing is kept for it
// between requests); package admin renders it.
package status

import (
	"net"
	"time"

	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/server/connserver"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// Server is the status of one xds.GRPCServer.
type Server struct {
	// Time is when the status was taken.
	Time time.Time
	// NodeID is the xDS node ID of the server's bootstrap.
	NodeID string
	// XDSServers are the xDS client's management-server connections.
	XDSServers []xdsclient.ServerStatus
	// Resources are the xDS client's resources (as for CSDS), by type URL
	// and name.
	Resources map[ResourceKey]xdsclient.ResourceDump
	// Listeners are the listeners passed to Serve, by address.
	Listeners []Listener
	// Stopped reports that Stop or GracefulStop has started.
	Stopped bool
}

// ResourceKey names one xDS resource.
type ResourceKey struct{ TypeURL, Name string }

// Listener is the status of one listener passed to Serve.
type Listener struct {
	// Addr is the listening address; Name the Listener resource watched.
	Addr net.Addr
	Name string
	// Mode is the serving mode, Err why it is not serving, and Since when
	// it took this mode (zero while starting).
	Mode  connectivity.ServingMode
	Err   error
	Since time.Time
	// Applied is the Listener resource served with, exactly as received;
	// nil when not serving.
	Applied *anypb.Any
	// Chains are the filter chains of the applied Listener, in its order,
	// the default chain last (filterchain.Table.Chains).
	Chains []Chain
	// Retired are the chain servers out of service that still have
	// connections draining (their chain changed or went away).
	Retired []Chain
	// Counted are the outcomes the listener's HTTP filters counted since
	// it started (RBAC decisions, ...), by filter kind and instance name
	// (rpcpath.Counts).
	Counted []rpcpath.FilterCount
	// NonXDSCreds describes the server's transport credentials when they
	// are not xDS credentials: filter chains with a transport_socket are
	// then served without the TLS it asks for (gRFC A29). Empty when they
	// are xDS credentials.
	NonXDSCreds string
	// UnknownCreds says why the server cannot tell its transport
	// credentials: the connections of filter chains with a
	// transport_socket are then refused. Empty when it can.
	UnknownCreds string
}

// Chain is one filter chain and the connections it serves.
type Chain struct {
	Chain *filterchain.FilterChain
	// Routes are what its RPCs route with now; nil if it has none yet.
	Routes *rpcpath.Routes
	// Conns counts its connections.
	Conns connserver.Stats
}

// ServerOf returns the status of srv, which must be an *xds.GRPCServer.
// Package xds sets it (it imports this package, so this package cannot
// import it).
var ServerOf func(srv any) *Server
