package e2e_test

// End-to-end tests of the access logs: the HttpConnectionManager's
// access_log and xds.AccessLogFile, for RPCs the handler answered and those
// the filters or the routing refused, in the tap or after it, each with
// Envoy's response flags and details.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// fileLog is an access_log entry writing format to path.
func fileLog(t testing.TB, path, format string) *accesslogpb.AccessLog {
	t.Helper()
	return &accesslogpb.AccessLog{Name: "file", ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, &filepb.FileAccessLog{
		Path: path,
		AccessLogFormat: &filepb.FileAccessLog_LogFormat{LogFormat: &corepb.SubstitutionFormatString{
			Format: &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{
				Specifier: &corepb.DataSource_InlineString{InlineString: format}}}}},
	})}}
}

// loggingListener returns l with its first chain's HttpConnectionManager
// logging with logs.
func loggingListener(t testing.TB, l *listenerpb.Listener, logs ...*accesslogpb.AccessLog) *listenerpb.Listener {
	t.Helper()
	hcm := &hcmpb.HttpConnectionManager{}
	if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	hcm.AccessLog = logs
	l.FilterChains[0].Filters[0].ConfigType = &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)}
	return l
}

// logLines returns the lines of the file at path, waiting until it has at
// least n (the log is written on its own goroutine).
func logLines(ctx context.Context, t *testing.T, path string, n int) []string {
	t.Helper()
	var lines []string
	waitFor(ctx, t, "access log lines", func() bool {
		b, _ := os.ReadFile(path)
		lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(b) == 0 {
			lines = nil
		}
		return len(lines) >= n
	})
	return lines
}

// lineOf returns the line of lines that has the word c (an x-case).
func lineOf(t *testing.T, lines []string, c string) string {
	t.Helper()
	for _, l := range lines {
		if strings.Contains(l, " case="+c+" ") {
			return l
		}
	}
	t.Fatalf("no access log line for case %q in:\n%s", c, strings.Join(lines, "\n"))
	return ""
}

// TestAccessLog_Outcomes: one line per RPC, for every way an RPC ends: the
// handler's answer (via_upstream), an RBAC denial (its policy named), an
// ext_authz denial (UAEX), a local rate limit (RL), a route that does not
// serve RPCs (NR), each with its status; the request headers as the filters
// left them (the authorization server's x-user), the route and the chain.
func TestAccessLog_Outcomes(t *testing.T) {
	ctx := testContext(t)
	a := startAuthzServer(t)
	env := authzEnv(t, false, a.addr)
	a.set(func(_ context.Context, req *authpb.CheckRequest) (*authpb.CheckResponse, error) {
		if headerMapOf(req.GetAttributes().GetRequest().GetHttp())[caseHeader][0] == "authz" {
			return deniedResponse(typepb.StatusCode_Forbidden, "no"), nil
		}
		return okResponse(overwrite("x-user", "alice")), nil
	})
	path := filepath.Join(t.TempDir(), "access.log")
	const format = "%RESPONSE_CODE% %GRPC_STATUS% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% case=%REQ(X-CASE)% user=%REQ(X-USER)% route=%ROUTE_NAME% chain=%FILTER_CHAIN_NAME%\n"
	rbac := rbacRules(rbacconfigpb.RBAC_DENY, map[string]*rbacconfigpb.Policy{"deny-mallory": {
		Permissions: []*rbacconfigpb.Permission{anyPermission()},
		Principals:  []*rbacconfigpb.Principal{headerPrincipal("x-user", "mallory")},
	}})
	rc := allRoutes("routes")
	rc.VirtualHosts[0].Routes[0].Name = "all"
	rc.VirtualHosts[0].Routes = append([]*routepb.Route{clientRoute(pathMatch(methodUnary))}, rc.VirtualHosts[0].Routes...)
	filters := []*hcmpb.HttpFilter{
		httpFilter(t, "rbac", rbac),
		httpFilter(t, "authz", extAuthz(a.addr)),
		httpFilter(t, "local", rateLimit("one", 1)),
	}
	s, addr := startServing(ctx, t, env, func(addr net.Addr) *listenerpb.Listener {
		return loggingListener(t, filtersListener(addr, filters, rc, ""), fileLog(t, path, format))
	}, nil)
	c := connected(ctx, t, addr)
	for _, tc := range []struct {
		name, method string
		kv           []string
	}{
		{name: "ok", method: "EmptyCall"},
		{name: "rbac", method: "EmptyCall", kv: []string{"x-user", "mallory"}},
		{name: "authz", method: "EmptyCall"},
		{name: "limited", method: "EmptyCall"},
		{name: "route", method: "UnaryCall"},
	} {
		rpcResult(withCase(ctx, tc.name, tc.kv...), c, tc.method)
	}
	lines := logLines(ctx, t, path, 5)
	for _, tc := range []struct{ name, want string }{
		{"ok", "200 OK - via_upstream case=ok user=alice route=all chain=filters-chain"},
		{"rbac", "200 PermissionDenied - rbac_access_denied_matched_policy[deny-mallory] case=rbac user=mallory route=all chain=filters-chain"},
		{"authz", "200 PermissionDenied UAEX ext_authz_denied case=authz user=- route=all chain=filters-chain"},
		{"limited", "200 Unavailable RL local_rate_limited case=limited user=alice route=all chain=filters-chain"},
		{"route", "200 Unavailable NR route_not_non_forwarding case=route user=- route=- chain=filters-chain"},
	} {
		if got := lineOf(t, lines, tc.name); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
	s.GracefulStop()
}

// TestAccessLogFile: xds.AccessLogFile writes Istio's default line for
// every RPC of every chain, without any access_log from the control plane,
// and the last lines are written when the server stops.
func TestAccessLogFile(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	path := filepath.Join(t.TempDir(), "istio.log")
	s, addr := startServing(ctx, t, env, simpleListener, nil, xds.AccessLogFile(path))
	c := newClient(t, addr, "127.0.0.1", 0)
	if code := c.emptyCall(ctx); code != 0 {
		t.Fatalf("EmptyCall: %v", code)
	}
	s.GracefulStop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(b))
	for _, want := range []string{`"POST /grpc.testing.TestService/EmptyCall HTTP/2" 200 - via_upstream - "-" 5 5 `, addr.String()} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
}

// TestAccessLog_NotRecordedOperator: an operator Envoy would give a value
// that this server does not record is no reason to NACK the Listener: it
// serves, the operator prints "-", and a warning names it, with why.
func TestAccessLog_NotRecordedOperator(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	path := filepath.Join(t.TempDir(), "access.log")
	var name string
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		l := loggingListener(t, simpleListener(a), fileLog(t, path, "%REQ(:PATH)% %DYNAMIC_METADATA(envoy.filters.http.rbac:shadow_effective_policy_id)% %REQUEST_DURATION% %GRPC_STATUS%\n"))
		name = l.GetName()
		return l
	}, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	if code := c.emptyCall(ctx); code != 0 {
		t.Fatalf("EmptyCall: %v", code)
	}
	if got, want := logLines(ctx, t, path, 1)[0], "/grpc.testing.TestService/EmptyCall - - OK"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	logs.WaitCount(ctx, t, 1, "W", name, `operators this server does not record print "-"`,
		"%DYNAMIC_METADATA% (the server's filters set no dynamic metadata)", "%REQUEST_DURATION%")
	s.GracefulStop()
}
