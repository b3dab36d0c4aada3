package clock

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the clock is a leaf, standard library only.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/clock", append([]string{
		mod + "/",
		"google.golang.org/",
	}, testutils.TestOnly...)...)
}
