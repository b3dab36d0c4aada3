package typedconfig_test

import (
	"encoding/json"
	"strings"
	"testing"

	udpatypepb "github.com/cncf/xds/go/udpa/type/v1"
	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

const rbacURL = "type.googleapis.com/envoy.config.rbac.v3.RBAC"

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestName(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{rbacURL, "envoy.config.rbac.v3.RBAC"},
		{"example.com/a/b/pkg.Msg", "pkg.Msg"},
		{"pkg.Msg", "pkg.Msg"},
		{"", ""},
		{"trailing/", ""},
	} {
		if got := typedconfig.Name(tc.url); got != tc.want {
			t.Errorf("Name(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

func TestIs(t *testing.T) {
	for _, tc := range []struct {
		url, name string
		want      bool
	}{
		{rbacURL, "envoy.config.rbac.v3.RBAC", true},
		{"envoy.config.rbac.v3.RBAC", "envoy.config.rbac.v3.RBAC", true},
		{"type.googleapis.com/xenvoy.config.rbac.v3.RBAC", "envoy.config.rbac.v3.RBAC", false},
		{rbacURL, "v3.RBAC", false},
		{"", "x", false},
	} {
		if got := typedconfig.Is(tc.url, tc.name); got != tc.want {
			t.Errorf("Is(%q, %q) = %v, want %v", tc.url, tc.name, got, tc.want)
		}
	}
}

// TestUnwrap: a plain Any is returned as is; both TypedStruct versions are
// looked through, an absent value becoming an empty Struct; a malformed one
// is an error naming its type.
func TestUnwrap(t *testing.T) {
	plain := mustAny(t, &rbacpb.RBAC{Action: rbacpb.RBAC_DENY})
	c, err := typedconfig.Unwrap(plain)
	if err != nil || c.TypeURL != rbacURL || c.Any != plain || c.Struct != nil {
		t.Errorf("Unwrap(plain) = %+v, %v; want the Any itself", c, err)
	}
	value, _ := structpb.NewStruct(map[string]any{"action": "DENY"})
	for _, ts := range []proto.Message{
		&udpatypepb.TypedStruct{TypeUrl: rbacURL, Value: value},
		&xdstypepb.TypedStruct{TypeUrl: rbacURL, Value: value},
	} {
		c, err := typedconfig.Unwrap(mustAny(t, ts))
		if err != nil || c.TypeURL != rbacURL || c.Any != nil || !proto.Equal(c.Struct, value) {
			t.Errorf("Unwrap(%T) = %+v, %v; want the RBAC type and the value", ts, c, err)
		}
		got := &rbacpb.RBAC{}
		if err := c.UnmarshalTo(got); err != nil || got.GetAction() != rbacpb.RBAC_DENY {
			t.Errorf("UnmarshalTo from %T = %v, %v; want action DENY", ts, got, err)
		}
	}
	c, err = typedconfig.Unwrap(mustAny(t, &xdstypepb.TypedStruct{TypeUrl: rbacURL}))
	if err != nil || c.Struct == nil {
		t.Errorf("Unwrap(TypedStruct without value) = %+v, %v; want an empty Struct", c, err)
	}
	bad := &anypb.Any{TypeUrl: "type.googleapis.com/" + typedconfig.TypedStructV1, Value: []byte{0xff}}
	if _, err := typedconfig.Unwrap(bad); err == nil || !strings.Contains(err.Error(), typedconfig.TypedStructV1) {
		t.Errorf("Unwrap(malformed) error = %v, want one naming %s", err, typedconfig.TypedStructV1)
	}
}

func TestUnmarshalToChecksType(t *testing.T) {
	c := typedconfig.Config{TypeURL: rbacURL, Any: mustAny(t, &rbacpb.RBAC{})}
	if err := c.UnmarshalTo(&wrapperspb.StringValue{}); err == nil || !strings.Contains(err.Error(), "want") {
		t.Errorf("UnmarshalTo(wrong type) error = %v, want a type mismatch", err)
	}
	if err := (typedconfig.Config{TypeURL: rbacURL}).UnmarshalTo(&rbacpb.RBAC{}); err == nil {
		t.Error("UnmarshalTo of an empty config succeeded, want an error")
	}
}

func TestJSON(t *testing.T) {
	for _, tc := range []struct {
		desc string
		in   proto.Message
		want map[string]any
	}{
		{"known message", &rbacpb.RBAC{Action: rbacpb.RBAC_DENY}, map[string]any{"action": "DENY"}},
		{"TypedStruct", &xdstypepb.TypedStruct{TypeUrl: "example.com/my.Logger", Value: &structpb.Struct{Fields: map[string]*structpb.Value{"n": structpb.NewNumberValue(1)}}}, map[string]any{"n": 1.0}},
		{"empty TypedStruct", &xdstypepb.TypedStruct{TypeUrl: "example.com/my.Logger"}, map[string]any{}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			c, err := typedconfig.Unwrap(mustAny(t, tc.in))
			if err != nil {
				t.Fatal(err)
			}
			js, err := c.JSON()
			if err != nil {
				t.Fatalf("JSON() error = %v", err)
			}
			var got map[string]any
			if err := json.Unmarshal(js, &got); err != nil {
				t.Fatalf("JSON() = %s, not an object: %v", js, err)
			}
			if gb, wb := mustJSON(t, got), mustJSON(t, tc.want); gb != wb {
				t.Errorf("JSON() = %s, want %s", gb, wb)
			}
		})
	}
	unknown := typedconfig.Config{TypeURL: "type.googleapis.com/not.Linked", Any: &anypb.Any{TypeUrl: "type.googleapis.com/not.Linked"}}
	if js, err := unknown.JSON(); err != nil || string(js) != "{}" {
		t.Errorf("JSON() of an unknown type = %s, %v; want {}", js, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
