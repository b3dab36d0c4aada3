package accesslog_test

import (
	"errors"
	"strings"
	"testing"

	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	accesslogdatapb "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	grpclogpb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	streampb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestDeps: internal/accesslog is pure (ARCHITECTURE.md, "Packages"):
// filterchain compiles it.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/accesslog", append([]string{
		mod + "$",
		mod + "/internal/server",
		mod + "/internal/filterchain",
		mod + "/internal/metrics",
	}, testutils.PureForbidden...)...)
}

func anyOf(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// logOf is an AccessLog with typed config m and filter f (nil: none).
func logOf(t testing.TB, m proto.Message, f *accesslogpb.AccessLogFilter) *accesslogpb.AccessLog {
	return &accesslogpb.AccessLog{Name: "log", Filter: f, ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, m)}}
}

func stdout(f *corepb.SubstitutionFormatString) *streampb.StdoutAccessLog {
	return &streampb.StdoutAccessLog{AccessLogFormat: &streampb.StdoutAccessLog_LogFormat{LogFormat: f}}
}

// compileOne compiles one stdout logger with format f and filter flt.
func compileOne(t testing.TB, f *corepb.SubstitutionFormatString, flt *accesslogpb.AccessLogFilter) *accesslog.Logger {
	t.Helper()
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{logOf(t, stdout(f), flt)})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return cfg.Loggers()[0]
}

