package xdsclient

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDependencies: the xDS client stays independent of the packages that
// interpret resources (ARCHITECTURE.md, "Packages"), and non-test code does
// not pull in package testing or the test helpers.
func TestDependencies(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/xdsclient",
		mod+"/internal/filterchain",
		mod+"/internal/routing",
		mod+"/internal/httpfilter",
		mod+"/rbac",
		mod+"/internal/testutils",
		"testing",
	)
}
