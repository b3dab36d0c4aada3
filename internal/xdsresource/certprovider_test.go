package xdsresource_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc/credentials/tls/certprovider"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

// testPluginName names a real certificate provider plugin, registered with
// grpc-go's registry, that accepts any config. The decoder never builds
// its providers.
const testPluginName = "xdsresource-test-plugin"

type testPlugin struct{}

func init() { certprovider.Register(testPlugin{}) }

func (testPlugin) Name() string { return testPluginName }

func (testPlugin) ParseConfig(c any) (*certprovider.BuildableConfig, error) {
	raw, _ := c.(json.RawMessage)
	return certprovider.NewBuildableConfig(testPluginName, raw, func(certprovider.BuildOptions) certprovider.Provider { return nil }), nil
}

// withTLS returns l with the identity of instance on its chain.
func withTLS(t *testing.T, l *listenerpb.Listener, instance string) *listenerpb.Listener {
	t.Helper()
	a, err := anypb.New(&tlspb.DownstreamTlsContext{CommonTlsContext: &tlspb.CommonTlsContext{
		TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: instance},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l.FilterChains[0].TransportSocket = &corepb.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: a}}
	return l
}

// TestListenerCertProviderPlugins: a Listener whose TLS names an instance
// of a plugin registered with grpc-go is ACKed; one naming an instance of a
// plugin nobody registered is NACKed, and the NACK says how to fix it.
func TestListenerCertProviderPlugins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	cfg, err := bootstrap.Parse(e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs: []string{ms.Address}, NodeID: "node-1",
		CertificateProviders: map[string]json.RawMessage{
			"registered":   json.RawMessage(`{"plugin_name": "` + testPluginName + `", "config": {"k": "v"}}`),
			"unregistered": json.RawMessage(`{"plugin_name": "xdsresource-test-nobody", "config": {}}`),
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := xdsclient.New(cfg, xdsclient.Options{ResourceTypes: []*xdsclient.ResourceType{xdsresource.ListenerType, xdsresource.RouteConfigType}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	good := withTLS(t, e2e.DefaultServerListener("127.0.0.1", 50053, ""), "registered")
	w := newRecorder()
	defer c.WatchResource(xdsresource.ListenerType, good.GetName(), w)()
	if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{good}}); err != nil {
		t.Fatal(err)
	}
	u := w.next(ctx, t)
	lis, ok := u.data.(*xdsresource.Listener)
	if !ok {
		t.Fatalf("first callback = %+v, want a *xdsresource.Listener", u)
	}
	if sec := lis.Table.Chains()[0].Security; sec == nil || sec.IdentityInstance != "registered" {
		t.Errorf("chain security = %+v, want the identity of instance %q", sec, "registered")
	}
	if _, err := ms.WaitForRequest(ctx, e2e.IsACK(xdsresource.ListenerTypeURL, "1")); err != nil {
		t.Fatalf("no ACK of the Listener naming a registered plugin's instance: %v", err)
	}

	bad := withTLS(t, e2e.DefaultServerListener("127.0.0.1", 50053, ""), "unregistered")
	if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{bad}}); err != nil {
		t.Fatal(err)
	}
	nack, err := ms.WaitForRequest(ctx, e2e.IsNACK(xdsresource.ListenerTypeURL))
	if err != nil {
		t.Fatalf("no NACK of the Listener naming an unregistered plugin's instance: %v", err)
	}
	msg := nack.GetErrorDetail().GetMessage()
	for _, want := range []string{`"unregistered"`, "not registered", "file_watcher", "google.golang.org/grpc/credentials/tls/certprovider.Register"} {
		if !strings.Contains(msg, want) {
			t.Errorf("NACK error_detail = %q, want it to mention %q", msg, want)
		}
	}
	if u := w.next(ctx, t); !u.ambient {
		t.Fatalf("after the NACK the watcher got %+v, want an ambient error (the good Listener stays)", u)
	}
}
