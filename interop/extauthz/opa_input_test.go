package extauthz

// OPA's side on its own: CheckRequests shaped as gRFC A92 shapes them, sent
// by a plain grpc-go client to the in-process OPA. They pin what OPA's input
// holds for such a request (where the headers are and how their values are
// encoded), which the policy depends on, and the policy's decisions.

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// a92Request returns a CheckRequest as gRFC A92 builds one for a gRPC call of
// path with headers: addresses as socket addresses with separate ports,
// request.http with method POST, path, protocol HTTP/2, size -1, and the
// headers only in header_map, each value in raw_value (never the headers map,
// never value).
func a92Request(path string, headers map[string]string) *authpb.CheckRequest {
	hm := &corepb.HeaderMap{}
	for k, v := range headers {
		hm.Headers = append(hm.Headers, &corepb.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	sock := func(ip string, port uint32) *corepb.Address {
		return &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
			Address: ip, PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: port},
		}}}
	}
	return &authpb.CheckRequest{Attributes: &authpb.AttributeContext{
		Source:      &authpb.AttributeContext_Peer{Address: sock("127.0.0.1", 50001)},
		Destination: &authpb.AttributeContext_Peer{Address: sock("127.0.0.1", 50002)},
		Request: &authpb.AttributeContext_Request{Http: &authpb.AttributeContext_HttpRequest{
			Method:    "POST",
			Path:      path,
			Protocol:  "HTTP/2",
			Size:      -1,
			HeaderMap: hm,
		}},
	}}
}

// checkClient dials o with a plain grpc-go client.
func checkClient(t *testing.T, o *opaServer) authpb.AuthorizationClient {
	t.Helper()
	cc, err := grpc.NewClient(o.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%q): %v", o.Addr, err)
	}
	t.Cleanup(func() { cc.Close() })
	return authpb.NewAuthorizationClient(cc)
}

func shortContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestOPAInputShape pins where OPA puts an A92 request's parts in input:
// protobuf JSON names (headerMap, rawValue, portValue), and raw_value's
// bytes as base64 text, which is why policy.rego decodes them.
func TestOPAInputShape(t *testing.T) {
	ctx := shortContext(t)
	client := checkClient(t, startOPA(t, pathEcho))

	resp, err := client.Check(ctx, a92Request("/grpc.testing.TestService/UnaryCall", map[string]string{
		"x-user":       "alice",
		"content-type": "application/grpc",
		"x-trace-bin":  base64.StdEncoding.EncodeToString([]byte{0, 1, 0xfe}), // A92: a -bin value is sent base64-encoded
	}))
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if got := codes.Code(resp.GetStatus().GetCode()); got != codes.OK {
		t.Fatalf("Check's status = %v, want OK (the echo decision allows)", got)
	}
	inputValue := resp.GetDynamicMetadata().GetFields()["input"]
	if inputValue == nil {
		t.Fatalf("the echo decision's dynamic_metadata has no input: %v", resp.GetDynamicMetadata())
	}
	input := inputValue.GetStructValue().AsMap()
	t.Logf("OPA's input for an A92 CheckRequest: %v", inputValue)

	get := func(path ...string) any {
		var v any = input
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[p]
		}
		return v
	}
	http := []string{"attributes", "request", "http"}
	at := func(rest ...string) []string { return append(append([]string{}, http...), rest...) }

	for _, c := range []struct {
		path []string
		want any
	}{
		{at("method"), "POST"},
		{at("path"), "/grpc.testing.TestService/UnaryCall"},
		{at("protocol"), "HTTP/2"},
		// protomap keeps int64 as an integer; through JSON and Struct it is a float64.
		{at("size"), float64(-1)},
		{[]string{"attributes", "source", "address", "socketAddress", "address"}, "127.0.0.1"},
		{[]string{"attributes", "source", "address", "socketAddress", "portValue"}, float64(50001)},
		{[]string{"parsed_path"}, []any{"grpc.testing.TestService", "UnaryCall"}},
	} {
		if got := get(c.path...); !equalJSON(got, c.want) {
			t.Errorf("input.%s = %#v, want %#v", dotted(c.path), got, c.want)
		}
	}
	// A92 sends no headers map: the plugin's input has none.
	if got := get(at("headers")...); got != nil {
		t.Errorf("input.%s = %#v, want nothing (A92 sends header_map only)", dotted(at("headers")), got)
	}

	list, ok := get(at("headerMap", "headers")...).([]any)
	if !ok {
		t.Fatalf("input.%s is %T, want a list", dotted(at("headerMap", "headers")), get(at("headerMap", "headers")...))
	}
	got := map[string]string{}
	for _, e := range list {
		h, _ := e.(map[string]any)
		key, _ := h["key"].(string)
		if _, has := h["value"]; has {
			t.Errorf("header %q has a value field; A92 sets raw_value only", key)
		}
		raw, ok := h["rawValue"].(string)
		if !ok {
			t.Errorf("header %q: rawValue is %T (%v), want a base64 string", key, h["rawValue"], h["rawValue"])
			continue
		}
		dec, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			t.Errorf("header %q: rawValue %q is not standard base64: %v", key, raw, err)
			continue
		}
		got[key] = string(dec)
	}
	want := map[string]string{
		"x-user":       "alice",
		"content-type": "application/grpc",
		"x-trace-bin":  "AAH+",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %q decoded from rawValue = %q, want %q", k, got[k], v)
		}
	}
}

