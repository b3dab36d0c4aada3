package security

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

var logs *testutils.Logs

func TestMain(m *testing.M) {
	logs = testutils.InstallLogs(true)
	testutils.VerifyNoLeaks(m)
}
