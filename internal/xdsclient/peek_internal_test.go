package xdsclient

import (
	"testing"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPeekName: the name of every xDS resource type is read from field 1
// without a decode, or from a Resource wrapper; what cannot be read says so.
func TestPeekName(t *testing.T) {
	lis := &listenerpb.Listener{Name: "lis", StatPrefix: "x"}
	twice := mustAny(t, lis)
	twice.Value = protowire.AppendString(protowire.AppendTag(twice.Value, 1, protowire.BytesType), "last")
	tests := []struct {
		desc   string
		in     *anypb.Any
		want   string
		wantOK bool
	}{
		{"Listener", mustAny(t, lis), "lis", true},
		{"RouteConfiguration", mustAny(t, &routepb.RouteConfiguration{Name: "rc"}), "rc", true},
		{"Cluster", mustAny(t, &clusterpb.Cluster{Name: "c"}), "c", true},
		{"ClusterLoadAssignment", mustAny(t, &endpointpb.ClusterLoadAssignment{ClusterName: "e"}), "e", true},
		{"the last name wins, as in a decode", twice, "last", true},
		{"wrapper with a name", mustAny(t, &discoverypb.Resource{Name: "outer", Resource: mustAny(t, lis)}), "outer", true},
		{"wrapper without a name", mustAny(t, &discoverypb.Resource{Resource: mustAny(t, lis)}), "lis", true},
		{"no name", mustAny(t, &listenerpb.Listener{StatPrefix: "x"}), "", false},
		{"malformed", &anypb.Any{TypeUrl: "type.googleapis.com/envoy.config.listener.v3.Listener", Value: []byte{0x0a, 0xff}}, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, ok := peekName(tc.in)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("peekName() = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
