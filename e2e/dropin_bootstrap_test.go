package e2e_test

// A program moved from grpc-go's xds package keeps its bootstrap: the
// environment variables are read in grpc-go's order, and Traffic Director's
// bootstrap (google_default channel credentials, xdstp:// names through its
// authorities) and channel credential types registered with grpc-go work.
// Nothing here leaves the loopback interface.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcbootstrap "google.golang.org/grpc/xds/bootstrap"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// tdCreds are channel credentials registered with grpc-go's registry, as a
// program moved from grpc-go registers its own: an insecure bundle whose
// transport credentials count client handshakes (so a test knows the xDS
// client dialed with it), refused when the config has a member "fail".
// Builds and cleanups are counted.
type tdCreds struct {
	builds, cleanups, handshakes atomic.Int32
}

// tdCredsName is the registered name of tdTestCreds.
const tdCredsName = "e2e-test-registered-creds"

// tdTestCreds is registered before any test runs: grpc-go's registry is a
// plain map.
var tdTestCreds = &tdCreds{}

func init() { grpcbootstrap.RegisterChannelCredentials(tdTestCreds) }

func (c *tdCreds) Name() string { return tdCredsName }

func (c *tdCreds) Build(config json.RawMessage) (credentials.Bundle, func(), error) {
	var cfg map[string]any
	if len(config) > 0 {
		if err := json.Unmarshal(config, &cfg); err != nil {
			return nil, nil, err
		}
	}
	if _, ok := cfg["fail"]; ok {
		return nil, nil, fmt.Errorf("config %s asks to fail", config)
	}
	c.builds.Add(1)
	return &countingBundle{Bundle: insecure.NewBundle(), c: c}, func() { c.cleanups.Add(1) }, nil
}

// countingBundle is an insecure bundle whose handshakes are counted.
type countingBundle struct {
	credentials.Bundle
	c *tdCreds
}

func (b *countingBundle) TransportCredentials() credentials.TransportCredentials {
	return &countingTransport{TransportCredentials: b.Bundle.TransportCredentials(), c: b.c}
}

type countingTransport struct {
	credentials.TransportCredentials
	c *tdCreds
}

func (t *countingTransport) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	t.c.handshakes.Add(1)
	return t.TransportCredentials.ClientHandshake(ctx, authority, conn)
}

func (t *countingTransport) Clone() credentials.TransportCredentials {
	return &countingTransport{TransportCredentials: t.TransportCredentials.Clone(), c: t.c}
}

// closedLoopbackAddr returns a loopback address nothing listens on: a
// connection to it is refused at once.
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

// noGoogleNetwork makes google_default credentials unable to reach
// anything: Google's default-credentials lookup would otherwise read the
// user's credentials file and probe the GCE metadata server.
func noGoogleNetwork(t *testing.T) {
	t.Setenv("GCE_METADATA_HOST", closedLoopbackAddr(t))
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing-credentials.json"))
}

// writeBootstrap writes contents to a file and returns its path.
func writeBootstrap(t *testing.T, contents []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(path, contents, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDropinBootstrap_FileWinsOverConfigEnv: with both variables set, the
// file named by GRPC_XDS_BOOTSTRAP is used (as by grpc-go, grpc-java and
// C-core), not GRPC_XDS_BOOTSTRAP_CONFIG, whose management server is a
// closed port: the server serves, so it talked to the right control plane.
func TestDropinBootstrap_FileWinsOverConfigEnv(t *testing.T) {
	ctx := testContext(t)
	good := newTestEnv(t)
	wrong := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{closedLoopbackAddr(t)},
		NodeID:                             good.nodeID,
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
	})
	t.Setenv(bootstrap.EnvBootstrapFile, writeBootstrap(t, good.bootstrap))
	t.Setenv(bootstrap.EnvBootstrapConfig, string(wrong))

	lis, _ := listen(t, "127.0.0.1")
	good.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	env := &testEnv{ms: good.ms, nodeID: good.nodeID} // no bootstrap option: the environment
	s := env.newServer(t)
	s.serveOn(lis)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	if code := c.emptyCall(ctx); code != codes.OK {
		t.Fatalf("EmptyCall = %v, want OK", code)
	}
}

