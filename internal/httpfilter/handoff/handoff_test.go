package handoff_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/httpfilter/handoff"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestFilters: the latest filter added comes first. The list is
// process-wide, so the test adds values of its own run and looks at the
// front, which go test -count=N keeps true.
func TestFilters(t *testing.T) {
	a, b := new(int), new(int)
	handoff.Add(a)
	handoff.Add(b)
	if got := handoff.Filters(); len(got) < 2 || got[0] != b || got[1] != a {
		t.Errorf("Filters() = %v, want %p then %p first", got, b, a)
	}
}
