package extauthz

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestMain checks for leaked goroutines with the library's own leak check.
// OPA's plugin manager, its Envoy plugin and its inter-query cache stop every
// goroutine they start when the manager is stopped, so OPA needs no exception.
func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }
