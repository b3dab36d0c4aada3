package certprovider_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: certprovider reads files and parses certificates with the
// standard library; it needs neither gRPC nor the xDS client.
func TestDeps(t *testing.T) {
	testutils.CheckDeps(t, testutils.ModulePath+"/internal/certprovider", testutils.PureForbidden...)
}
