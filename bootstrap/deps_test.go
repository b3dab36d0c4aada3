package bootstrap

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/internal/version"
)

// TestDeps keeps bootstrap a pure leaf of this module: the xDS client imports
// it, so it must not import gRPC or any other package of the module (only
// internal/version, for the Node's user_agent_version).
func TestDeps(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found: %v", err)
	}
	const pkg = version.ModulePath + "/bootstrap"
	out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s failed: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s failed: %v", pkg, err)
	}
	allowed := map[string]bool{pkg: true, version.ModulePath + "/internal/version": true}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "google.golang.org/grpc" || strings.HasPrefix(dep, "google.golang.org/grpc/"):
			t.Errorf("%s depends on %s; it must not depend on gRPC", pkg, dep)
		case (dep == version.ModulePath || strings.HasPrefix(dep, version.ModulePath+"/")) && !allowed[dep]:
			t.Errorf("%s depends on %s; only %s/internal/version is allowed", pkg, dep, version.ModulePath)
		}
	}
}