// Every invalid config is an error that names the field from the list
// down, and says what is wrong.
func TestCompileErrors(t *testing.T) {
	good := logOf(t, stdout(accesslogcfg.TextFormat("ok\n")), nil)
	text := func(s string) []*accesslogpb.AccessLog {
		return []*accesslogpb.AccessLog{good, logOf(t, stdout(accesslogcfg.TextFormat(s)), nil)}
	}
	const textPath = "[1].typed_config.log_format.text_format_source.inline_string"
	withFilter := func(f *accesslogpb.AccessLogFilter) []*accesslogpb.AccessLog {
		return []*accesslogpb.AccessLog{logOf(t, &streampb.StdoutAccessLog{}, f)}
	}
	cmp := func(op accesslogpb.ComparisonFilter_Op, v *corepb.RuntimeUInt32) *accesslogpb.ComparisonFilter {
		return &accesslogpb.ComparisonFilter{Op: op, Value: v}
	}
	status := func(c *accesslogpb.ComparisonFilter) *accesslogpb.AccessLogFilter {
		return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogpb.StatusCodeFilter{Comparison: c}}}
	}
	ok := status(cmp(accesslogpb.ComparisonFilter_GE, &corepb.RuntimeUInt32{DefaultValue: 500, RuntimeKey: "k"}))
	for _, tc := range []struct {
		desc      string
		logs      []*accesslogpb.AccessLog
		wantPath  string
		wantError string
	}{
		{"no typed_config", []*accesslogpb.AccessLog{{Name: "x"}}, "[0].typed_config", "missing, want envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"},
		{"unsupported logger", []*accesslogpb.AccessLog{logOf(t, &grpclogpb.HttpGrpcAccessLogConfig{}, nil)}, "[0].typed_config",
			`unsupported access logger type "envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig", want envoy.extensions.access_loggers.stream.v3.StdoutAccessLog, envoy.extensions.access_loggers.stream.v3.StderrAccessLog or envoy.extensions.access_loggers.file.v3.FileAccessLog`},
		{"malformed logger", []*accesslogpb.AccessLog{{ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: &anypb.Any{
			TypeUrl: "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog", Value: []byte{0xff}}}}}, "[0].typed_config", "malformed FileAccessLog"},
		{"file without path", []*accesslogpb.AccessLog{logOf(t, &filepb.FileAccessLog{}, nil)}, "[0].typed_config.path", "empty, want a file path"},
		{"file path with NUL", []*accesslogpb.AccessLog{logOf(t, &filepb.FileAccessLog{Path: "a\x00b"}, nil)}, "[0].typed_config.path", "contains NUL"},
		{"formatters", []*accesslogpb.AccessLog{logOf(t, stdout(&corepb.SubstitutionFormatString{
			Format:     &corepb.SubstitutionFormatString_TextFormat{TextFormat: "x"},
			Formatters: []*corepb.TypedExtensionConfig{{Name: "envoy.formatter.cel"}}}), nil)},
			"[0].typed_config.log_format.formatters", "formatter extensions are not supported"},
		{"content_type with a newline", []*accesslogpb.AccessLog{logOf(t, stdout(&corepb.SubstitutionFormatString{
			Format: &corepb.SubstitutionFormatString_TextFormat{TextFormat: "x"}, ContentType: "a\nb"}), nil)},
			"[0].typed_config.log_format.content_type", "contains NUL, CR or LF"},
		{"no format", []*accesslogpb.AccessLog{logOf(t, stdout(&corepb.SubstitutionFormatString{OmitEmptyValues: true}), nil)},
			"[0].typed_config.log_format.format", "missing"},
		{"format from a file", []*accesslogpb.AccessLog{logOf(t, stdout(&corepb.SubstitutionFormatString{Format: &corepb.SubstitutionFormatString_TextFormatSource{
			TextFormatSource: &corepb.DataSource{Specifier: &corepb.DataSource_Filename{Filename: "/etc/format"}}}}), nil)},
			"[0].typed_config.log_format.text_format_source.filename", "not supported"},
		{"data source without specifier", []*accesslogpb.AccessLog{logOf(t, stdout(&corepb.SubstitutionFormatString{Format: &corepb.SubstitutionFormatString_TextFormatSource{
			TextFormatSource: &corepb.DataSource{}}}), nil)},
			"[0].typed_config.log_format.text_format_source.specifier", "missing"},
		{"format from an unset variable", []*accesslogpb.AccessLog{logOf(t, stdout(&corepb.SubstitutionFormatString{Format: &corepb.SubstitutionFormatString_TextFormatSource{
			TextFormatSource: &corepb.DataSource{Specifier: &corepb.DataSource_EnvironmentVariable{EnvironmentVariable: "XDS_ACCESSLOG_TEST_UNSET"}}}}), nil)},
			"[0].typed_config.log_format.text_format_source.environment_variable", "is not set"},
		{"json operator", []*accesslogpb.AccessLog{logOf(t, stdout(accesslogcfg.JSONFormat(t, map[string]any{"a": map[string]any{"b": []any{"x", "%FOO%"}}})), nil)},
			`[0].typed_config.log_format.json_format["a"]["b"][1]`, "unknown command operator %FOO%"},
		{"deprecated format", []*accesslogpb.AccessLog{logOf(t, &filepb.FileAccessLog{Path: "/tmp/x", AccessLogFormat: &filepb.FileAccessLog_Format{Format: "%BAD"}}, nil)},
			"[0].typed_config.format", "no valid command operator at position 0"},

		{"unknown operator", text("a %FOO% b"), textPath, "unknown command operator %FOO%"},
		{"lower-case operator", text("%req(:path)%"), textPath, `no valid command operator at position 0: "%req(:path)%"`},
		{"unclosed operator", text("x %REQ(:PATH"), textPath, "no valid command operator at position 2"},
		{"lone percent", text("100%"), textPath, "no valid command operator at position 3"},
		{"empty length", text("%REQ(X):%"), textPath, "no valid command operator"},
		{"parameters to a command without", text("%PROTOCOL(x)%"), textPath, "%PROTOCOL% takes no parameters or length"},
		{"length to a command without", text("%PROTOCOL:3%"), textPath, "%PROTOCOL% takes no parameters or length"},
		{"missing parameters", text("%REQ%"), textPath, "%REQ% requires parameters"},
		{"length not allowed", text("%START_TIME:3%"), textPath, "%START_TIME% does not take a length"},
		{"two alternatives", text("%REQ(a?b?c)%"), textPath, `%REQ%: more than one alternative header in "a?b?c"`},
		{"invalid header name", text("%REQ(a b)%"), textPath, `%REQ%: invalid header name "a b"`},
		{"empty pseudo-header", text("%RESP(:)%"), textPath, `invalid header name ":"`},
		{"grpc status format", text("%GRPC_STATUS(LOWER)%"), textPath, "want CAMEL_STRING, SNAKE_STRING or NUMBER"},
		{"time conversion", text("%START_TIME(%Q)%"), textPath, `unsupported time conversion "%Q"`},
		{"time with a newline", text("%START_TIME(%Y%n)%"), textPath, "newline"},
		{"prefix length", text("%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(129)%"), textPath, "want 0 to 128"},
		{"path mode", text("%PATH(XQ)%"), textPath, "invalid path mode"},
		{"path source", text("%PATH(NQ:HOST)%"), textPath, "invalid path source"},
		{"server name mode", text("%REQUESTED_SERVER_NAME(ALL)%"), textPath, "invalid mode"},

		{"filter without specifier", withFilter(&accesslogpb.AccessLogFilter{}), "[0].filter.filter_specifier", "missing"},
		{"status without comparison", withFilter(status(nil)), "[0].filter.status_code_filter.comparison", "missing"},
		{"status with unknown op", withFilter(status(cmp(7, &corepb.RuntimeUInt32{}))), "[0].filter.status_code_filter.comparison.op", "unknown value 7"},
		{"status without value", withFilter(status(cmp(accesslogpb.ComparisonFilter_EQ, nil))), "[0].filter.status_code_filter.comparison.value", "missing"},
		{"duration without comparison", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_DurationFilter{DurationFilter: &accesslogpb.DurationFilter{}}}),
			"[0].filter.duration_filter.comparison", "missing"},
		{"and of one", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_AndFilter{AndFilter: &accesslogpb.AndFilter{
			Filters: []*accesslogpb.AccessLogFilter{ok}}}}), "[0].filter.and_filter.filters", "holds 1, want at least 2 filters"},
		{"or with a bad filter", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_OrFilter{OrFilter: &accesslogpb.OrFilter{
			Filters: []*accesslogpb.AccessLogFilter{ok, status(nil)}}}}), "[0].filter.or_filter.filters[1].status_code_filter.comparison", "missing"},
		{"header filter without header", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_HeaderFilter{HeaderFilter: &accesslogpb.HeaderFilter{}}}),
			"[0].filter.header_filter.header", "missing"},
		{"header filter without name", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_HeaderFilter{HeaderFilter: &accesslogpb.HeaderFilter{
			Header: &routepb.HeaderMatcher{HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}}}}),
			"[0].filter.header_filter.header.name", "empty"},
		{"unknown flag", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_ResponseFlagFilter{ResponseFlagFilter: &accesslogpb.ResponseFlagFilter{
			Flags: []string{"RL", "XX"}}}}), "[0].filter.response_flag_filter.flags[1]", `unknown flag "XX"`},
		{"unknown gRPC status", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_GrpcStatusFilter{GrpcStatusFilter: &accesslogpb.GrpcStatusFilter{
			Statuses: []accesslogpb.GrpcStatusFilter_Status{accesslogpb.GrpcStatusFilter_OK, 17}}}}), "[0].filter.grpc_status_filter.statuses[1]", "unknown value 17"},
		{"runtime filter without key", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_RuntimeFilter{RuntimeFilter: &accesslogpb.RuntimeFilter{}}}),
			"[0].filter.runtime_filter.runtime_key", "empty"},
		{"runtime filter denominator", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_RuntimeFilter{RuntimeFilter: &accesslogpb.RuntimeFilter{
			RuntimeKey: "k", PercentSampled: &typepb.FractionalPercent{Numerator: 1, Denominator: 9}}}}),
			"[0].filter.runtime_filter.percent_sampled", "denominator: unknown value 9"},
		{"metadata filter", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_MetadataFilter{MetadataFilter: &accesslogpb.MetadataFilter{}}}),
			"[0].filter.metadata_filter", "not supported"},
		{"extension filter", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_ExtensionFilter{ExtensionFilter: &accesslogpb.ExtensionFilter{Name: "cel"}}}),
			"[0].filter.extension_filter", "not supported"},
		{"unknown log type", withFilter(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_LogTypeFilter{LogTypeFilter: &accesslogpb.LogTypeFilter{
			Types: []accesslogdatapb.AccessLogType{99}}}}), "[0].filter.log_type_filter.types[0]", "unknown value 99"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := accesslog.Compile(tc.logs)
			var fe *fieldpath.Error
			if !errors.As(err, &fe) {
				t.Fatalf("Compile: %v, want a fieldpath.Error", err)
			}
			if fe.Path != tc.wantPath || !strings.Contains(fe.Err.Error(), tc.wantError) {
				t.Errorf("Compile: %q, want path %q and %q in the cause", err, tc.wantPath, tc.wantError)
			}
		})
	}
}

