package bootstrap

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/internal/version"
)

// grpcRegistry is the one gRPC package bootstrap may import: the registry of
// certificate provider plugins, whose ParseConfig validates the configs of
// registered plugins (ARCHITECTURE.md, "grpc-go couplings").
const grpcRegistry = "google.golang.org/grpc/credentials/tls/certprovider"

// TestDeps keeps bootstrap a pure leaf of this module: the xDS client imports
// it, so it must not import gRPC, except grpcRegistry and what that imports
// (no server, transport or client), or any other package of the module
// (only internal/version, for the Node's user_agent_version).
func TestDeps(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found: %v", err)
	}
	list := func(pkg string) []string {
		out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				t.Fatalf("go list -deps %s failed: %v\n%s", pkg, err, ee.Stderr)
			}
			t.Fatalf("go list -deps %s failed: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const pkg = version.ModulePath + "/internal/bootstrap"
	allowed := map[string]bool{pkg: true, version.ModulePath + "/internal/version": true}
	for _, dep := range list(grpcRegistry) {
		allowed[dep] = true
	}
	for _, dep := range list(pkg) {
		switch {
		case allowed[dep]:
		case dep == "google.golang.org/grpc" || strings.HasPrefix(dep, "google.golang.org/grpc/"):
			t.Errorf("%s depends on %s; it must not depend on gRPC beyond %s", pkg, dep, grpcRegistry)
		case dep == version.ModulePath || strings.HasPrefix(dep, version.ModulePath+"/"):
			t.Errorf("%s depends on %s; only %s/internal/version is allowed", pkg, dep, version.ModulePath)
		}
	}
}
