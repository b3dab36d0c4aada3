// Package e2e points tests at a real xDS management server: it starts one
// (internal/controlplane: go-control-plane's ADS server in the test process,
// on loopback) for the length of a test, and builds the bootstrap and the
// resources that configure an xDS client and server through it.
package e2e

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/controlplane"
)

// ManagementServer is an in-process xDS management server; see package
// controlplane for how it answers.
type ManagementServer = controlplane.Server

// ManagementServerOptions configures StartManagementServer.
type ManagementServerOptions = controlplane.Options

// Resources is a set of resources for ManagementServer.Update.
type Resources = controlplane.Resources

// Predicates on recorded DiscoveryRequests, for WaitForRequest.
var (
	IsACK          = controlplane.IsACK
	IsNACK         = controlplane.IsNACK
	IsSubscription = controlplane.IsSubscription
)

// StartManagementServer starts a management server with no resources, stopped
// when the test ends. It fails the test if it cannot listen.
func StartManagementServer(t testing.TB, opts ManagementServerOptions) *ManagementServer {
	t.Helper()
	m, err := controlplane.Start(opts)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	t.Cleanup(m.Stop)
	return m
}

// RestartManagementServer restarts m on the same address with the same
// resources (clients must reconnect), failing the test if it cannot.
func RestartManagementServer(t testing.TB, m *ManagementServer) {
	t.Helper()
	if err := m.Restart(); err != nil {
		t.Fatalf("e2e: %v", err)
	}
}