// A TypedStruct holding a logger's config is read as the config it holds,
// as elsewhere in xDS.
func TestCompileTypedStruct(t *testing.T) {
	v, err := structpb.NewStruct(map[string]any{"path": "/tmp/access.log"})
	if err != nil {
		t.Fatal(err)
	}
	ts := &xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog", Value: v}
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{{ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, ts)}}})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if got := cfg.Loggers()[0].Path; got != "/tmp/access.log" {
		t.Errorf("Path = %q, want /tmp/access.log", got)
	}
}

// The loggers go where their type says; no logger is no Config.
func TestCompileLoggers(t *testing.T) {
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{
		logOf(t, &streampb.StdoutAccessLog{}, nil),
		logOf(t, &streampb.StderrAccessLog{}, nil),
		logOf(t, &filepb.FileAccessLog{Path: "/var/log/grpc/access.log"}, nil),
		logOf(t, &filepb.FileAccessLog{Path: "/dev/./stderr"}, nil),
		logOf(t, &filepb.FileAccessLog{Path: "/var/log//grpc/access.log"}, nil),
	})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	var paths []string
	for _, l := range cfg.Loggers() {
		paths = append(paths, l.Path)
	}
	if got, want := strings.Join(paths, " "), "/dev/stdout /dev/stderr /var/log/grpc/access.log /dev/stderr /var/log/grpc/access.log"; got != want {
		t.Errorf("paths %q, want %q", got, want)
	}
	if cfg, err := accesslog.Compile(nil); cfg != nil || err != nil {
		t.Errorf("Compile(nil) = %v, %v, want nil, nil", cfg, err)
	}
}

