// Command quickstart runs an xDS-managed gRPC server together with an embedded
// control plane, so that the library can be tried with no setup:
//
//	go run ./examples/quickstart
//
// The server side of the library is not built yet; until it is, this program
// says so and exits.
package main

import "fmt"

func main() {
	fmt.Println("quickstart: not yet — the xDS server (xds.NewGRPCServer) is still being built; see README.md")
}
