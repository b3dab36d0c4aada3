package node

// The test environment: one in-process management server, this library's
// xDS server (xds.NewGRPCServer with xDS credentials) on 127.0.0.1, the test
// PKI, and the bootstrap files of the Node client.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// testTimeout bounds a whole test, Node's start-up (about a second) included.
const testTimeout = 25 * time.Second

// Certificate provider instance names of the two bootstraps.
const (
	instServerIdentity = "server-identity" // the server's certificate and key
	instServerRoots    = "server-roots"    // the CA the server verifies clients with
	instClientIdentity = "client-identity" // the Node client's certificate and key
	instClientRoots    = "client-roots"    // the CA the Node client verifies the server with
)

// Node IDs of the two xDS clients of a test.
const (
	serverNodeID = "interop-node-server"
	clientNodeID = "interop-node-client"
)

// testContext returns a context that ends after testTimeout or with the test.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// pki is the certificates of a test: a CA that both sides trust, another CA
// that nothing trusts, and the server's certificate, issued by ca.
type pki struct {
	ca, otherCA *testcerts.CA
	server      *testcerts.Leaf
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca := testcerts.NewCA(t, "interop-ca")
	return &pki{
		ca:      ca,
		otherCA: testcerts.NewCA(t, "other-ca"),
		server:  ca.Issue(t, testcerts.LeafOptions{CommonName: "server", DNSNames: []string{"server.test"}, IPs: []string{"127.0.0.1"}}),
	}
}

// env is one test's management server and xDS server.
type env struct {
	t       *testing.T
	nodeBin string // the node binary
	nodeDir string // the directory of client.js and node_modules
	ms      *e2e.ManagementServer
	pki     *pki
	svc     *interopService
	srv     *xds.GRPCServer
	addr    net.Addr                       // the server's listening address
	modes   chan xds.ServingModeChangeArgs // serving-mode changes of addr
	serveCh chan error                     // Serve's result

	// listenerUpdates counts the Updates of the Listener type, which is the
	// version_info the management server gives the last one. Only the test
	// goroutine touches it.
	listenerUpdates int
}

// newEnv starts a management server and an xDS server listening on
// 127.0.0.1 (not yet serving: no Listener is published). Both stop at the
// end of the test. It first skips the test if Node or its packages are
// missing (see nodeSetup).
func newEnv(t *testing.T, opts ...grpc.ServerOption) *env {
	t.Helper()
	nodeBin, nodeDir := nodeSetup(t)
	e := &env{
		nodeBin: nodeBin,
		nodeDir: nodeDir,
		t:       t,
		ms:      e2e.StartManagementServer(t, e2e.ManagementServerOptions{}),
		pki:     newPKI(t),
		svc:     &interopService{},
		modes:   make(chan xds.ServingModeChangeArgs, 100),
		serveCh: make(chan error, 1),
	}
	dir := t.TempDir()
	files := testcerts.WriteFiles(t, dir, e.pki.server, e.pki.ca.PEM)
	bootstrap := e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{e.ms.Address},
		NodeID:                             serverNodeID,
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		CertificateProviders: map[string]json.RawMessage{
			instServerIdentity: fileWatcher(t, map[string]string{"certificate_file": files.Cert, "private_key_file": files.Key}),
			instServerRoots:    fileWatcher(t, map[string]string{"ca_certificate_file": files.CA}),
		},
	})
	creds, err := xds.NewServerCredentials(xds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatalf("xds.NewServerCredentials: %v", err)
	}
	all := append([]grpc.ServerOption{
		grpc.Creds(creds),
		xds.BootstrapContents(bootstrap),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) { e.modes <- args }),
	}, opts...)
	if e.srv, err = xds.NewGRPCServer(all...); err != nil {
		t.Fatalf("xds.NewGRPCServer: %v", err)
	}
	e.srv.RegisterService(&interopServiceDesc, e.svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen: %v", err)
	}
	e.addr = lis.Addr()
	go func() { e.serveCh <- e.srv.Serve(lis) }()
	t.Cleanup(e.stop)
	return e
}

// stop stops the server and checks that Serve returned nil.
func (e *env) stop() {
	e.srv.Stop()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case err := <-e.serveCh:
		if err != nil {
			e.t.Errorf("Serve returned %v, want nil after Stop", err)
		}
	case <-timer.C:
		e.t.Error("Serve did not return within 10s of Stop")
	}
}

