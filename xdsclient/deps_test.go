package xdsclient

import (
	"os/exec"
	"strings"
	"testing"
)

// The xDS client must stay independent of the packages that interpret
// resources (STYLE.md package layout), and non-test code must not pull in
// testing helpers.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go list -deps failed (no go tool?): %v\n%s", err, out)
	}
	const mod = "github.com/proxyless-grpc/xds/"
	forbidden := []string{
		mod + "filterchain",
		mod + "internal/routing",
		mod + "internal/httpfilter",
		mod + "rbac",
		mod + "internal/testutils",
		"testing",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("xdsclient depends on %s", dep)
			}
		}
	}
}
