package httpfilter_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/httpfilter"
	internal "github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

type terminal struct{ internal.Router }

type routerThief struct{ internal.Router }

func (routerThief) IsTerminal() bool { return false }

// TestRegisterRejects: a terminal filter, or one claiming the router's
// type, cannot be registered.
func TestRegisterRejects(t *testing.T) {
	for _, f := range []httpfilter.Filter{terminal{}, routerThief{}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%T) did not panic", f)
				}
			}()
			httpfilter.Register(f)
		}()
	}
}
