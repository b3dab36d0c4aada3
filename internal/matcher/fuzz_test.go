package matcher_test

import (
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds/internal/matcher"
)

// FuzzHeaderMatcher checks that any HeaderMatcher either fails to compile or
// matches without panicking.
func FuzzHeaderMatcher(f *testing.F) {
	for _, m := range []*routepb.HeaderMatcher{
		hExact("k", "v"), hRange("k", 1, 5), hPresent("k-bin", true),
		hString("k", regex("a.*")), hString("k", contains("B", true)),
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "v")
	}
	f.Fuzz(func(t *testing.T, b []byte, v string) {
		pb := &routepb.HeaderMatcher{}
		if err := proto.Unmarshal(b, pb); err != nil {
			return
		}
		m, err := matcher.NewHeaderMatcher(pb)
		if err != nil {
			return
		}
		m.Match(md{m.Name(): {v}})
		m.Match(md{m.Name(): {v, v}})
		m.Match(md{})
	})
}
