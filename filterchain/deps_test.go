package filterchain_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps checks the package's place in the import graph (STYLE.md,
// "Package layout"): filterchain is pure, so it must depend on neither gRPC,
// the xDS client nor the root package, and, outside tests, not on package
// testing or the test helpers.
func TestDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/proxyless-grpc/xds/filterchain").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, dep := range deps {
		if forbiddenDep(dep) {
			t.Errorf("filterchain depends on %q; it must stay pure", dep)
		}
	}
}

// forbiddenDep reports whether filterchain must not depend on dep.
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
