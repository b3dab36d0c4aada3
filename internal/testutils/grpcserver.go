package testutils

import (
	"net"
	"testing"

	"google.golang.org/grpc"
)

// ServeGRPC serves s, with the services the caller registered on it, on a
// new port of 127.0.0.1 until the test ends, and returns the port's
// address: a plain gRPC server beside the one under test (an authorization
// or rate limit service, an admin port, a peer of a client under test).
func ServeGRPC(t testing.TB, s *grpc.Server) net.Addr {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr()
}
