package filterchain_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the public filterchain is pure, like the compiler behind it.
func TestDeps(t *testing.T) {
	testutils.CheckDepsExcept(t, testutils.ModulePath+"/filterchain", []string{testutils.GRPCCertProvider}, testutils.PureForbidden...)
}
