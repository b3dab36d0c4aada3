package rds_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the RDS handler answers to its listener through Params only.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/server/rds", append([]string{
		mod + "$",
		mod + "/internal/server/listener",
		mod + "/internal/server/connserver",
		mod + "/internal/server/security",
	}, testutils.TestOnly...)...)
}
