package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// resourcesJSON is a resources file of examples/controlplane: a Listener for
// 127.0.0.1:port whose routes let every RPC through, with the given HTTP
// filters before the router.
func resourcesJSON(port int, filters string) string {
	return fmt.Sprintf(`{
  "listeners": [{
    "name": "grpc/server?xds.resource.listening_address=127.0.0.1:%[1]d",
    "address": {"socket_address": {"address": "127.0.0.1", "port_value": %[1]d}},
    "filter_chains": [{
      "name": "default",
      "filters": [{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
          "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
          "stat_prefix": "greeter",
          "rds": {"route_config_name": "greeter-routes", "config_source": {"ads": {}, "resource_api_version": "V3"}},
          "http_filters": [%[2]s
            {"name": "router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
          ]
        }
      }]
    }]
  }],
  "routes": [{
    "name": "greeter-routes",
    "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [{"name": "everything", "match": {"prefix": "/"}, "non_forwarding_action": {}}]}]
  }]
}
`, port, filters)
}

// denyUnaryCall is an RBAC filter that denies UnaryCall to everyone.
const denyUnaryCall = `
            {"name": "rbac", "typed_config": {
              "@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC",
              "rules": {"action": "DENY", "policies": {"no-unary": {
                "permissions": [{"url_path": {"path": {"exact": "/grpc.testing.TestService/UnaryCall"}}}],
                "principals": [{"any": true}]
              }}}
            }},`

// writeFile replaces path's contents, as an editor saving it does.
func writeFile(t *testing.T, path, contents string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestControlPlaneE2E runs examples/controlplane (built from the root
// module, as a process) and the greeter against it: the greeter serves the
// Listener of the JSON file; an RBAC rule added to the file denies UnaryCall
// without restarting the greeter.
func TestControlPlaneE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cpBin := buildTool(ctx, t, "../..", "./examples/controlplane", "controlplane")

	dir := t.TempDir()
	resources := filepath.Join(dir, "resources.json")
	// The greeter's port is known once it listens: the file starts with a
	// Listener for another port.
	writeFile(t, resources, resourcesJSON(1, ""))
	cp := exec.Command(cpBin, "-config", resources, "-addr", "127.0.0.1:0")
	stderr, err := cp.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	cpLog := &syncBuffer{}
	cpLogged := make(chan struct{}, 1) // a line was added to cpLog
	cpAddr := make(chan string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		re := regexp.MustCompile(`serving ADS on (\S+);`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			cpLog.Write([]byte(sc.Text() + "\n"))
			select {
			case cpLogged <- struct{}{}:
			default:
			}
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				cpAddr <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
		cp.Process.Signal(syscall.SIGTERM)
		<-logDone
		if err := cp.Wait(); err != nil {
			t.Errorf("controlplane: %v; log:\n%s", err, cpLog.String())
		}
	})
	var addr string
	select {
	case addr = <-cpAddr:
	case <-ctx.Done():
		t.Fatalf("the control plane did not start; log:\n%s", cpLog.String())
	}

	bs := filepath.Join(dir, "bootstrap.json")
	writeFile(t, bs, fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "greeter-e2e"},
  "server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%%s"
}`, addr))
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second})
	writeFile(t, resources, resourcesJSON(g.addr.Port, ""))
	g.hello(ctx, t)

	// Deny UnaryCall by editing the file.
	writeFile(t, resources, resourcesJSON(g.addr.Port, denyUnaryCall))
	// The control plane logs the greeter's ACK of the new Listener.
	ack := `xDS client "greeter-e2e" applied (ACK) Listener version 3`
	for !strings.Contains(cpLog.String(), ack) {
		select {
		case <-cpLogged:
		case <-ctx.Done():
			t.Fatalf("no %q; control plane log:\n%s", ack, cpLog.String())
		}
	}
	client := testgrpc.NewTestServiceClient(g.conn)
	for {
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		if status.Code(err) == codes.PermissionDenied {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("UnaryCall after the RBAC rule: %v, want PERMISSION_DENIED; control plane log:\n%s\ngreeter log:\n%s", err, cpLog.String(), g.logs.String())
		}
		// The ACK may precede the drain of the connection by a moment:
		// the next call goes over the new configuration.
	}
	// Other RPCs still pass, on the same process.
	if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Errorf("EmptyCall after the RBAC rule: %v", err)
	}
	if strings.Contains(g.logs.String(), "stopped") {
		t.Error("the greeter restarted")
	}
}
