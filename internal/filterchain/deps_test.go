package filterchain_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: filterchain is pure (ARCHITECTURE.md, "Packages"): no gRPC, xDS client, server or test helpers.
func TestDeps(t *testing.T) {
	testutils.CheckDeps(t, testutils.ModulePath+"/internal/filterchain", testutils.PureForbidden...)
}
