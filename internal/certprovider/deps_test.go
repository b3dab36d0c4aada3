package certprovider_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: certprovider reads files and parses certificates with the
// standard library, and builds the providers of plugins with grpc-go's
// registry; it needs no other part of gRPC, nor the xDS client.
func TestDeps(t *testing.T) {
	testutils.CheckDepsExcept(t, testutils.ModulePath+"/internal/certprovider", []string{testutils.GRPCCertProvider}, testutils.PureForbidden...)
}
