package istio

import (
	"fmt"
	"os"
	"testing"

	istiolog "istio.io/istio/pkg/log"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) {
	// istiod logs each push at info level; keep its warnings and errors
	// (a workload without a service target, a rejected config, a NACK).
	o := istiolog.DefaultOptions()
	o.SetDefaultOutputLevel(istiolog.OverrideScopeName, istiolog.WarnLevel)
	if err := istiolog.Configure(o); err != nil {
		fmt.Fprintf(os.Stderr, "configuring istio's logs: %v\n", err)
		os.Exit(2)
	}
	// The library's leak check: istiod's fake discovery server stops every
	// goroutine it starts when its test ends, so it needs no exception.
	testutils.VerifyNoLeaks(m)
}
