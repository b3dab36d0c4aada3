package rbacfilter

import (
	"context"
	"net/netip"
	"testing"

	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// FuzzParse: any bytes given as the filter's top-level config and as a
// per-route override are either rejected (NACK) or give a step whose
// refusals are PERMISSION_DENIED and never panic.
func FuzzParse(f *testing.F) {
	for _, m := range []proto.Message{
		&rbacpb.RBAC{},
		&rbacpb.RBAC{Rules: &rbacconfigpb.RBAC{Action: rbacconfigpb.RBAC_DENY}},
		&rbacpb.RBAC{Rules: &rbacconfigpb.RBAC{Policies: map[string]*rbacconfigpb.Policy{"any": {
			Permissions: []*rbacconfigpb.Permission{{Rule: &rbacconfigpb.Permission_Any{Any: true}}},
			Principals:  []*rbacconfigpb.Principal{{Identifier: &rbacconfigpb.Principal_Any{Any: true}}},
		}}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b)
	}
	rpc := httpfilter.RPC{Request: httpfilter.Request{
		FullMethod: "/pkg.Svc/M",
		Authority:  "svc",
		Remote:     netip.MustParseAddrPort("127.0.0.2:1"),
		Local:      netip.MustParseAddrPort("127.0.0.1:2"),
	}}
	f.Fuzz(func(t *testing.T, top, override []byte) {
		cfg, err := Filter{}.ParseConfig(httpfilter.RawConfig{TypeURL: ConfigTypeURL, Any: &anypb.Any{TypeUrl: ConfigTypeURL, Value: top}})
		if err != nil {
			return
		}
		ov, err := Filter{}.ParseOverride(httpfilter.RawConfig{TypeURL: OverrideTypeURL, Any: &anypb.Any{TypeUrl: OverrideTypeURL, Value: override}})
		if err != nil {
			ov = nil
		}
		for _, o := range []httpfilter.Config{nil, ov} {
			step, err := Filter{}.BuildStep("rbac", cfg, o)
			if err != nil || step == nil {
				continue
			}
			if _, _, err := step.Run(context.Background(), rpc); err != nil && status.Code(err) != codes.PermissionDenied {
				t.Errorf("RBAC step refused an RPC with %v, want PERMISSION_DENIED", err)
			}
		}
	})
}
