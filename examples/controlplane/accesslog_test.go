package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
)

// accessLogListener is a Listener for addr (host:port) whose
// HttpConnectionManager has an access_log of every kind the library
// supports, written as a user writes the file: a FileAccessLog at path
// with a text format and filters, a StdoutAccessLog with a JSON format and
// a StderrAccessLog with Envoy's default format, both filtered out; and
// the HTTP filters the library runs besides RBAC (their "@type"s must
// resolve too).
func accessLogListener(addr, path string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf(`{
  "listeners": [{
    "name": "grpc/server?xds.resource.listening_address=%[1]s",
    "address": {"socket_address": {"address": %[2]q, "port_value": %[3]s}},
    "filter_chains": [{
      "name": "default",
      "filters": [{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
          "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
          "stat_prefix": "greeter",
          "access_log": [
            {
              "name": "file",
              "filter": {"and_filter": {"filters": [
                {"status_code_filter": {"comparison": {"op": "GE", "value": {"default_value": 200, "runtime_key": "unused"}}}},
                {"or_filter": {"filters": [
                  {"grpc_status_filter": {"statuses": ["OK", "NOT_FOUND"]}},
                  {"response_flag_filter": {"flags": ["RL", "UAEX"]}}
                ]}},
                {"header_filter": {"header": {"name": ":path", "string_match": {"prefix": "/grpc.testing."}}}},
                {"runtime_filter": {"runtime_key": "unused", "percent_sampled": {"numerator": 100}}},
                {"duration_filter": {"comparison": {"op": "LE", "value": {"default_value": 60000, "runtime_key": "unused"}}}}
              ]}},
              "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                "path": %[4]q,
                "log_format": {"text_format_source": {"inline_string": "%%REQ(:PATH)%% %%GRPC_STATUS%% %%RESPONSE_FLAGS%% %%RESPONSE_CODE_DETAILS%% %%ROUTE_NAME%% who=%%REQ(X-WHO)%%\n"}}
              }
            },
            {
              "name": "stdout",
              "filter": {"traceable_filter": {}},
              "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
                "log_format": {"json_format": {"method": "%%REQ(:PATH)%%", "status": "%%GRPC_STATUS_NUMBER%%"}, "omit_empty_values": true}
              }
            },
            {
              "name": "stderr",
              "filter": {"traceable_filter": {}},
              "typed_config": {"@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog"}
            }
          ],
          "route_config": {
            "name": "routes",
            "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
              {"name": "everything", "match": {"prefix": "/"}, "non_forwarding_action": {}}
            ]}]
          },
          "http_filters": [
            {"name": "fault", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"}},
            {"name": "local", "typed_config": {
              "@type": "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
              "stat_prefix": "local",
              "token_bucket": {"max_tokens": 1000, "tokens_per_fill": 1000, "fill_interval": "1s"},
              "filter_enabled": {"default_value": {"numerator": 100}},
              "filter_enforced": {"default_value": {"numerator": 100}}
            }},
            {"name": "router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
          ]
        }
      }]
    }]
  }]
}`, addr, host, port, path)
}

// TestAccessLogInResources: an HttpConnectionManager's access_log, with
// each logger type, text and JSON formats and filters, can be written in
// the resources file; the library accepts it; and a server the control
// plane serves writes its lines.
func TestAccessLogInResources(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	doc := accessLogListener(lis.Addr().String(), logPath)

	// Parsed, and valid to the library.
	res, err := parseResources([]byte(doc))
	if err != nil {
		t.Fatalf("parseResources: %v", err)
	}
	hcm := &hcmpb.HttpConnectionManager{}
	if err := res.listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	cfg, err := accesslog.Compile(hcm.GetAccessLog())
	if err != nil {
		t.Fatalf("the library refuses the access_log: %v", err)
	}
	if got := len(cfg.Loggers()); got != 3 {
		t.Fatalf("%d loggers, want 3", got)
	}

	// Served: the server writes the file logger's lines.
	path := filepath.Join(dir, "resources.json")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, logs, _ := serveFromControlPlane(ctx, t, path, lis)
	logs.waitFor(ctx, t, `"controlplane-test" applied (ACK) Listener version 1`)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := empty(metadata.AppendToOutgoingContext(ctx, "x-who", "alice"), testgrpc.NewTestServiceClient(conn)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	srv.GracefulStop() // writes the last lines
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(b)), "/grpc.testing.TestService/EmptyCall OK - via_upstream everything who=alice"; got != want {
		t.Errorf("access log:\n got %q\nwant %q", got, want)
	}
}

// TestProgramLinksEveryType: the program itself (not only this test, which
// links the library) resolves the "@type" of every config the library
// accepts in a Listener: each HTTP filter's config and per-route override,
// and each access logger. protojson resolves only the types linked into
// the program, so a type missing here is a file the program rejects.
func TestProgramLinksEveryType(t *testing.T) {
	urls := []string{
		"type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
		"type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
		"type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog",
		"type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
	}
	for _, f := range builtin.Registry.Filters() {
		urls = append(urls, f.ConfigTypeURLs()...)
		urls = append(urls, f.OverrideTypeURLs()...)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := map[string]bool{}
	for _, d := range strings.Fields(string(out)) {
		deps[d] = true
	}
	for _, u := range urls {
		mt, err := protoregistry.GlobalTypes.FindMessageByURL(u)
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		if pkg := reflect.TypeOf(mt.Zero().Interface()).Elem().PkgPath(); !deps[pkg] {
			t.Errorf("the program does not link %s (package %s): a resources file using it is rejected", u, pkg)
		}
	}
}

// TestREADMEAccessLogExample: the README's access_log example is valid to
// the library.
func TestREADMEAccessLogExample(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "### Example: an access log")
	if !ok {
		t.Fatal("README.md has no access log example")
	}
	_, rest, _ = strings.Cut(rest, "```json\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("the README's access log example has no JSON block")
	}
	hcm := &hcmpb.HttpConnectionManager{}
	if err := protojson.Unmarshal([]byte("{"+block+"}"), hcm); err != nil {
		t.Fatalf("the README's example does not parse: %v", err)
	}
	if _, err := accesslog.Compile(hcm.GetAccessLog()); err != nil {
		t.Fatalf("the library refuses the README's example: %v", err)
	}
}
