package extauthz

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestMain checks for leaked goroutines with the library's own leak check,
// with no exception for OPA: stopping the plugin manager stops the plugin's
// gRPC server and its listening goroutine. (The plugin's inter-query cache
// would start an eviction goroutine that never ends, on context.Background,
// if OPA's configuration set
// caching.inter_query_builtin_cache.stale_entry_eviction_period_seconds; the
// default, 0, starts none, and the tests keep it.)
func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }
