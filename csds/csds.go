// Package csds implements the Client Status Discovery Service (gRFC A40):
// a gRPC service, envoy.service.status.v3.ClientStatusDiscoveryService,
// that answers with the xDS configuration this process runs with, as its
// xDS clients received it.
//
// Register it on the server that should expose it, an *xds.GRPCServer or a
// plain *grpc.Server (an admin port, for instance):
//
//	s, _ := xds.NewGRPCServer(...)
//	if err := csds.Register(s); err != nil { ... }
//
// A response has one ClientConfig per xDS client of the process (every
// client, whichever pool made it, including those of servers built with
// their own bootstrap contents or pool), each with
// the client's scope as client_scope (gRFC A71: "#server" for the servers'
// clients), the Node exactly as sent to the management servers, and one
// GenericXdsConfig per watched resource: type URL, name, version_info, the
// resource as received (xds_config), when it was received, its client
// status (REQUESTED, ACKED, NACKED, DOES_NOT_EXIST, TIMEOUT, RECEIVED_ERROR;
// gRFC A40, A88) and the error state of the last failed update. The
// deprecated per-xDS-type configs are never filled. The answer comes from
// the clients' caches, so it works while the control plane is unreachable.
//
// # Stability
//
// Experimental, as grpc-go's xds/csds: the names mirror grpc-go's and will
// keep doing so; the package may change with gRFC A40.
package csds

import (
	"context"
	"errors"
	"io"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/proxyless-grpc/xds/internal/syncutil"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

var logger = grpclog.Component("csds")

// ClientStatusDiscoveryServer implements
// envoy.service.status.v3.ClientStatusDiscoveryService over every xDS client
// of the process. Create it with NewClientStatusDiscoveryServer (or use
// Register); its methods are safe for concurrent use.
//
// # Experimental
//
// This type may change in a later release.
type ClientStatusDiscoveryServer struct {
	csdspb.UnimplementedClientStatusDiscoveryServiceServer

	closed *syncutil.Event // fired by Close
}

// NewClientStatusDiscoveryServer returns a CSDS service. It holds no
// resource: the xDS clients are looked up on each request, so it reports
// the clients created after it too. The error is for forward compatibility;
// it is always nil today.
//
// # Experimental
//
// This function may change in a later release.
func NewClientStatusDiscoveryServer() (*ClientStatusDiscoveryServer, error) {
	return &ClientStatusDiscoveryServer{closed: syncutil.NewEvent()}, nil
}

// Register creates a CSDS service and registers it on r (an *xds.GRPCServer
// or a *grpc.Server). Call it before the server's Serve, as any service
// registration. The service lives as long as the server.
//
// # Experimental
//
// This function may change in a later release.
func Register(r grpc.ServiceRegistrar) error {
	if r == nil {
		return errors.New("csds: Register needs a grpc.ServiceRegistrar, got nil")
	}
	s, err := NewClientStatusDiscoveryServer()
	if err != nil {
		return err
	}
	csdspb.RegisterClientStatusDiscoveryServiceServer(r, s)
	return nil
}

// Close makes the service answer every later request, and every open
// stream's next request, with UNAVAILABLE. It holds nothing else; calling it
// more than once is harmless.
func (s *ClientStatusDiscoveryServer) Close() { s.closed.Fire() }

// FetchClientStatus answers one request with the configuration of every
// xDS client of the process. A request with node_matchers gets
// INVALID_ARGUMENT (gRFC A40: this process is one node).
func (s *ClientStatusDiscoveryServer) FetchClientStatus(_ context.Context, req *csdspb.ClientStatusRequest) (*csdspb.ClientStatusResponse, error) {
	return s.respond(req)
}

// StreamClientStatus answers each request of the stream as
// FetchClientStatus does, in order. An invalid request ends the stream with
// INVALID_ARGUMENT.
func (s *ClientStatusDiscoveryServer) StreamClientStatus(stream csdspb.ClientStatusDiscoveryService_StreamClientStatusServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.respond(req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// respond builds the answer to req.
func (s *ClientStatusDiscoveryServer) respond(req *csdspb.ClientStatusRequest) (*csdspb.ClientStatusResponse, error) {
	if s.closed.HasFired() {
		return nil, status.Error(codes.Unavailable, "csds: the service is closed")
	}
	if n := len(req.GetNodeMatchers()); n > 0 {
		logger.Infof("csds: refused a request with %d node_matchers", n)
		return nil, status.Errorf(codes.InvalidArgument, "csds: node_matchers are not supported: this process is a single xDS node (gRFC A40); got %d", n)
	}
	clients := xdsclient.Clients()
	resp := &csdspb.ClientStatusResponse{Config: make([]*csdspb.ClientConfig, 0, len(clients))}
	for _, c := range clients {
		resp.Config = append(resp.Config, clientConfig(c))
	}
	return resp, nil
}

// clientConfig is the CSDS view of one client.
func clientConfig(c *xdsclient.Client) *csdspb.ClientConfig {
	dump := c.Dump()
	cfg := &csdspb.ClientConfig{
		Node:              c.BootstrapConfig().Node,
		ClientScope:       c.Scope(),
		GenericXdsConfigs: make([]*csdspb.ClientConfig_GenericXdsConfig, 0, len(dump)),
	}
	for _, d := range dump {
		cfg.GenericXdsConfigs = append(cfg.GenericXdsConfigs, genericConfig(d))
	}
	return cfg
}

// genericConfig converts one resource of a dump.
func genericConfig(d xdsclient.ResourceDump) *csdspb.ClientConfig_GenericXdsConfig {
	g := &csdspb.ClientConfig_GenericXdsConfig{
		TypeUrl:      d.TypeURL,
		Name:         d.Name,
		VersionInfo:  d.Version,
		XdsConfig:    d.Raw,
		ClientStatus: clientStatus(d.Status),
	}
	if !d.LastUpdated.IsZero() {
		g.LastUpdated = timestamppb.New(d.LastUpdated)
	}
	if e := d.Error; e != nil {
		g.ErrorState = &adminpb.UpdateFailureState{
			LastUpdateAttempt: timestamppb.New(e.Time),
			Details:           e.Reason,
			VersionInfo:       e.Version,
		}
	}
	return g
}

// clientStatus maps a cache state to its CSDS enum value.
func clientStatus(s xdsclient.ResourceStatus) adminpb.ClientResourceStatus {
	switch s {
	case xdsclient.StatusRequested:
		return adminpb.ClientResourceStatus_REQUESTED
	case xdsclient.StatusDoesNotExist:
		return adminpb.ClientResourceStatus_DOES_NOT_EXIST
	case xdsclient.StatusACKed:
		return adminpb.ClientResourceStatus_ACKED
	case xdsclient.StatusNACKed:
		return adminpb.ClientResourceStatus_NACKED
	case xdsclient.StatusReceivedError:
		return adminpb.ClientResourceStatus_RECEIVED_ERROR
	case xdsclient.StatusTimeout:
		return adminpb.ClientResourceStatus_TIMEOUT
	default:
		return adminpb.ClientResourceStatus_UNKNOWN
	}
}
