package bootstrap_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcbootstrap "google.golang.org/grpc/xds/bootstrap"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const good = `{
	"xds_servers": [{"server_uri": "xds.example.com:443", "channel_creds": [{"type": "insecure"}]}],
	"node": {"id": "projects/1/networks/default/nodes/a"},
	"server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s"
}`

// Check a bootstrap before deploying it, and learn the Listener name a
// server listening on an address asks for.
func ExampleParse() {
	cfg, err := bootstrap.Parse([]byte(good))
	if err != nil {
		fmt.Println("NewGRPCServer would refuse it:", err)
		return
	}
	name, _ := cfg.ServerListenerName(netip.MustParseAddrPort("10.0.0.5:50051"))
	fmt.Println(cfg.NodeID())
	fmt.Println(name)

	_, err = bootstrap.Parse([]byte(`{"xds_servers": [{"server_uri": "xds.example.com:443", "channel_creds": [{"type": "kerberos"}]}], "node": {"id": "a"}}`))
	var e *bootstrap.Error
	fmt.Println(errors.As(err, &e), e.Field, errors.Is(err, bootstrap.ErrNoSupportedCreds))
	// Output:
	// projects/1/networks/default/nodes/a
	// grpc/server?xds.resource.listening_address=10.0.0.5:50051
	// true xds_servers[0].channel_creds true
}

// registeredCreds is a channel credentials type registered with grpc-go.
type registeredCreds struct{}

func (registeredCreds) Name() string { return "bootstrap_test_creds" }
func (registeredCreds) Build(c json.RawMessage) (credentials.Bundle, func(), error) {
	if strings.Contains(string(c), "bad") {
		return nil, nil, errors.New("bad config")
	}
	return insecure.NewBundle(), func() {}, nil
}

func init() { grpcbootstrap.RegisterChannelCredentials(registeredCreds{}) }

// TestParseKnowsRegisteredCreds: Parse gives the server's verdict on types
// registered with grpc-go, good config and bad.
func TestParseKnowsRegisteredCreds(t *testing.T) {
	doc := func(cfg string) []byte {
		return []byte(`{"xds_servers": [{"server_uri": "x:1", "channel_creds": [{"type": "bootstrap_test_creds", "config": ` + cfg + `}]}], "node": {"id": "a"}}`)
	}
	if _, err := bootstrap.Parse(doc(`{}`)); err != nil {
		t.Errorf("registered type: %v", err)
	}
	_, err := bootstrap.Parse(doc(`{"bad": true}`))
	var e *bootstrap.Error
	if !errors.As(err, &e) || e.Field != "xds_servers[0].channel_creds[0]" || !errors.Is(err, bootstrap.ErrInvalidValue) {
		t.Errorf("registered type, bad config: %v, want an *Error at xds_servers[0].channel_creds[0]", err)
	}
}

// TestLoadOrder: the file wins over the CONFIG variable, and Source says
// which was read; NewGRPCServer fails with the same *Error type.
func TestLoadOrder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(file, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(bootstrap.EnvBootstrapFile, file)
	t.Setenv(bootstrap.EnvBootstrapConfig, `{"node": {"id": "from-config-variable"}}`)
	cfg, err := bootstrap.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfg.Source(), file) || cfg.NodeID() != "projects/1/networks/default/nodes/a" {
		t.Errorf("Load read %q (node %q), want the file %s", cfg.Source(), cfg.NodeID(), file)
	}
	t.Setenv(bootstrap.EnvBootstrapFile, "")
	_, err = xds.NewGRPCServer()
	var e *bootstrap.Error
	if !errors.As(err, &e) || e.Source != bootstrap.EnvBootstrapConfig || !errors.Is(err, bootstrap.ErrMissingField) {
		t.Errorf("NewGRPCServer with a bad GRPC_XDS_BOOTSTRAP_CONFIG: %v, want a *bootstrap.Error from it", err)
	}
	t.Setenv(bootstrap.EnvBootstrapConfig, "")
	if _, err := bootstrap.Load(nil); !errors.Is(err, bootstrap.ErrNoBootstrap) {
		t.Errorf("Load without a bootstrap: %v, want ErrNoBootstrap", err)
	}
}
