package httpfilter_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the filter framework is pure (no gRPC, I/O or goroutines)
// and knows neither the resources that carry filters nor the server.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/httpfilter", append([]string{
		mod + "$",
		mod + "/internal/server",
		mod + "/internal/filterchain",
		mod + "/internal/xdsclient",
		mod + "/internal/xdsresource",
	}, testutils.PureForbidden...)...)
}