// Configs compile to equal values exactly when they serialize alike.
func TestKeyAndEqual(t *testing.T) {
	a := []*accesslogpb.AccessLog{logOf(t, stdout(accesslogcfg.TextFormat("%PROTOCOL%\n")), nil)}
	b := []*accesslogpb.AccessLog{logOf(t, stdout(accesslogcfg.TextFormat("%PROTOCOL%\n")), nil)}
	c := []*accesslogpb.AccessLog{logOf(t, stdout(accesslogcfg.TextFormat("%DURATION%\n")), nil)}
	ca, _ := accesslog.Compile(a)
	cb, _ := accesslog.Compile(b)
	cc, _ := accesslog.Compile(c)
	if !ca.Equal(cb) || ca.Key() != accesslog.Key(b) {
		t.Errorf("configs of the same bytes are not equal")
	}
	if ca.Equal(cc) {
		t.Errorf("configs of different formats are equal")
	}
}

// TestRequestHeaders: a config reports exactly the request headers its
// formats and filters read, the pseudo-headers aside, so that a server
// copies only those into a Record.
func TestRequestHeaders(t *testing.T) {
	istio := accesslog.IstioDefault()
	if got, want := strings.Join(istio.RequestHeaders(), ","), "user-agent,x-envoy-original-path,x-forwarded-for,x-request-id"; got != want {
		t.Errorf("Istio's default reads %q, want %q", got, want)
	}
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{
		logOf(t, stdout(accesslogcfg.TextFormat("%REQ(X-A?X-B)% %RESP(x-c)% %TRAILER(x-d)% %REQ(:AUTHORITY)% %STREAM_ID%\n")), nil),
		logOf(t, stdout(accesslogcfg.TextFormat("%PROTOCOL%\n")), &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_HeaderFilter{HeaderFilter: &accesslogpb.HeaderFilter{
			Header: &routepb.HeaderMatcher{Name: "x-tenant", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}}}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(cfg.RequestHeaders(), ","), "x-a,x-b,x-request-id,x-tenant"; got != want {
		t.Errorf("RequestHeaders() = %q, want %q", got, want)
	}
	if got := accesslog.Join(cfg, istio).RequestHeaders(); len(got) != 7 {
		t.Errorf("joined: %q, want the 7 headers of both", got)
	}
}
