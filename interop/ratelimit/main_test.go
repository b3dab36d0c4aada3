package ratelimit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// ratelimitModule is envoyproxy/ratelimit's service, pinned to a
// pseudo-version that builds from the module proxy with no replace
// directive (its main module has none).
const ratelimitModule = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

// ratelimitBin is the service's binary, built by TestMain.
var ratelimitBin string

// TestMain builds the service into a temporary directory (about 20 s the
// first time; the go command's caches make later builds quick), runs the
// tests, removes the directory, and checks for leaked goroutines, with the
// exceptions of the library's own leak check (internal/testutils).
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "interop-ratelimit-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	cmd := exec.Command("go", "install", ratelimitModule)
	// Outside this module, so that the install is the module proxy's
	// version alone.
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building %s: %v\n%s", ratelimitModule, err, out)
		return 1
	}
	ratelimitBin = filepath.Join(dir, "service_cmd")
	fmt.Fprintf(os.Stderr, "built envoyproxy/ratelimit in %v\n", time.Since(start).Round(100*time.Millisecond))
	if code := m.Run(); code != 0 {
		return code
	}
	if err := testutils.FindLeaks(); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		return 1
	}
	return 0
}
