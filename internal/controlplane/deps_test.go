package controlplane

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the control plane is a program's part (the soak's), not only
// a test helper: no test helpers, and nothing of the server. (Package
// testing comes in through go-control-plane's pkg/log.)
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/controlplane", mod+"$", mod+"/internal/server", mod+"/internal/testutils")
}
