package handoff_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/httpfilter/handoff"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestFilters: the latest filter added comes first.
func TestFilters(t *testing.T) {
	handoff.Add("a")
	handoff.Add("b")
	if got := handoff.Filters(); len(got) != 2 || got[0] != "b" || got[1] != "a" {
		t.Errorf("Filters() = %v, want [b a]", got)
	}
}
