package matcher_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/matcher"
)

// TestWireBinary: a binary header's value as gRPC clients put it on the
// wire, base64 without padding, for each length modulo 3.
func TestWireBinary(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"\x00", "AA"},
		{"\x00\x01", "AAE"},
		{"\x00\x01\x02", "AAEC"},
		{"\xfb\xff", "+/8"}, // the standard alphabet, not the URL one
	} {
		if got := matcher.WireBinary(tc.in); got != tc.want {
			t.Errorf("WireBinary(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
