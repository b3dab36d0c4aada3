package accesslog_test

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	streampb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
)

// Envoy's documented example of its default format
// (docs/root/configuration/observability/access_log/usage.rst), for the
// request it describes: the same line, but for %UPSTREAM_HOST%, which a
// server that is the end of the stream does not have.
func TestEnvoyDefaultFormatExample(t *testing.T) {
	r := &accesslog.Record{
		StartTime:       time.Date(2016, 4, 15, 20, 17, 0, 310_500_000, time.UTC),
		Duration:        226*time.Millisecond + 900*time.Microsecond,
		FullMethod:      "/api/v1/locations",
		Authority:       "locations",
		RequestHeaders:  map[string][]string{"x-forwarded-for": {"10.0.35.28"}, "user-agent": {"nsq2http"}, "x-request-id": {"cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2"}},
		ResponseHeaders: map[string][]string{"x-envoy-upstream-service-time": {"100"}},
		ResponseCode:    204,
		BytesReceived:   154,
	}
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{logOf(t, &filepb.FileAccessLog{Path: "/dev/stdout"}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	want := `[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "-"` + "\n"
	if got := string(cfg.Loggers()[0].AppendLine(nil, r)); got != want {
		t.Errorf("default format:\n got %q\nwant %q", got, want)
	}
	// The deprecated format field, empty, and a stream logger without a
	// format are the default format too.
	for _, l := range []*accesslogpb.AccessLog{
		logOf(t, &filepb.FileAccessLog{Path: "/tmp/a", AccessLogFormat: &filepb.FileAccessLog_Format{}}, nil),
		logOf(t, &streampb.StdoutAccessLog{}, nil),
	} {
		cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{l})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(cfg.Loggers()[0].AppendLine(nil, r)); got != want {
			t.Errorf("default format:\n got %q\nwant %q", got, want)
		}
	}
}

// Istio's default access log, for an RPC the sidecar-less server answered,
// and for one its RBAC filter refused: the lines an Istio sidecar writes
// for them.
func TestIstioDefault(t *testing.T) {
	cfg := accesslog.IstioDefault()
	if n := len(cfg.Loggers()); n != 1 || cfg.Loggers()[0].Path != "/dev/stdout" {
		t.Fatalf("IstioDefault has %d loggers (%v), want one on /dev/stdout", n, cfg.Loggers())
	}
	l := cfg.Loggers()[0]
	ok := &accesslog.Record{
		StartTime:           time.Date(2026, 5, 6, 7, 8, 9, 10_000_000, time.UTC),
		Duration:            3 * time.Millisecond,
		FullMethod:          "/helloworld.Greeter/SayHello",
		Authority:           "greeter.default.svc.cluster.local:50051",
		RequestHeaders:      map[string][]string{"user-agent": {"grpc-go/1.85.0"}, "x-request-id": {"9b3f"}},
		ResponseCode:        200,
		HasGRPCStatus:       true,
		ResponseCodeDetails: accesslog.DetailsViaUpstream,
		BytesReceived:       12,
		BytesSent:           17,
		Remote:              netip.MustParseAddrPort("10.244.0.15:33064"),
		Local:               netip.MustParseAddrPort("10.244.0.14:50051"),
		ServerName:          "greeter.default.svc.cluster.local",
		RouteName:           "default",
	}
	want := `[2026-05-06T07:08:09.010Z] "POST /helloworld.Greeter/SayHello HTTP/2" 200 - via_upstream - "-" 12 17 3 - "-" "grpc-go/1.85.0" "9b3f" "greeter.default.svc.cluster.local:50051" "-" - - 10.244.0.14:50051 10.244.0.15:33064 greeter.default.svc.cluster.local default` + "\n"
	if got := string(l.AppendLine(nil, ok)); got != want {
		t.Errorf("an RPC answered:\n got %q\nwant %q", got, want)
	}
	denied := *ok
	denied.GRPCStatus, denied.TrailersOnly, denied.BytesSent, denied.Duration = 7, true, 0, 0
	denied.ResponseCodeDetails = accesslog.RBACDenied("")
	want = `[2026-05-06T07:08:09.010Z] "POST /helloworld.Greeter/SayHello HTTP/2" 200 - rbac_access_denied_matched_policy[none] - "-" 12 0 0 - "-" "grpc-go/1.85.0" "9b3f" "greeter.default.svc.cluster.local:50051" "-" - - 10.244.0.14:50051 10.244.0.15:33064 greeter.default.svc.cluster.local default` + "\n"
	if got := string(l.AppendLine(nil, &denied)); got != want {
		t.Errorf("an RPC RBAC denied:\n got %q\nwant %q", got, want)
	}
	if accesslog.IstioDefault() != cfg {
		t.Errorf("IstioDefault compiles again")
	}
}

// decode parses a JSON line, failing on anything but one object and a
// newline.
func decode(t *testing.T, line []byte) map[string]any {
	t.Helper()
	if len(line) == 0 || line[len(line)-1] != '\n' {
		t.Fatalf("line %q does not end with a newline", line)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("line %q is not JSON: %v", line, err)
	}
	return m
}

// Envoy's documented JSON example (usage.rst), as log_format.json_format
// (typed: the duration is a number) and as the deprecated
// FileAccessLog.json_format (every value a string), parsed back.
func TestJSONEnvoyExample(t *testing.T) {
	r := &accesslog.Record{Duration: 123 * time.Millisecond, RequestHeaders: map[string][]string{"my_custom_header": {"value_of_MY_CUSTOM_HEADER"}}}
	fields := map[string]any{"protocol": "%PROTOCOL%", "duration": "%DURATION%", "my_custom_header": "%REQ(MY_CUSTOM_HEADER)%"}
	typed := compileOne(t, accesslogcfg.JSONFormat(t, fields), nil)
	if got, want := decode(t, typed.AppendLine(nil, r)), map[string]any{"protocol": "HTTP/2", "duration": 123.0, "my_custom_header": "value_of_MY_CUSTOM_HEADER"}; !reflect.DeepEqual(got, want) {
		t.Errorf("typed: %v, want %v", got, want)
	}
	s, _ := structpb.NewStruct(fields)
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{logOf(t, &filepb.FileAccessLog{Path: "/tmp/x", AccessLogFormat: &filepb.FileAccessLog_JsonFormat{JsonFormat: s}}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	line := cfg.Loggers()[0].AppendLine(nil, r)
	if got, want := decode(t, line), map[string]any{"protocol": "HTTP/2", "duration": "123", "my_custom_header": "value_of_MY_CUSTOM_HEADER"}; !reflect.DeepEqual(got, want) {
		t.Errorf("untyped: %v, want %v", got, want)
	}
	// Keys in Envoy's order: sorted.
	if want := `{"duration":"123","my_custom_header":"value_of_MY_CUSTOM_HEADER","protocol":"HTTP/2"}` + "\n"; string(line) != want {
		t.Errorf("untyped line %q, want %q", line, want)
	}
	cfg, err = accesslog.Compile([]*accesslogpb.AccessLog{logOf(t, &filepb.FileAccessLog{Path: "/tmp/x", AccessLogFormat: &filepb.FileAccessLog_TypedJsonFormat{TypedJsonFormat: s}}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(cfg.Loggers()[0].AppendLine(nil, r)), string(typed.AppendLine(nil, r)); got != want {
		t.Errorf("typed_json_format %q, want log_format.json_format's %q", got, want)
	}
}

// Nested objects and lists, literals of every JSON type, strings mixing
// operators and text, values that need escaping, and unset values.
func TestJSONNested(t *testing.T) {
	r := fullRecord(t)
	r.RequestHeaders["x-ctl"] = []string{"a\nb\"c\\\x01\xff"}
	l := compileOne(t, accesslogcfg.JSONFormat(t, map[string]any{
		"request": map[string]any{
			"method": "%REQ(:METHOD)%",
			"path":   "%REQ(:PATH)%",
			"ids":    []any{"%STREAM_ID%", "%REQ(X-MISSING)%", 7.5, true, nil},
			"ctl":    "%REQ(X-CTL)%",
		},
		"status":  "%GRPC_STATUS(NUMBER)% (%GRPC_STATUS%)",
		"mixed":   "%REQ(X-MISSING)%/%RESPONSE_CODE%",
		"percent": "100%%",
		"plain":   "no operator",
		"big":     1e21,
		"code":    "%RESPONSE_CODE%",
		"absent":  "%UPSTREAM_HOST%",
	}), nil)
	line := l.AppendLine(nil, r)
	got := decode(t, line)
	want := map[string]any{
		"request": map[string]any{
			"method": "POST",
			"path":   "/helloworld.Greeter/SayHello",
			"ids":    []any{"cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2", nil, 7.5, true, nil},
			"ctl":    "a\nb\"c\\\x01\ufffd",
		},
		"status":  "5 (NotFound)",
		"mixed":   "-/200",
		"percent": "100%",
		"plain":   "no operator",
		"big":     1e21,
		"code":    200.0,
		"absent":  nil,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v\nline %s", got, want, line)
	}
}

// omit_empty_values: null members and elements go, and so does an object
// left empty (but not the root, nor an array); in text formats, an unset
// operator prints nothing.
func TestOmitEmptyValues(t *testing.T) {
	r := &accesslog.Record{ResponseCode: 200}
	f := accesslogcfg.JSONFormat(t, map[string]any{
		"code":   "%RESPONSE_CODE%",
		"host":   "%UPSTREAM_HOST%",
		"nested": map[string]any{"a": "%REQ(X-A)%", "b": map[string]any{"c": "%ROUTE_NAME%"}},
		"list":   []any{"%REQ(X-A)%", nil},
		"mixed":  "[%REQ(X-A)%]",
		"null":   nil,
	})
	f.OmitEmptyValues = true
	if got, want := string(compileOne(t, f, nil).AppendLine(nil, r)), `{"code":200,"list":[],"mixed":"[]"}`+"\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	empty := accesslogcfg.JSONFormat(t, map[string]any{"host": "%UPSTREAM_HOST%"})
	empty.OmitEmptyValues = true
	if got := string(compileOne(t, empty, nil).AppendLine(nil, r)); got != "{}\n" {
		t.Errorf("got %q, want {}", got)
	}
	text := accesslogcfg.TextFormat("[%UPSTREAM_HOST%][%RESPONSE_CODE%]")
	text.OmitEmptyValues = true
	if got := string(compileOne(t, text, nil).AppendLine(nil, r)); got != "[][200]" {
		t.Errorf("got %q, want [][200]", got)
	}
}

// The deprecated text_format field and inline_bytes are formats too; so is
// a format in an environment variable, read when the config is compiled.
func TestFormatSources(t *testing.T) {
	r := &accesslog.Record{ResponseCode: 200}
	for _, f := range []*corepb.SubstitutionFormatString{
		{Format: &corepb.SubstitutionFormatString_TextFormat{TextFormat: "code=%RESPONSE_CODE%"}},
		{Format: &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{
			Specifier: &corepb.DataSource_InlineBytes{InlineBytes: []byte("code=%RESPONSE_CODE%")}}}},
		{Format: &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{
			Specifier: &corepb.DataSource_EnvironmentVariable{EnvironmentVariable: "FMT"}}}},
	} {
		cfg, err := accesslog.CompileWithEnv(map[string]string{"FMT": "code=%RESPONSE_CODE%"}, "")([]*accesslogpb.AccessLog{logOf(t, stdout(f), nil)})
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if got := string(cfg.Loggers()[0].AppendLine(nil, r)); got != "code=200" {
			t.Errorf("%v: %q, want code=200", f, got)
		}
	}
}

// A text format is written as it is: no newline added.
func TestTextFormatAsIs(t *testing.T) {
	l := compileOne(t, accesslogcfg.TextFormat("%RESPONSE_CODE%"), nil)
	if got := string(l.AppendLine([]byte("x"), &accesslog.Record{ResponseCode: 200})); got != "x200" {
		t.Errorf("got %q, want x200", got)
	}
	if strings.Contains(accesslog.IstioFormat, "%%") {
		t.Errorf("IstioFormat has an escaped percent")
	}
}
