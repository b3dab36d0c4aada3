package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// grpcGoProgram is a program written against grpc-go's public xDS server
// API; grpcGoImports are the imports of it that differ from grpc-go's, and
// what they are in the grpc-go program.
const grpcGoProgram = "./testdata/grpcgoserver"

var grpcGoImports = map[string]string{
	`"github.com/proxyless-grpc/xds"      // changed: was google.golang.org/grpc/xds`:      `"google.golang.org/grpc/xds"`,
	`"github.com/proxyless-grpc/xds/csds" // changed: was google.golang.org/grpc/xds/csds`: `"google.golang.org/grpc/xds/csds"`,
}

// buildProgram builds the program at pkg into dir, with overlay (go build
// -overlay) if not nil, and returns the binary's path.
func buildProgram(t *testing.T, dir, name, pkg string, overlay map[string]string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build %s: %v", pkg, err)
	}
	bin := filepath.Join(dir, name)
	args := []string{"build", "-o", bin}
	if overlay != nil {
		js, err := json.Marshal(map[string]any{"Replace": overlay})
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name+"-overlay.json")
		if err := os.WriteFile(f, js, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-overlay", f)
	}
	out, err := exec.Command(goTool, append(args, pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(append(args, pkg), " "), err, out)
	}
	return bin
}

