package e2e_test

// The access log rows of the bad-input matrix (badinput_test.go): each
// invalid access_log of an HttpConnectionManager is NACKed naming its
// field, and the last good Listener keeps serving.

import (
	"testing"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesslogdatapb "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	filelogpb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	grpclogpb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	streamlogpb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// withAccessLog gives the HCM a valid stdout access log, then the one f
// returns (with filter flt, when set).
func withAccessLog(f func(t *testing.T) proto.Message, flt *accesslogpb.AccessLogFilter) mutFn {
	return withHCM(func(t *testing.T, h *hcmpb.HttpConnectionManager) {
		h.AccessLog = []*accesslogpb.AccessLog{
			{Name: "ok", ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, &streamlogpb.StdoutAccessLog{})}},
			{Name: "bad", Filter: flt, ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, f(t))}},
		}
	})
}

// logText is a stdout access log with the inline text format s.
func logText(s string) func(*testing.T) proto.Message {
	return func(*testing.T) proto.Message {
		return &streamlogpb.StdoutAccessLog{AccessLogFormat: &streamlogpb.StdoutAccessLog_LogFormat{LogFormat: &corepb.SubstitutionFormatString{
			Format: &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{
				Specifier: &corepb.DataSource_InlineString{InlineString: s}}}}}}
	}
}

// logFiltered is a stdout access log with the default format, filtered by
// flt.
func logFiltered(flt *accesslogpb.AccessLogFilter) mutFn {
	return withAccessLog(func(*testing.T) proto.Message { return &streamlogpb.StdoutAccessLog{} }, flt)
}

// accessLogField is where the second access log's format is.
const accessLogField = "access_log[1].typed_config.log_format.text_format_source.inline_string"