// fileWatcher is a file_watcher certificate provider entry of a bootstrap.
func fileWatcher(t *testing.T, cfg map[string]string) json.RawMessage {
	t.Helper()
	cfg["refresh_interval"] = "600s"
	b, err := json.Marshal(map[string]any{"plugin_name": "file_watcher", "config": cfg})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hostPort splits the server's address for resources.
func (e *env) hostPort() (string, uint32) {
	a := e.addr.(*net.TCPAddr)
	return a.IP.String(), uint32(a.Port)
}

// publish makes server (the server's Listener) and the Node client's
// resources (its Listener, cluster, whose connections use mTLS if tls, and
// endpoints: the server) the whole state of the management server.
func (e *env) publish(ctx context.Context, server *listenerpb.Listener, tls bool) {
	e.t.Helper()
	host, port := e.hostPort()
	if err := e.ms.Update(ctx, e2e.Resources{
		Listeners: []*listenerpb.Listener{server, clientListener()},
		Clusters:  []*clusterpb.Cluster{clientCluster(e.t, tls)},
		Raw:       map[string][]proto.Message{resourcev3.EndpointType: {clientEndpoints(host, port)}},
	}); err != nil {
		e.t.Fatalf("ms.Update: %v", err)
	}
	e.listenerUpdates++
}

// updateServerListener replaces the server's Listener, keeping the client's
// resources, and waits until the server ACKed it.
func (e *env) updateServerListener(ctx context.Context, server *listenerpb.Listener) {
	e.t.Helper()
	if err := e.ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{server, clientListener()}}); err != nil {
		e.t.Fatalf("ms.Update: %v", err)
	}
	e.listenerUpdates++
	version := strconv.Itoa(e.listenerUpdates)
	isACK := e2e.IsACK(resourcev3.ListenerType, version)
	if _, err := e.ms.WaitForRequest(ctx, func(r *discoverypb.DiscoveryRequest) bool {
		return r.GetNode().GetId() == serverNodeID && isACK(r)
	}); err != nil {
		e.t.Fatalf("waiting for the server to ACK version %s of the Listeners: %v", version, err)
	}
}

// waitServing waits for the server's listener to become SERVING.
func (e *env) waitServing(ctx context.Context) {
	e.t.Helper()
	for {
		select {
		case args := <-e.modes:
			if args.Mode == connectivity.ServingModeServing {
				return
			}
			e.t.Logf("serving mode of %v: %v (%v)", e.addr, args.Mode, args.Err)
		case <-ctx.Done():
			e.t.Fatalf("the server on %v did not become SERVING", e.addr)
		}
	}
}

// nodeClient returns a Node client with a bootstrap of its own, which
// points at e's management server, and certificate files: identity (if not
// nil) is its certificate, and it trusts e's CA.
func (e *env) nodeClient(identity *testcerts.Leaf) *nodeClient {
	return &nodeClient{bin: e.nodeBin, dir: e.nodeDir, bootstrap: e.clientBootstrap(identity)}
}

// clientBootstrap writes the Node client's bootstrap and certificate files
// (see nodeClient) and returns the bootstrap's path.
func (e *env) clientBootstrap(identity *testcerts.Leaf) string {
	e.t.Helper()
	dir := e.t.TempDir()
	files := testcerts.WriteFiles(e.t, dir, identity, e.pki.ca.PEM)
	providers := map[string]json.RawMessage{
		instClientRoots: fileWatcher(e.t, map[string]string{"ca_certificate_file": files.CA}),
	}
	if identity != nil {
		providers[instClientIdentity] = fileWatcher(e.t, map[string]string{"certificate_file": files.Cert, "private_key_file": files.Key})
	}
	b := withNodeLocality(e.t, e2e.Bootstrap(e.t, e2e.BootstrapOptions{
		ServerURIs:           []string{e.ms.Address},
		NodeID:               clientNodeID,
		CertificateProviders: providers,
	}))
	path := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// withNodeLocality adds an empty node.locality to bootstrap: grpc-js-xds
// 1.14 refuses a bootstrap whose node has none ("locality field missing in
// node element"), although gRFC A27 defines the node as the JSON form of the
// Node proto, whose fields are all optional.
func withNodeLocality(t *testing.T, bootstrap []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(bootstrap, &m); err != nil {
		t.Fatalf("decoding the bootstrap: %v", err)
	}
	node, ok := m["node"].(map[string]any)
	if !ok {
		t.Fatalf("the bootstrap has no node: %s", bootstrap)
	}
	node["locality"] = map[string]any{}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nodeSetup returns the node binary and the directory of client.js, or
// skips the test (fails it, if XDS_INTEROP_NODE_REQUIRED is set) when node
// is not on PATH or the npm packages are not installed.
func nodeSetup(t *testing.T) (nodeBin, dir string) {
	t.Helper()
	nodeBin, dir, err := lookNode()
	if err == nil {
		return nodeBin, dir
	}
	if os.Getenv("XDS_INTEROP_NODE_REQUIRED") != "" {
		t.Fatalf("XDS_INTEROP_NODE_REQUIRED is set: %v", err)
	}
	t.Skipf("skipping the Node interop test: %v", err)
	return "", ""
}

func lookNode() (nodeBin, dir string, err error) {
	nodeBin, err = exec.LookPath("node")
	if err != nil {
		return "", "", fmt.Errorf("node is not on PATH (%w); install Node.js 18 or later", err)
	}
	dir, err = os.Getwd() // go test runs in the package directory
	if err != nil {
		return "", "", err
	}
	for _, pkg := range []string{"@grpc/grpc-js", "@grpc/grpc-js-xds", "@grpc/proto-loader"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			return "", "", fmt.Errorf("%s is not installed (%w): run npm ci in interop/node", pkg, err)
		}
	}
	return nodeBin, dir, nil
}
