package matcher_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: internal/matcher is pure and shared by routing and RBAC: no gRPC, xDS client, server or test helpers.
func TestDeps(t *testing.T) {
	testutils.CheckDeps(t, testutils.ModulePath+"/internal/matcher", testutils.PureForbidden...)
}
