package e2e_test

// End-to-end tests of the access log's filters and loggers: which RPCs each
// filter lets through, for RPCs that succeed, fail, take long or are
// cancelled by their client; and the lines of the stdout, stderr and file
// loggers.

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	accesslogdatapb "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	streampb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
)

func exactHeader(name, value string, invert bool) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, InvertMatch: invert, HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: exactString(value)}}
}

// TestAccessLog_Filters: each filter, alone or combined, logs exactly the
// RPCs Envoy's would, out of five: one OK (with an x-request-id whose
// first 8 hex digits are 0), one NOT_FOUND (x-request-id ffffffff...),
// one that takes 300 ms, one its client cancels (no status: response code
// 0, flag DR, gRPC status UNKNOWN to the filters as to Envoy's), and an OK
// bidi stream.
func TestAccessLog_Filters(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	const (
		EQ = accesslogpb.ComparisonFilter_EQ
		GE = accesslogpb.ComparisonFilter_GE
		LE = accesslogpb.ComparisonFilter_LE
		NE = accesslogpb.ComparisonFilter_NE
	)
	all := []string{"ok", "notfound", "slow", "cancel", "stream"}
	tests := []struct {
		name   string
		filter *accesslogpb.AccessLogFilter
		want   []string
	}{
		{"status_code EQ 200", accesslogcfg.StatusCode(EQ, 200), []string{"ok", "notfound", "slow", "stream"}},
		{"status_code NE 200", accesslogcfg.StatusCode(NE, 200), []string{"cancel"}},
		{"status_code LE 0", accesslogcfg.StatusCode(LE, 0), []string{"cancel"}},
		{"status_code GE 201", accesslogcfg.StatusCode(GE, 201), nil},
		{"duration GE 250", accesslogcfg.Duration(GE, 250), []string{"slow"}},
		{"duration LE 249", accesslogcfg.Duration(LE, 249), []string{"ok", "notfound", "cancel", "stream"}},
		{"runtime 100%", accesslogcfg.Runtime(100, typepb.FractionalPercent_HUNDRED, false), all},
		{"runtime 0%", accesslogcfg.Runtime(0, typepb.FractionalPercent_HUNDRED, false), nil},
		{"runtime 100% independent", accesslogcfg.Runtime(100, typepb.FractionalPercent_HUNDRED, true), all},
		// 50%: by the x-request-id's first 8 hex digits, 0 is sampled and
		// 0xffffffff (4294967295 % 100 = 95) is not; the RPCs without one
		// draw at random, so the and_filter leaves them out.
		{"runtime 50% of x-request-id", accesslogcfg.And(accesslogcfg.Header(&routepb.HeaderMatcher{Name: "x-request-id", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}), accesslogcfg.Runtime(50, typepb.FractionalPercent_HUNDRED, false)), []string{"ok"}},
		{"grpc_status NOT_FOUND", accesslogcfg.GRPCStatus(false, accesslogpb.GrpcStatusFilter_NOT_FOUND), []string{"notfound"}},
		{"grpc_status OK excluded", accesslogcfg.GRPCStatus(true, accesslogpb.GrpcStatusFilter_OK), []string{"notfound", "cancel"}},
		{"grpc_status UNKNOWN", accesslogcfg.GRPCStatus(false, accesslogpb.GrpcStatusFilter_UNKNOWN), []string{"cancel"}},
		{"grpc_status CANCELED", accesslogcfg.GRPCStatus(false, accesslogpb.GrpcStatusFilter_CANCELED), nil},
		{"header x-case", accesslogcfg.Header(exactHeader(caseHeader, "stream", false)), []string{"stream"}},
		{"header :path inverted", accesslogcfg.Header(exactHeader(":path", methodStream, true)), []string{"ok", "notfound", "slow", "cancel"}},
		{"response_flag DR", accesslogcfg.Flags("DR"), []string{"cancel"}},
		{"response_flag any", accesslogcfg.Flags(), []string{"cancel"}},
		{"response_flag RL", accesslogcfg.Flags("RL", "UAEX"), nil},
		{"and", accesslogcfg.And(accesslogcfg.StatusCode(EQ, 200), accesslogcfg.Duration(LE, 249), accesslogcfg.Header(exactHeader(caseHeader, "stream", true))), []string{"ok", "notfound"}},
		{"or", accesslogcfg.Or(accesslogcfg.GRPCStatus(false, accesslogpb.GrpcStatusFilter_NOT_FOUND), accesslogcfg.Duration(GE, 250)), []string{"notfound", "slow"}},
		{"not_health_check", &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_NotHealthCheckFilter{NotHealthCheckFilter: &accesslogpb.NotHealthCheckFilter{}}}, all},
		{"traceable", &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_TraceableFilter{TraceableFilter: &accesslogpb.TraceableFilter{}}}, nil},
		{"log_type DownstreamEnd", &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_LogTypeFilter{LogTypeFilter: &accesslogpb.LogTypeFilter{
			Types: []accesslogdatapb.AccessLogType{accesslogdatapb.AccessLogType_DownstreamEnd}}}}, all},
		{"log_type DownstreamStart", &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_LogTypeFilter{LogTypeFilter: &accesslogpb.LogTypeFilter{
			Types: []accesslogdatapb.AccessLogType{accesslogdatapb.AccessLogType_DownstreamStart}}}}, nil},
	}
	dir := t.TempDir()
	var logs []*accesslogpb.AccessLog
	for i, tc := range tests {
		logs = append(logs, fileLogWith(t, tc.name, filepath.Join(dir, strconv.Itoa(i)+".log"), accesslogcfg.TextFormat("%REQ(X-CASE)%\n"), tc.filter))
	}
	started := make(chan string, 1)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return loggingListener(t, simpleListener(a), logs...)
	}, nil, behaviour(started)...)
	c := connected(ctx, t, addr)
	chain := func(ctx context.Context, name string, kv ...string) context.Context {
		return withCase(ctx, name, append([]string{chainHeader, "A"}, kv...)...)
	}
	if code, _ := statusOf(rpcResult(chain(ctx, "ok", "x-request-id", "00000000-0000-4000-8000-000000000000"), c, "EmptyCall")); code != codes.OK {
		t.Fatalf("ok: %v", code)
	}
	if code, _ := statusOf(rpcResult(chain(ctx, "notfound", "x-request-id", "ffffffff-0000-4000-8000-000000000000", hdrFail, "5"), c, "EmptyCall")); code != codes.NotFound {
		t.Fatalf("notfound: %v", code)
	}
	if code, _ := statusOf(rpcResult(chain(ctx, "slow", hdrSleep, "300ms"), c, "EmptyCall")); code != codes.OK {
		t.Fatalf("slow: %v", code)
	}
	<-started
	cctx, cancel := context.WithCancel(chain(ctx, "cancel", hdrSleep, "1m"))
	go func() {
		<-started
		cancel()
	}()
	if code, _ := statusOf(rpcResult(cctx, c, "EmptyCall")); code != codes.Canceled {
		t.Fatalf("cancel: %v", code)
	}
	if code, _ := statusOf(rpcResult(chain(ctx, "stream"), c, "FullDuplexCall")); code != codes.OK {
		t.Fatalf("stream: %v", code)
	}
	s.GracefulStop() // writes the last lines
	for i, tc := range tests {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)+".log"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		got := linesOf(string(b))
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: logged %q, want %q", tc.name, got, want)
		}
	}
}

