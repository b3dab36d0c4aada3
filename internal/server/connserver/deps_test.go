package connserver

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the connection servers are given their routes and
// security; they watch nothing and know no listener.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/server/connserver", append([]string{
		mod + "$",
		mod + "/internal/xdsclient",
		mod + "/internal/server/listener",
		mod + "/internal/server/rds",
	}, testutils.TestOnly...)...)
}
