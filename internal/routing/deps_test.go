package routing_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps checks the package's place in the import graph (STYLE.md,
// "Package layout"): routing is pure, so it must depend on neither gRPC, the
// xDS client nor the root package, and, outside tests, not on package
// testing or the test helpers.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/proxyless-grpc/xds/internal/routing").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if forbiddenDep(dep) {
			t.Errorf("internal/routing depends on %q; it must stay pure", dep)
		}
	}
}

// forbiddenDep reports whether a pure package must not depend on dep.
func forbiddenDep(dep string) bool {
	switch dep {
	case "testing", "github.com/proxyless-grpc/xds", "google.golang.org/grpc":
		return true
	}
	for _, tree := range []string{
		"google.golang.org/grpc/",
		"github.com/proxyless-grpc/xds/xdsclient",
		"github.com/proxyless-grpc/xds/internal/testutils",
	} {
		if strings.HasPrefix(dep, tree) {
			return true
		}
	}
	return false
}
