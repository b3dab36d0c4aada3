package grpcservice_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	rlcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/grpcservice"
)

// TestUnsendable: a request over MaxRequestBytes, a string that is not
// UTF-8, and a service's RESOURCE_EXHAUSTED are the RPC's own doing
// (ErrUnsendable); any other failure is not.
func TestUnsendable(t *testing.T) {
	req := func(n int) *rlspb.RateLimitRequest {
		return &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonpb.RateLimitDescriptor{{
			Entries: []*rlcommonpb.RateLimitDescriptor_Entry{{Key: "k", Value: strings.Repeat("v", n)}},
		}}}
	}
	if err := grpcservice.CheckSize(req(grpcservice.MaxRequestBytes - 100)); err != nil {
		t.Errorf("CheckSize just under the bound: %v, want nil", err)
	}
	if err := grpcservice.CheckSize(req(grpcservice.MaxRequestBytes)); !errors.Is(err, grpcservice.ErrUnsendable) {
		t.Errorf("CheckSize over the bound: %v, want an ErrUnsendable", err)
	}
	if err := grpcservice.CheckString("path", "/caf\xe9"); !errors.Is(err, grpcservice.ErrUnsendable) {
		t.Errorf("CheckString of a byte that is no UTF-8: %v, want an ErrUnsendable", err)
	}
	if err := grpcservice.CheckString("path", "/café"); err != nil {
		t.Errorf("CheckString of UTF-8: %v, want nil", err)
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), true},
		{fmt.Errorf("Check: %w", status.Error(codes.ResourceExhausted, "quota")), true},
		{status.Error(codes.Unavailable, "down"), false},
		{status.Error(codes.DeadlineExceeded, "slow"), false},
		{nil, false},
	} {
		if got := grpcservice.RequestRefused(tc.err); (got != nil) != tc.want || got != nil && !errors.Is(got, grpcservice.ErrUnsendable) {
			t.Errorf("RequestRefused(%v) = %v, want an ErrUnsendable: %v", tc.err, got, tc.want)
		}
	}
}
