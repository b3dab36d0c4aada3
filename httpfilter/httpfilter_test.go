package httpfilter_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/httpfilter"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// routerThief claims the router's config type.
type routerThief struct{}

func (routerThief) ConfigTypeURLs() []string {
	return []string{"type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}
}
func (routerThief) OverrideTypeURLs() []string { return nil }
func (routerThief) ParseConfig(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, nil
}
func (routerThief) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, nil
}
func (routerThief) BuildStep(string, httpfilter.Config, httpfilter.Config) (httpfilter.Step, error) {
	return nil, nil
}

// TestRegisterRejects: a filter claiming the router's type cannot be
// registered. (A terminal filter cannot even be written: Filter has no
// IsTerminal, and the server treats every registered filter as
// non-terminal.)
func TestRegisterRejects(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("Register(routerThief) did not panic")
		}
	}()
	httpfilter.Register(routerThief{})
}
