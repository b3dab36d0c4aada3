package meshmetrics

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the mesh metrics know gRPC's stats API and OpenTelemetry, no
// server, listener or xDS client.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/meshmetrics", append([]string{
		mod + "$",
		mod + "/internal/xdsclient",
		mod + "/internal/server",
		mod + "/internal/bootstrap",
	}, testutils.TestOnly...)...)
}
