package xdsclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcbootstrap "google.golang.org/grpc/xds/bootstrap"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// countingCreds are channel credentials registered with grpc-go's registry:
// an insecure bundle, refused when the config has a member "fail", counting
// builds and cleanups.
type countingCreds struct {
	name     string
	builds   atomic.Int32
	cleanups atomic.Int32
}

func (c *countingCreds) Name() string { return c.name }

func (c *countingCreds) Build(config json.RawMessage) (credentials.Bundle, func(), error) {
	var cfg map[string]any
	if len(config) > 0 {
		if err := json.Unmarshal(config, &cfg); err != nil {
			return nil, nil, err
		}
	}
	if _, ok := cfg["fail"]; ok {
		return nil, nil, errors.New("config asks to fail")
	}
	c.builds.Add(1)
	return insecure.NewBundle(), func() { c.cleanups.Add(1) }, nil
}

// counts returns the builds and cleanups so far.
func (c *countingCreds) counts() (builds, cleanups int32) { return c.builds.Load(), c.cleanups.Load() }

// countingCallCreds are call credentials registered with grpc-go's
// registry: a header on every stream, counting builds, cleanups and
// streams.
type countingCallCreds struct {
	builds, cleanups, streams atomic.Int32
}

func (c *countingCallCreds) Name() string { return "xdsclient-test-call" }

func (c *countingCallCreds) Build(json.RawMessage) (credentials.PerRPCCredentials, func(), error) {
	c.builds.Add(1)
	return c, func() { c.cleanups.Add(1) }, nil
}

func (c *countingCallCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	c.streams.Add(1)
	return map[string]string{"x-test-call-creds": "1"}, nil
}

func (c *countingCallCreds) RequireTransportSecurity() bool { return false }

// The registry is a plain map: register before any test runs.
var (
	dialCreds  = &countingCreds{name: "xdsclient-test-dial"}
	shareCreds = &countingCreds{name: "xdsclient-test-share"}
	callCreds  = &countingCallCreds{}
)

func init() {
	grpcbootstrap.RegisterChannelCredentials(dialCreds)
	grpcbootstrap.RegisterChannelCredentials(shareCreds)
	grpcbootstrap.RegisterCallCredentials(callCreds)
}

// parseWithRegistry parses js with the options a server uses.
func parseWithRegistry(t *testing.T, js string) *bootstrap.Config {
	t.Helper()
	cfg, err := bootstrap.ParseWith([]byte(js), xdsclient.BootstrapOptions())
	if err != nil {
		t.Fatalf("bootstrap.ParseWith: %v", err)
	}
	return cfg
}

// A type registered with grpc-go and listed first is the one used: the
// channel dials with its bundle, and its cleanup runs when the client
// closes. Parsing builds it once to check the config and releases it.
func TestRegisteredChannelCreds(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})

	b0, c0 := dialCreds.counts()
	cfg := parseWithRegistry(t, fmt.Sprintf(`{"xds_servers": [{"server_uri": %q,
		"channel_creds": [{"type": %q, "config": {"k": "v"}}, {"type": "tls"}]}], "node": {"id": "n"}}`, ms.Address, dialCreds.name))
	if got := cfg.XDSServers[0].ChannelCreds.Type; got != dialCreds.name {
		t.Fatalf("selected channel creds %q, want %q", got, dialCreds.name)
	}
	if b, c := dialCreds.counts(); b-b0 != 1 || c-c0 != 1 {
		t.Errorf("after parsing: %d builds, %d cleanups; want 1 and 1 (a check, released at once)", b-b0, c-c0)
	}

	c, err := xdsclient.New(cfg, xdsclient.Options{Backoff: fastBackoff, ResourceTypes: []*xdsclient.ResourceType{listenerType}})
	if err != nil {
		t.Fatalf("xdsclient.New: %v", err)
	}
	w := newTestWatcher()
	cancel := c.WatchResource(listenerType, "lis", w)
	w.wantData(ctx, t, l)
	if b, c := dialCreds.counts(); b-b0 != 2 || c-c0 != 1 {
		t.Errorf("while connected: %d builds, %d cleanups; want 2 and 1", b-b0, c-c0)
	}
	cancel()
	c.Close()
	if b, c := dialCreds.counts(); b-b0 != 2 || c-c0 != 2 {
		t.Errorf("after Close: %d builds, %d cleanups; want 2 and 2", b-b0, c-c0)
	}
}

// A registered type whose builder refuses the config fails parsing, naming
// the entry and the type; an unknown type is skipped as gRFC A27 says.
func TestRegisteredChannelCreds_BadConfig(t *testing.T) {
	b0, c0 := dialCreds.counts()
	_, err := bootstrap.ParseWith([]byte(fmt.Sprintf(`{"xds_servers": [{"server_uri": "localhost:1",
		"channel_creds": [{"type": "no-such-creds"}, {"type": %q, "config": {"fail": 1}}, {"type": "insecure"}]}]}`, dialCreds.name)),
		xdsclient.BootstrapOptions())
	var e *bootstrap.Error
	if !errors.As(err, &e) || e.Field != "xds_servers[0].channel_creds[1]" || !errors.Is(err, bootstrap.ErrInvalidValue) {
		t.Fatalf("ParseWith() error = %v; want an *Error at xds_servers[0].channel_creds[1] wrapping ErrInvalidValue", err)
	}
	const want = `bootstrap: xds_servers[0].channel_creds[1]: invalid value: "xdsclient-test-dial" channel credentials: config asks to fail`
	if err.Error() != want {
		t.Errorf("ParseWith() error = %s\nwant %s", err, want)
	}
	if b, c := dialCreds.counts(); b != b0 || c != c0 {
		t.Errorf("a refused config left %d builds and %d cleanups, want none", b-b0, c-c0)
	}
}

