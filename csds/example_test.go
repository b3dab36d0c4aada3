package csds_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/csds"
)

// CSDS on an admin port (a plain grpc.Server), reporting the configuration
// of an xDS server of the same process. Register works on an
// *xds.GRPCServer too, which then serves CSDS next to its services.
func ExampleRegister() {
	// An xDS server whose control plane is unreachable: its Listener stays
	// REQUESTED. (A port that was free a moment ago stands for it.)
	unused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	unused.Close()
	s, err := xds.NewGRPCServer(grpc.Creds(insecure.NewCredentials()), xds.BootstrapContents([]byte(`{
		"xds_servers": [{"server_uri": "`+unused.Addr().String()+`", "channel_creds": [{"type": "insecure"}]}],
		"node": {"id": "csds-example"},
		"server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s"
	}`)))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Stop()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go s.Serve(lis)

	// The admin server.
	admin := grpc.NewServer()
	if err := csds.Register(admin); err != nil {
		log.Fatal(err)
	}
	adminLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go admin.Serve(adminLis)
	defer admin.Stop()

	// A CSDS client, as grpcurl or an operator's tool would be.
	conn, err := grpc.NewClient(adminLis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := csdspb.NewClientStatusDiscoveryServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for { // Serve starts the Listener watch in the background
		resp, err := client.FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
		if err != nil {
			log.Fatal(err)
		}
		if printConfig(resp, "csds-example") {
			return
		}
		// Pacing the poll: an example cannot use the tests' WaitFor.
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// client "#server" of node "csds-example":
	//   Listener grpc/server?xds.resource.listening_address=127.0.0.1:<port> REQUESTED
}

// printConfig prints the resources of the xDS client of the node, if it
// watches any, and reports whether it did.
func printConfig(resp *csdspb.ClientStatusResponse, node string) bool {
	for _, c := range resp.GetConfig() {
		if c.GetNode().GetId() != node || len(c.GetGenericXdsConfigs()) == 0 {
			continue
		}
		fmt.Printf("client %q of node %q:\n", c.GetClientScope(), node)
		for _, g := range c.GetGenericXdsConfigs() {
			typ := g.GetTypeUrl()[strings.LastIndex(g.GetTypeUrl(), ".")+1:]
			name := g.GetName()
			name = name[:strings.LastIndex(name, ":")+1] + "<port>" // the port changes from run to run
			fmt.Printf("  %s %s %v\n", typ, name, g.GetClientStatus())
		}
		return true
	}
	return false
}
