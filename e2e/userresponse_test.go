package e2e_test

import (
	"context"
	"errors"
	"net"
	"testing"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/httpfilter"
)

// stampURL is the config type of stamp, a filter registered through the
// public httpfilter API that acts on responses: its calls add a response
// header and a trailer, and rewrite each response's payload to its
// config's "payload".
const stampURL = "type.googleapis.com/xds_test.Stamp"

func init() { httpfilter.Register(stamp{}) }

type stamp struct{}

func (stamp) ConfigTypeURLs() []string   { return []string{stampURL} }
func (stamp) OverrideTypeURLs() []string { return nil }
func (stamp) Needs() httpfilter.Needs {
	return httpfilter.Needs{After: true, Events: httpfilter.ServerHeaders | httpfilter.ServerMessages | httpfilter.ServerTrailers}
}
func (stamp) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	p := raw.Struct().GetFields()["payload"].GetStringValue()
	if p == "" {
		return nil, errors.New("payload: empty")
	}
	return p, nil
}
func (stamp) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("no overrides")
}
func (stamp) BuildStep(_ string, cfg, _ httpfilter.Config) (httpfilter.Step, error) {
	return stampStep(cfg.(string)), nil
}

type stampStep string

func (s stampStep) Run(ctx context.Context, _ httpfilter.RPC) (context.Context, httpfilter.After, error) {
	return ctx, &stampCall{payload: string(s)}, nil
}

type stampCall struct{ payload string }

func (*stampCall) RunAfter(ctx context.Context) (context.Context, error) { return ctx, nil }
func (*stampCall) Events() httpfilter.Events {
	return httpfilter.ServerHeaders | httpfilter.ServerMessages | httpfilter.ServerTrailers
}
func (*stampCall) End(error) {}
func (*stampCall) SendHeader(_ context.Context, h map[string][]string, _ bool) error {
	h["x-stamp"] = []string{"header"}
	return nil
}
func (c *stampCall) SendMessage(_ context.Context, b []byte, send func([]byte) error) error {
	m := &testpb.SimpleResponse{}
	if err := proto.Unmarshal(b, m); err != nil {
		return err
	}
	m.Payload = &testpb.Payload{Body: []byte(c.payload)}
	out, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return send(out)
}
func (*stampCall) SendTrailer(_ context.Context, rpcErr error, t map[string][]string, _ func([]byte) error) error {
	t["x-stamp"] = []string{"trailer"}
	return rpcErr
}

// TestUserFilterResponse: a filter registered with httpfilter.Register acts
// on responses through the public API (httpfilter.Call): the client gets
// the headers, trailers and message its call left.
func TestUserFilterResponse(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	s, err := structpb.NewStruct(map[string]any{"payload": "stamped"})
	if err != nil {
		t.Fatal(err)
	}
	f := &hcmpb.HttpFilter{Name: "stamp", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, &xdstypepb.TypedStruct{TypeUrl: stampURL, Value: s})}}
	_, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return filtersListener(a, []*hcmpb.HttpFilter{f}, allRoutes("r"), "")
	}, nil)
	c := connected(ctx, t, addr)
	var hdr, trl metadata.MD
	resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("original")}}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.GetPayload().GetBody()); got != "stamped" {
		t.Errorf("payload %q, want the filter's %q", got, "stamped")
	}
	if len(hdr.Get("x-stamp")) != 1 || hdr.Get("x-stamp")[0] != "header" || len(trl.Get("x-stamp")) != 1 || trl.Get("x-stamp")[0] != "trailer" {
		t.Errorf("headers %v trailers %v, want the filter's x-stamp in both", hdr, trl)
	}
}
