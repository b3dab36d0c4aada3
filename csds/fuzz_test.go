package csds_test

import (
	"context"
	"testing"

	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds/csds"
)

// FuzzFetchClientStatus: any request decodes to either INVALID_ARGUMENT
// (exactly when it has node_matchers, gRFC A40) or a response; nothing
// panics.
func FuzzFetchClientStatus(f *testing.F) {
	for _, r := range []*csdspb.ClientStatusRequest{
		{},
		{NodeMatchers: []*matcherpb.NodeMatcher{{}}},
		{ExcludeResourceContents: true},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s, err := csds.NewClientStatusDiscoveryServer()
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &csdspb.ClientStatusRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		resp, err := s.FetchClientStatus(context.Background(), req)
		if len(req.GetNodeMatchers()) > 0 {
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("request with node_matchers: error %v, want INVALID_ARGUMENT", err)
			}
			return
		}
		if err != nil || resp == nil {
			t.Errorf("FetchClientStatus = %v, %v; want a response", resp, err)
		}
	})
}