func accessLogBadCases() []badCase {
	return []badCase{
		{name: "access log unknown operator", mutate: withAccessLog(logText("[%START_TIME%] %FOO%\n"), nil),
			want: []string{accessLogField, "unknown command operator %FOO%"}},
		{name: "access log malformed operator", mutate: withAccessLog(logText("%REQ(:PATH\n"), nil),
			want: []string{accessLogField, "no valid command operator at position 0"}},
		{name: "access log operator syntax", mutate: withAccessLog(logText("%PROTOCOL(x)%"), nil),
			want: []string{accessLogField, "%PROTOCOL% takes no parameters or length"}},
		{name: "access log two alternative headers", mutate: withAccessLog(logText("%REQ(a?b?c)%"), nil),
			want: []string{accessLogField, "more than one alternative header"}},
		{name: "access log bad gRPC status format", mutate: withAccessLog(logText("%GRPC_STATUS(lower)%"), nil),
			want: []string{accessLogField, "CAMEL_STRING, SNAKE_STRING or NUMBER"}},
		{name: "access log bad time format", mutate: withAccessLog(logText("%START_TIME(%Q)%"), nil),
			want: []string{accessLogField, "unsupported time conversion"}},
		{name: "access log unsupported logger", mutate: withAccessLog(func(*testing.T) proto.Message { return &grpclogpb.HttpGrpcAccessLogConfig{} }, nil),
			want: []string{"access_log[1].typed_config", "HttpGrpcAccessLogConfig", "StdoutAccessLog"}},
		{name: "access log without typed_config", mutate: withHCM(func(_ *testing.T, h *hcmpb.HttpConnectionManager) {
			h.AccessLog = []*accesslogpb.AccessLog{{Name: "empty"}}
		}), want: []string{"access_log[0].typed_config", "missing"}},
		{name: "access log file without path", mutate: withAccessLog(func(*testing.T) proto.Message { return &filelogpb.FileAccessLog{} }, nil),
			want: []string{"access_log[1].typed_config.path", "empty"}},
		{name: "access log format from a file", mutate: withAccessLog(func(*testing.T) proto.Message {
			return &filelogpb.FileAccessLog{Path: "/dev/stdout", AccessLogFormat: &filelogpb.FileAccessLog_LogFormat{LogFormat: &corepb.SubstitutionFormatString{
				Format: &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{
					Specifier: &corepb.DataSource_Filename{Filename: "/etc/passwd"}}}}}}
		}, nil), want: []string{"access_log[1].typed_config.log_format.text_format_source.filename", "not supported"}},
		{name: "access log formatter extensions", mutate: withAccessLog(func(*testing.T) proto.Message {
			return &streamlogpb.StdoutAccessLog{AccessLogFormat: &streamlogpb.StdoutAccessLog_LogFormat{LogFormat: &corepb.SubstitutionFormatString{
				Format:     &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{Specifier: &corepb.DataSource_InlineString{InlineString: "%CEL(x)%"}}},
				Formatters: []*corepb.TypedExtensionConfig{{Name: "envoy.formatter.cel"}}}}}
		}, nil), want: []string{"access_log[1].typed_config.log_format.formatters"}},
		{name: "access log JSON operator", mutate: withAccessLog(func(t *testing.T) proto.Message {
			s, err := structpb.NewStruct(map[string]any{"upstream": map[string]any{"host": "%UPSTREAM_HOSTS%"}})
			if err != nil {
				t.Fatal(err)
			}
			return &streamlogpb.StdoutAccessLog{AccessLogFormat: &streamlogpb.StdoutAccessLog_LogFormat{LogFormat: &corepb.SubstitutionFormatString{
				Format: &corepb.SubstitutionFormatString_JsonFormat{JsonFormat: s}}}}
		}, nil), want: []string{`access_log[1].typed_config.log_format.json_format["upstream"]["host"]`, "%UPSTREAM_HOSTS%"}},
		{name: "access log filter without comparison", mutate: logFiltered(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogpb.StatusCodeFilter{}}}),
			want: []string{"access_log[1].filter.status_code_filter.comparison", "missing"}},
		{name: "access log and_filter of one", mutate: logFiltered(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_AndFilter{AndFilter: &accesslogpb.AndFilter{
			Filters: []*accesslogpb.AccessLogFilter{{FilterSpecifier: &accesslogpb.AccessLogFilter_NotHealthCheckFilter{NotHealthCheckFilter: &accesslogpb.NotHealthCheckFilter{}}}}}}}),
			want: []string{"access_log[1].filter.and_filter.filters", "at least 2"}},
		{name: "access log unknown response flag", mutate: logFiltered(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_ResponseFlagFilter{ResponseFlagFilter: &accesslogpb.ResponseFlagFilter{
			Flags: []string{"XX"}}}}), want: []string{"access_log[1].filter.response_flag_filter.flags[0]", `"XX"`}},
		{name: "access log unknown gRPC status", mutate: logFiltered(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_GrpcStatusFilter{GrpcStatusFilter: &accesslogpb.GrpcStatusFilter{
			Statuses: []accesslogpb.GrpcStatusFilter_Status{99}}}}), want: []string{"access_log[1].filter.grpc_status_filter.statuses[0]", "99"}},
		{name: "access log runtime_filter without runtime_key", mutate: logFiltered(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_RuntimeFilter{RuntimeFilter: &accesslogpb.RuntimeFilter{}}}),
			want: []string{"access_log[1].filter.runtime_filter.runtime_key"}},
		{name: "access log header_filter without header", mutate: logFiltered(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_HeaderFilter{HeaderFilter: &accesslogpb.HeaderFilter{}}}),
			want: []string{"access_log[1].filter.header_filter.header", "missing"}},
		{name: "access log metadata_filter", mutate: logFiltered(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_MetadataFilter{MetadataFilter: &accesslogpb.MetadataFilter{}}}),
			want: []string{"access_log[1].filter.metadata_filter", "not supported"}},
		{name: "access log extension_filter", mutate: logFiltered(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_ExtensionFilter{ExtensionFilter: &accesslogpb.ExtensionFilter{Name: "cel"}}}),
			want: []string{"access_log[1].filter.extension_filter", "not supported"}},
		{name: "access log unknown log type", mutate: logFiltered(&accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_LogTypeFilter{LogTypeFilter: &accesslogpb.LogTypeFilter{
			Types: []accesslogdatapb.AccessLogType{99}}}}), want: []string{"access_log[1].filter.log_type_filter.types[0]", "99"}},
	}
}
