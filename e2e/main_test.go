package e2e_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// logs records what the servers of every test log (warnings and errors).
// It is installed once, before any test runs: grpclog's logger cannot be
// swapped safely while gRPC's goroutines (which can outlive a test) log.
var logs *testutils.Logs

func TestMain(m *testing.M) {
	logs = testutils.InstallLogs(false)
	testutils.VerifyNoLeaks(m)
}
