package xdsresource_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the resource decoders know the xDS client and the pure
// packages, never the server that uses them.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/xdsresource", append([]string{
		mod + "$",
		mod + "/internal/server",
	}, testutils.TestOnly...)...)
}