// TestDropIn_GRPCGoProgram: a program written for grpc-go's xDS server,
// with only the imports of google.golang.org/grpc/xds and its csds package
// changed, compiles, and does here what it does on grpc-go. The same source
// with those two imports put back compiles against grpc-go, which proves
// that nothing else differs. Run against the management server, it serves
// with the channel credentials, certificate provider plugin and audit
// logger it registered with grpc-go's registries, behind grpc-go's xDS
// credentials (mTLS enforced), reports its serving mode through
// ServingModeCallbackFunc, answers CSDS, and stops gracefully on SIGTERM.
//
// Not parallel: the two builds would take the CPUs from timed tests.
func TestDropIn_GRPCGoProgram(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(grpcGoProgram, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	grpcGoSrc := string(src)
	for ours, theirs := range grpcGoImports {
		if !strings.Contains(grpcGoSrc, ours) {
			t.Fatalf("%s/main.go lacks the import line %s", grpcGoProgram, ours)
		}
		grpcGoSrc = strings.Replace(grpcGoSrc, ours, theirs, 1)
	}
	if strings.Contains(grpcGoSrc, "proxyless-grpc") {
		t.Fatalf("%s/main.go names this library outside the two changed imports", grpcGoProgram)
	}
	theirs := filepath.Join(dir, "main_grpcgo.go")
	if err := os.WriteFile(theirs, []byte(grpcGoSrc), 0o600); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(filepath.Join(grpcGoProgram, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	buildProgram(t, dir, "on-grpc-go", grpcGoProgram, map[string]string{abs: theirs})
	bin := buildProgram(t, dir, "on-this-library", grpcGoProgram, nil)

	ctx := testContext(t)
	pki := newTestPKI(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	pem := func(cfg map[string]string) json.RawMessage {
		js, _ := json.Marshal(map[string]any{"plugin_name": "example_pem", "config": cfg})
		return js
	}
	bs, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      ms.Address,
			"channel_creds":   []any{map[string]any{"type": "example_insecure"}},
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]any{"id": "node-" + t.Name()},
		"certificate_providers": map[string]json.RawMessage{
			instServer: pem(map[string]string{"certificate_file": pki.serverFiles.Cert, "private_key_file": pki.serverFiles.Key}),
			instRoots:  pem(map[string]string{"ca_certificate_file": pki.serverFiles.CA}),
		},
		"server_listener_resource_name_template": e2e.ServerListenerNameTemplate,
	})
	if err != nil {
		t.Fatal(err)
	}
	bsFile := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(bsFile, bs, 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+bsFile, "GRPC_XDS_BOOTSTRAP_CONFIG=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	exited := make(chan struct{}) // closed once the program exited and exitErr is set
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads that much: drop
			}
		}
		io.Copy(io.Discard, stdout)
		close(lines)
		exitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	// nextLine waits for a line of the program's output starting with
	// prefix, skipping others.
	nextLine := func(prefix string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the program exited before printing %q; stderr:\n%s", prefix, stderr.String())
				}
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-ctx.Done():
				t.Fatalf("the program never printed %q; stderr:\n%s", prefix, stderr.String())
			}
		}
	}
	xdsAddr, err := net.ResolveTCPAddr("tcp", strings.TrimPrefix(nextLine("xds "), "xds "))
	if err != nil {
		t.Fatal(err)
	}
	maintAddr := strings.TrimPrefix(nextLine("maintenance "), "maintenance ")

	// An mTLS Listener whose RBAC filter allows EmptyCall only, audited by
	// the program's own logger.
	prefix, err := structpb.NewStruct(map[string]any{"prefix": "AUDIT"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := allowMethods(methodEmpty)
	cfg.Rules.AuditLoggingOptions = &rbacconfigpb.RBAC_AuditLoggingOptions{
		AuditCondition: rbacconfigpb.RBAC_AuditLoggingOptions_ON_DENY_AND_ALLOW,
		LoggerConfigs: []*rbacconfigpb.RBAC_AuditLoggingOptions_AuditLoggerConfig{{
			AuditLogger: &corepb.TypedExtensionConfig{Name: "print", TypedConfig: anyOf(t, &xdstypepb.TypedStruct{
				TypeUrl: "grpc.authz.audit_logging/example_print", Value: prefix,
			})},
		}},
	}
	l := rbacListener(t, xdsAddr, cfg, allRoutes("r"), "")
	l = withTransportSocket(t, l, l.FilterChains[0].GetName(), downstreamTLS(true, true))
	if err := ms.Update(ctx, e2e.Resources{Listeners: []*listenerpb.Listener{l}}); err != nil {
		t.Fatal(err)
	}
	if got, want := nextLine("mode "), fmt.Sprintf("mode %v SERVING", xdsAddr); got != want {
		t.Fatalf("serving mode line %q, want %q", got, want)
	}

	client := pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "client", URIs: []string{"spiffe://test.example/client"}})
	c := newClient(t, xdsAddr, "127.0.0.1", 0, tlsClientCreds(pki.ca.Pool, client))
	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("mTLS EmptyCall: %v, want OK", got)
	}
	if got := c.unaryCall(ctx); got != codes.PermissionDenied {
		t.Fatalf("mTLS UnaryCall: %v, want PERMISSION_DENIED (RBAC)", got)
	}
	if got, want := nextLine("AUDIT "), "AUDIT "+methodEmpty+" authorized=true principal=spiffe://test.example/client"; got != want {
		t.Errorf("audit line %q, want %q", got, want)
	}
	if got, want := nextLine("AUDIT "), "AUDIT "+methodUnary+" authorized=false principal=spiffe://test.example/client"; got != want {
		t.Errorf("audit line %q, want %q", got, want)
	}
	// The same binary dials an xds:/// target with grpc-go's resolver (the
	// kept blank import of google.golang.org/grpc/xds): its own xDS server,
	// over mTLS from the Cluster's UpstreamTlsContext, through grpc-go's xDS
	// client on the same bootstrap.
	host, port := hostPort(xdsAddr)
	if err := ms.Update(ctx, e2e.Resources{
		Listeners: []*listenerpb.Listener{l, clientAPIListener(t)},
		Clusters:  []*clusterpb.Cluster{tlsCluster(t, instServer, instRoots)},
		Raw:       map[string][]proto.Message{resourcev3.EndpointType: {endpoints(host, port)}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(stdin, "dial xds:///%s\n", interopTarget); err != nil {
		t.Fatal(err)
	}
	// The server audits the call before the client prints its result.
	if got := nextLine("AUDIT "); !strings.HasPrefix(got, "AUDIT "+methodEmpty+" authorized=true") {
		t.Errorf("audit line of the xds:/// call %q, want %s authorized", got, methodEmpty)
	}
	if got, want := nextLine("dialed "), "dialed xds:///"+interopTarget+" OK"; got != want {
		t.Fatalf("the program's own xds:/// call: %q, want %q; stderr:\n%s", got, want, stderr.String())
	}

	// grpc-go's xDS credentials must not let plaintext through.
	dialFails(ctx, t, xdsAddr, "127.0.0.1", grpc.WithTransportCredentials(insecure.NewCredentials()))

	// CSDS on the maintenance server shows the Listener, ACKed.
	cc, err := grpc.NewClient(maintAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := csdspb.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(ctx, &csdspb.ClientStatusRequest{})
	if err != nil {
		t.Fatalf("CSDS: %v", err)
	}
	found := false
	for _, cfg := range resp.GetConfig() {
		for _, gc := range cfg.GetGenericXdsConfigs() {
			if gc.GetName() == l.GetName() && gc.GetClientStatus() == adminpb.ClientResourceStatus_ACKED {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("CSDS does not show Listener %q ACKed: %v", l.GetName(), resp)
	}

	// SIGTERM: GracefulStop, Serve returns, the program exits 0.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	nextLine("stopped")
	select {
	case <-exited:
		if exitErr != nil {
			t.Fatalf("the program exited with %v; stderr:\n%s", exitErr, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the program did not exit after SIGTERM")
	}
}
