package rpcpath_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// logs records what the package logs, for the tests that check a line.
var logs *testutils.Logs

func TestMain(m *testing.M) {
	logs = testutils.InstallLogs(false)
	testutils.VerifyNoLeaks(m)
}