// Traffic Director's bootstrap, as Google Cloud's td-grpc-bootstrap writes
// it with federation on (its xdstp:// names): google_default channel
// credentials, v3 and ignore_resource_deletion, the global and DirectPath
// authorities, a file_watcher provider google_cloud_private_spiffe, and the
// node's id, metadata and locality.
const (
	tdGlobal  = "traffic-director-global.xds.googleapis.com"
	tdC2P     = "traffic-director-c2p.xds.googleapis.com"
	tdProject = "123456789012"
	tdNetwork = "default"
)

// tdBootstrap returns that bootstrap with the top-level server at uri, its
// channel_creds list creds (JSON), and the DirectPath authority's server at
// c2pURI. The server's Listener is an xdstp:// name of the global authority,
// which has no servers of its own, so it is served by the top-level server.
func tdBootstrap(t *testing.T, uri, creds, c2pURI, nodeID, certDir string) []byte {
	t.Helper()
	tdListenerPrefix := "xdstp://" + tdGlobal + "/envoy.config.listener.v3.Listener/" + tdProject + "/" + tdNetwork + "/"
	js := fmt.Sprintf(`{
  "xds_servers": [
    {
      "server_uri": %q,
      "channel_creds": %s,
      "server_features": ["xds_v3", "ignore_resource_deletion"]
    }
  ],
  "authorities": {
    %q: {
      "xds_servers": [
        {
          "server_uri": %q,
          "channel_creds": [{"type": "google_default"}],
          "server_features": ["xds_v3", "ignore_resource_deletion"]
        }
      ],
      "client_listener_resource_name_template": "xdstp://%s/envoy.config.listener.v3.Listener/%%s"
    },
    %q: {
      "client_listener_resource_name_template": "%s%%s"
    }
  },
  "node": {
    "id": %q,
    "cluster": "cluster",
    "metadata": {
      "INSTANCE_IP": "127.0.0.1",
      "TRAFFICDIRECTOR_GCP_PROJECT_NUMBER": %q,
      "TRAFFICDIRECTOR_NETWORK_NAME": %q,
      "TRAFFICDIRECTOR_DIRECTPATH_C2P_IPV6_CAPABLE": true,
      "TRAFFICDIRECTOR_GRPC_BOOTSTRAP_GENERATOR_SHA": "0000000000000000000000000000000000000000",
      "TRAFFIC_DIRECTOR_CLIENT_ENVIRONMENT": {"GCP-ZONE": "us-central1-a", "INSTANCE-IP": "127.0.0.1"}
    },
    "locality": {"zone": "us-central1-a"}
  },
  "certificate_providers": {
    "google_cloud_private_spiffe": {
      "plugin_name": "file_watcher",
      "config": {
        "certificate_file": %q,
        "private_key_file": %q,
        "ca_certificate_file": %q,
        "refresh_interval": "600s"
      }
    }
  },
  "client_default_listener_resource_name_template": "%s%%s",
  "server_listener_resource_name_template": "%sgrpc-server/%%s"
}`, uri, creds, tdC2P, c2pURI, tdC2P, tdGlobal, tdListenerPrefix, nodeID, tdProject, tdNetwork,
		filepath.Join(certDir, "certificates.pem"), filepath.Join(certDir, "private_key.pem"), filepath.Join(certDir, "ca_certificates.pem"),
		tdListenerPrefix, tdListenerPrefix)
	var check map[string]any
	if err := json.Unmarshal([]byte(js), &check); err != nil {
		t.Fatalf("the test's bootstrap is not JSON: %v\n%s", err, js)
	}
	return []byte(js)
}

// tdListenerName returns the Listener name a server with bootstrap
// contents, listening on addr, watches.
func tdListenerName(t *testing.T, contents []byte, addr net.Addr) string {
	t.Helper()
	cfg, err := bootstrap.ParseWith(contents, xdsclient.BootstrapOptions())
	if err != nil {
		t.Fatalf("bootstrap.ParseWith: %v", err)
	}
	name, err := cfg.ServerListenerName(addr.(*net.TCPAddr).AddrPort())
	if err != nil {
		t.Fatalf("ServerListenerName: %v", err)
	}
	return name
}

