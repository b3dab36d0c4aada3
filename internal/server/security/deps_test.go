package security

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: security sees a connection only through security.Conn:
// no listener, RDS, per-RPC path or xDS client.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/server/security", append([]string{
		mod + "$",
		mod + "/internal/xdsclient",
		mod + "/internal/server/listener",
		mod + "/internal/server/rds",
		mod + "/internal/server/connserver",
		mod + "/internal/server/rpcpath",
	}, testutils.TestOnly...)...)
}
