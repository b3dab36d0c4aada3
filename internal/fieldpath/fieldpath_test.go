package fieldpath_test

import (
	"errors"
	"testing"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestIn: paths join with "." (none before an index), a plain error
// becomes the cause at the prefix, and the cause stays reachable.
func TestIn(t *testing.T) {
	cause := errors.New("bad")
	for _, tc := range []struct {
		desc string
		err  error
		want string
	}{
		{desc: "field", err: fieldpath.In("a", fieldpath.In("b", fieldpath.Errorf("c", "bad"))), want: "a.b.c: bad"},
		{desc: "index", err: fieldpath.In("list", fieldpath.Errorf("[2]", "bad")), want: "list[2]: bad"},
		{desc: "plain", err: fieldpath.In("a", cause), want: "a: bad"},
		{desc: "empty path", err: fieldpath.In("a", &fieldpath.Error{Err: cause}), want: "a: bad"},
		{desc: "empty prefix", err: fieldpath.In("", fieldpath.Errorf("b", "bad")), want: "b: bad"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.desc, got, tc.want)
		}
	}
	if err := fieldpath.In("a", cause); !errors.Is(err, cause) {
		t.Errorf("errors.Is(In(a, cause), cause) = false, want true")
	}
}