// capture replaces *f (os.Stdout or os.Stderr) with a pipe until the
// returned function is called; read returns what was written to the pipe
// once its writer is closed.
func capture(t *testing.T, f **os.File) (restore func(), read func() string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := *f
	*f = w
	var buf bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(&buf, r)
	}()
	var once sync.Once
	restoreFn := func() { once.Do(func() { *f = saved }) }
	t.Cleanup(restoreFn)
	return restoreFn, func() string {
		w.Close()
		wg.Wait()
		r.Close()
		return buf.String()
	}
}

// TestAccessLog_Loggers: StdoutAccessLog, StderrAccessLog and
// FileAccessLog (on a file, and on /dev/stdout, which is the process's
// standard output like StdoutAccessLog) each write their lines, one per
// RPC, unary and streaming; a logger without a format writes Envoy's
// default line.
func TestAccessLog_Loggers(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	path := filepath.Join(t.TempDir(), "file.log")
	// The server takes the process's standard streams when it is created.
	restoreOut, readOut := capture(t, &os.Stdout)
	restoreErr, readErr := capture(t, &os.Stderr)
	s := env.newServer(t, behaviour(nil)...)
	restoreOut()
	restoreErr()
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	addr := lis.Addr()
	env.update(ctx, t, []*listenerpb.Listener{loggingListener(t, simpleListener(addr),
		stdoutLog(t, "stdout %REQ(X-CASE)% %GRPC_STATUS%\n"),
		stderrLog(t, "stderr %REQ(X-CASE)% %GRPC_STATUS%\n"),
		fileLogWith(t, "file", path, accesslogcfg.TextFormat("file %REQ(X-CASE)% %GRPC_STATUS%\n"), nil),
		&accesslogpb.AccessLog{Name: "file on stdout", ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, &filepb.FileAccessLog{
			Path: "/dev/stdout", AccessLogFormat: &filepb.FileAccessLog_Format{Format: "dev-stdout %REQ(X-CASE)% %GRPC_STATUS%\n"}})}},
		&accesslogpb.AccessLog{Name: "default", Filter: accesslogcfg.Header(exactHeader(caseHeader, "unary", false)),
			ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, &streampb.StderrAccessLog{})}},
	)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	c := connected(ctx, t, addr)
	for _, m := range []string{"EmptyCall", "FullDuplexCall"} {
		name := map[string]string{"EmptyCall": "unary", "FullDuplexCall": "stream"}[m]
		if err := rpcResult(withCase(ctx, name, chainHeader, "A", "x-request-id", "rid-"+name), c, m); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	s.GracefulStop()
	out, errOut := readOut(), readErr()
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sorted := func(s string) []string {
		l := linesOf(s)
		slices.Sort(l)
		return l
	}
	if got, want := sorted(out), []string{"dev-stdout stream OK", "dev-stdout unary OK", "stdout stream OK", "stdout unary OK"}; !slices.Equal(got, want) {
		t.Errorf("standard output: %q, want %q", got, want)
	}
	if got, want := sorted(string(file)), []string{"file stream OK", "file unary OK"}; !slices.Equal(got, want) {
		t.Errorf("file: %q, want %q", got, want)
	}
	errLines := sorted(errOut)
	// Envoy's default format, for the unary RPC.
	defaultLine := regexp.MustCompile(`^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "POST /grpc\.testing\.TestService/EmptyCall HTTP/2" 200 - 5 5 \d+ - "-" "grpc-go/[^"]+" "rid-unary" "` +
		regexp.QuoteMeta(addr.String()) + `" "-"$`)
	if len(errLines) != 3 || !defaultLine.MatchString(errLines[0]) || errLines[1] != "stderr stream OK" || errLines[2] != "stderr unary OK" {
		t.Errorf("standard error: %q, want Envoy's default line for the unary RPC, then %q", errLines, []string{"stderr stream OK", "stderr unary OK"})
	}
}