// TestDropinBootstrap_TDRegisteredCreds: a Traffic-Director-shaped bootstrap
// whose first channel_creds is a type registered with grpc-go's
// xds/bootstrap (google_default after it is never built): the server
// watches its xdstp:// Listener through the global authority, serves, and a
// grpc-go client's RPC succeeds. The xDS client dialed with the registered
// bundle, and every build of it is cleaned up by Stop.
func TestDropinBootstrap_TDRegisteredCreds(t *testing.T) {
	noGoogleNetwork(t)
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	contents := tdBootstrap(t, ms.Address,
		`[{"type": "`+tdCredsName+`", "config": {"any": "thing"}}, {"type": "google_default"}]`,
		closedLoopbackAddr(t), "projects/"+tdProject+"/networks/"+tdNetwork+"/nodes/td-registered", t.TempDir())
	t.Setenv(bootstrap.EnvBootstrapFile, writeBootstrap(t, contents))
	t.Setenv(bootstrap.EnvBootstrapConfig, "")

	lis, _ := listen(t, "127.0.0.1")
	l := simpleListener(lis.Addr())
	l.Name = tdListenerName(t, contents, lis.Addr())
	if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{l}}); err != nil {
		t.Fatalf("ms.Update: %v", err)
	}
	builds0, cleanups0, handshakes0 := tdTestCreds.builds.Load(), tdTestCreds.cleanups.Load(), tdTestCreds.handshakes.Load()

	env := &testEnv{ms: ms}
	s := env.newServer(t, grpc.Creds(insecure.NewCredentials()))
	s.serveOn(lis)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	if code := c.emptyCall(ctx); code != codes.OK {
		t.Fatalf("EmptyCall = %v, want OK", code)
	}
	if n := tdTestCreds.handshakes.Load() - handshakes0; n < 1 {
		t.Errorf("the registered bundle made %d handshakes, want the xDS client to dial with it", n)
	}
	if _, err := ms.WaitForRequest(ctx, e2e.IsSubscription(resourcev3.ListenerType, l.Name)); err != nil {
		t.Errorf("the management server got no request for %q: %v", l.Name, err)
	}

	s.stopAndWait()
	builds, cleanups := tdTestCreds.builds.Load()-builds0, tdTestCreds.cleanups.Load()-cleanups0
	if builds < 2 || cleanups != builds {
		t.Errorf("after Stop: %d builds of the registered credentials, %d cleanups; want at least 2 (a check while parsing, the channel) and one cleanup each", builds, cleanups)
	}
}

// TestDropinBootstrap_TDGoogleDefault: the bootstrap as Traffic Director's
// generator writes it, google_default only, with the management server a
// closed loopback port. NewGRPCServer and Serve work, the xDS client tries
// that port with google_default credentials and fails, the server never
// serves (connections are closed without a byte, no serving-mode change),
// and Stop leaves nothing running (the package's leak check).
func TestDropinBootstrap_TDGoogleDefault(t *testing.T) {
	noGoogleNetwork(t)
	ctx := testContext(t)
	msAddr := closedLoopbackAddr(t)
	contents := tdBootstrap(t, msAddr, `[{"type": "google_default"}]`,
		closedLoopbackAddr(t), "projects/"+tdProject+"/networks/"+tdNetwork+"/nodes/td-google-default", t.TempDir())
	t.Setenv(bootstrap.EnvBootstrapFile, writeBootstrap(t, contents))
	t.Setenv(bootstrap.EnvBootstrapConfig, "")

	env := &testEnv{}
	s := env.newServer(t)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	logs.WaitCount(ctx, t, 1, "W", "ADS stream to", msAddr, "failed")
	expectClosedNoBytes(t, lis.Addr(), "127.0.0.1")
	s.modes.expectNone(t, lis.Addr(), defaultTestShortTimeout)
	expectClosedNoBytes(t, lis.Addr(), "127.0.0.1")
	s.stopAndWait()
}
