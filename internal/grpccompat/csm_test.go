package grpccompat_test

import (
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/proxyless-grpc/xds/internal/grpccompat"
)

// TestCSMAnswers: only the CSM plugin's wrappers (of its package) with a
// header to add are taken for its answer; a look-alike of another package
// is not.
func TestCSMAnswers(t *testing.T) {
	type attachLabelsStream struct{ metadataExchangeLabels metadata.MD }
	for _, x := range []any{nil, 3, &attachLabelsStream{metadataExchangeLabels: metadata.Pairs("a", "b")}} {
		if grpccompat.CSMAnswers(x) {
			t.Errorf("CSMAnswers(%T) = true", x)
		}
	}
}
