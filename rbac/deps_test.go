package rbac_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: rbac is pure (ARCHITECTURE.md, "Packages"): no gRPC, xDS client,
// server or test helpers. grpc-go's audit logger API is the one exception:
// its registry is where users register audit loggers, and the package is
// a leaf (JSON and a mutex).
func TestDeps(t *testing.T) {
	testutils.CheckDeps(t, testutils.ModulePath+"/rbac", append(testutils.PureForbidden, "+google.golang.org/grpc/authz/audit")...)
}
