package listener

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the listener is below the public API.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/server/listener", append([]string{
		mod + "$",
	}, testutils.TestOnly...)...)
}
