package ratelimitdesc_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestDeps: internal/ratelimitdesc is pure (ARCHITECTURE.md, "Packages").
func TestDeps(t *testing.T) {
	testutils.CheckDeps(t, testutils.ModulePath+"/internal/ratelimitdesc", testutils.PureForbidden...)
}
