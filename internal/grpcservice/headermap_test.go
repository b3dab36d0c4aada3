package grpcservice_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/internal/grpcservice"
)

// TestHeaderMapValue: a header_map value is the header's own, except a
// binary header's, which is base64 with padding (gRFC A102), and so
// decodes with a strict decoder.
func TestHeaderMapValue(t *testing.T) {
	for _, tc := range []struct{ key, v, want string }{
		{"x-user", "alice", "alice"},
		{"x-blob-bin", "\x00\x01", "AAE="},
		{"x-blob-bin", "\x00", "AA=="},
		{"x-blob-bin", "\x00\x01\x02", "AAEC"},
		{"x-binary", "not binary", "not binary"},
	} {
		got := string(grpcservice.HeaderMapValue(tc.key, tc.v))
		if got != tc.want {
			t.Errorf("HeaderMapValue(%q, %q) = %q, want %q", tc.key, tc.v, got, tc.want)
		}
		if strings.HasSuffix(tc.key, "-bin") {
			if dec, err := base64.StdEncoding.DecodeString(got); err != nil || string(dec) != tc.v {
				t.Errorf("strict decoding of %q = %q, %v; want %q", got, dec, err, tc.v)
			}
		}
	}
}
