package typedconfig_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestDeps: typedconfig is pure: no gRPC, xDS client or test helpers.
func TestDeps(t *testing.T) {
	testutils.CheckDeps(t, testutils.ModulePath+"/internal/typedconfig", testutils.PureForbidden...)
}
