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
	testutils.CheckDepsExcept(t, testutils.ModulePath+"/rbac", []string{"google.golang.org/grpc/authz/audit"}, testutils.PureForbidden...)
}
