package httpfilter_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the public filter API is pure, so that rbac can share its
// request view, and is its own: it does not depend on the framework
// (internal/httpfilter), which adapts it.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/httpfilter", append([]string{
		mod + "/internal/httpfilter$",
		mod + "/internal/httpfilter/builtin$",
		mod + "/internal/server",
	}, testutils.PureForbidden...)...)
}
