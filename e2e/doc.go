// Package e2e holds the end-to-end tests of the xDS server: a real
// go-control-plane management server in the test process, the server under
// test built with the public API (xds.NewGRPCServer), and real grpc-go
// clients, over loopback TCP with real TLS. The package has no code of its
// own; its tests share one harness (helpers_test.go: testEnv, testServer,
// testClient and the resource builders), extended per feature in
// *_helpers_test.go files.
package e2e
