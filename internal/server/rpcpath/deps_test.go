package rpcpath_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the per-RPC path reads what the configuration path built;
// it watches nothing and knows no listener, connection or security.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/server/rpcpath", append([]string{
		mod + "$",
		mod + "/internal/xdsclient",
		mod + "/internal/server/listener",
		mod + "/internal/server/rds",
		mod + "/internal/server/connserver",
		mod + "/internal/server/security",
	}, testutils.TestOnly...)...)
}