// TestOPAPolicyDecisions sends A92-shaped CheckRequests to OPA running
// policy.rego and checks the CheckResponses the ext_authz filter will act on.
func TestOPAPolicyDecisions(t *testing.T) {
	ctx := shortContext(t)
	client := checkClient(t, startOPA(t, pathResult))

	type want struct {
		code       codes.Code
		httpStatus typepb.StatusCode // denials only
		headers    map[string]string // ok_response.headers or denied_response.headers
		body       string            // denials only
	}
	for _, c := range []struct {
		name    string
		path    string
		headers map[string]string
		want    want
	}{{
		name:    "allowed path, header added for the handler",
		path:    "/grpc.testing.TestService/UnaryCall",
		headers: map[string]string{"x-user": "alice"},
		want:    want{code: codes.OK, headers: map[string]string{"x-opa-user": "alice", "x-opa-path": "/grpc.testing.TestService/UnaryCall"}},
	}, {
		name: "allowed path, no x-user",
		path: "/grpc.testing.TestService/UnaryCall",
		want: want{code: codes.OK, headers: map[string]string{"x-opa-user": "anonymous"}},
	}, {
		name:    "path not listed",
		path:    "/grpc.testing.TestService/EmptyCall",
		headers: map[string]string{"x-user": "alice"},
		want:    want{code: codes.PermissionDenied, httpStatus: typepb.StatusCode_Forbidden, headers: map[string]string{"x-ext-authz-reason": "path"}, body: "opa: path not allowed"},
	}, {
		name:    "banned user on an allowed path",
		path:    "/grpc.testing.TestService/UnaryCall",
		headers: map[string]string{"x-user": "mallory"},
		want:    want{code: codes.PermissionDenied, httpStatus: typepb.StatusCode_Unauthorized, headers: map[string]string{"x-ext-authz-reason": "banned-user"}, body: "opa: user mallory is banned"},
	}, {
		name:    "quota exhausted",
		path:    "/grpc.testing.TestService/UnaryCall",
		headers: map[string]string{"x-user": "alice", "x-quota": "exhausted"},
		want:    want{code: codes.PermissionDenied, httpStatus: typepb.StatusCode_TooManyRequests, headers: map[string]string{"x-ext-authz-reason": "quota", "retry-after": "1"}, body: "opa: quota exhausted"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := client.Check(ctx, a92Request(c.path, c.headers))
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if got := codes.Code(resp.GetStatus().GetCode()); got != c.want.code {
				t.Errorf("status.code = %v, want %v", got, c.want.code)
			}
			// The plugin puts its text in denied_response.body; it sends no
			// status.message, so a denied RPC's message has none of it.
			if msg := resp.GetStatus().GetMessage(); msg != "" {
				t.Errorf("status.message = %q, want none", msg)
			}
			var hdrs []*corepb.HeaderValueOption
			if c.want.code == codes.OK {
				ok := resp.GetOkResponse()
				if ok == nil {
					t.Fatalf("no ok_response: %v", resp)
				}
				hdrs = ok.GetHeaders()
			} else {
				d := resp.GetDeniedResponse()
				if d == nil {
					t.Fatalf("no denied_response: %v", resp)
				}
				if got := d.GetStatus().GetCode(); got != c.want.httpStatus {
					t.Errorf("denied_response.status = %v, want %v", got, c.want.httpStatus)
				}
				if got := d.GetBody(); got != c.want.body {
					t.Errorf("denied_response.body = %q, want %q", got, c.want.body)
				}
				hdrs = d.GetHeaders()
			}
			got := map[string]string{}
			for _, h := range hdrs {
				// The plugin sets value, not raw_value.
				if len(h.GetHeader().GetRawValue()) != 0 {
					t.Errorf("header %q has raw_value %q; the plugin was seen to set value only", h.GetHeader().GetKey(), h.GetHeader().GetRawValue())
				}
				got[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
			}
			for k, v := range c.want.headers {
				if got[k] != v {
					t.Errorf("header %q = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

func dotted(path []string) string {
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += p
	}
	return s
}

// equalJSON compares values decoded from JSON or a Struct.
func equalJSON(a, b any) bool {
	av, err1 := structpb.NewValue(a)
	bv, err2 := structpb.NewValue(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return proto.Equal(av, bv)
}