// Authorities whose servers have the same URI and the same registered
// credentials (config spelled differently) share one channel; another
// config makes another channel (gRFC A47).
func TestRegisteredChannelCreds_ChannelSharing(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	server := func(config string) string {
		return fmt.Sprintf(`[{"server_uri": %q, "channel_creds": [{"type": %q, "config": %s}]}]`, ms.Address, shareCreds.name, config)
	}
	cfg := parseWithRegistry(t, fmt.Sprintf(`{"xds_servers": %s, "node": {"id": "n"}, "authorities": {
		"a": {"xds_servers": %s}, "b": {"xds_servers": %s}, "c": {"xds_servers": %s}}}`,
		server(`{"x": 1, "y": 2}`), server(`{"x": 1, "y": 2}`), server(`{ "y": 2, "x": 1 }`), server(`{"x": 3}`)))
	names := map[string]string{
		"a": "xdstp://a/envoy.config.listener.v3.Listener/l",
		"b": "xdstp://b/envoy.config.listener.v3.Listener/l",
		"c": "xdstp://c/envoy.config.listener.v3.Listener/l",
	}
	var ls []*listenerpb.Listener
	for i, n := range []string{names["a"], names["b"], names["c"]} {
		ls = append(ls, testListener(n, uint32(i+1)))
	}
	update(ctx, t, ms, e2e.Resources{Listeners: ls})

	b0, _ := shareCreds.counts()
	c, err := xdsclient.New(cfg, xdsclient.Options{Backoff: fastBackoff, ResourceTypes: []*xdsclient.ResourceType{listenerType}})
	if err != nil {
		t.Fatalf("xdsclient.New: %v", err)
	}
	defer c.Close()
	for i, l := range ls {
		w := newTestWatcher()
		defer c.WatchResource(listenerType, l.GetName(), w)()
		w.wantData(ctx, t, ls[i])
	}
	if b, _ := shareCreds.counts(); b-b0 != 2 {
		t.Errorf("%d channels built, want 2 (a and b share one, c has its own)", b-b0)
	}
}

// google_default credentials build and dial as grpc-go's do; here against a
// closed loopback port, so the watch sees connection errors and nothing
// leaks when the client closes.
func TestGoogleDefaultChannelCreds(t *testing.T) {
	closed := closedLoopbackAddr(t)
	// Google's default-credentials lookup would otherwise read the user's
	// credentials or probe the GCE metadata server: point both at nothing.
	t.Setenv("GCE_METADATA_HOST", closedLoopbackAddr(t))
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))

	ctx := testContext(t)
	cfg := parseWithRegistry(t, fmt.Sprintf(`{"xds_servers": [{"server_uri": %q,
		"channel_creds": [{"type": "google_default"}]}], "node": {"id": "n"}}`, closed))
	c, err := xdsclient.New(cfg, xdsclient.Options{Backoff: fastBackoff, ResourceTypes: []*xdsclient.ResourceType{listenerType}})
	if err != nil {
		t.Fatalf("xdsclient.New: %v", err)
	}
	defer c.Close()
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	select {
	case <-w.connErrs:
	case <-ctx.Done():
		t.Fatal("no connection error from a closed port")
	}
}

// closedLoopbackAddr returns a loopback address that nothing listens on.
func closedLoopbackAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// Call credentials registered with grpc-go apply on every stream next to
// the channel credentials, unknown ones are ignored (gRFC A97), and their
// cleanup runs when the client closes.
func TestRegisteredCallCreds(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})

	b0, c0, s0 := callCreds.builds.Load(), callCreds.cleanups.Load(), callCreds.streams.Load()
	cfg := parseWithRegistry(t, fmt.Sprintf(`{"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}],
		"call_creds": [{"type": "no-such-call-creds"}, {"type": %q}]}], "node": {"id": "n"}}`, ms.Address, callCreds.Name()))
	c, err := xdsclient.New(cfg, xdsclient.Options{Backoff: fastBackoff, ResourceTypes: []*xdsclient.ResourceType{listenerType}})
	if err != nil {
		t.Fatalf("xdsclient.New: %v", err)
	}
	w := newTestWatcher()
	cancel := c.WatchResource(listenerType, "lis", w)
	w.wantData(ctx, t, l)
	if n := callCreds.streams.Load() - s0; n < 1 {
		t.Errorf("the registered call credentials were asked for metadata %d times, want at least once", n)
	}
	cancel()
	c.Close()
	if b, c := callCreds.builds.Load()-b0, callCreds.cleanups.Load()-c0; b != 2 || c != 2 {
		t.Errorf("after Close: %d builds, %d cleanups; want 2 and 2 (a check while parsing, the channel)", b, c)
	}
}
