// Package accesslogcfg builds the access log configs (Envoy's
// envoy.config.accesslog.v3 and SubstitutionFormatString) that tests write,
// so that the access log's unit tests and the end-to-end tests build them
// alike.
package accesslogcfg

import (
	"testing"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	accesslogdatapb "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// TextFormat is a SubstitutionFormatString with the inline text format s.
func TextFormat(s string) *corepb.SubstitutionFormatString {
	return &corepb.SubstitutionFormatString{Format: &corepb.SubstitutionFormatString_TextFormatSource{
		TextFormatSource: &corepb.DataSource{Specifier: &corepb.DataSource_InlineString{InlineString: s}},
	}}
}

// JSONFormat is a SubstitutionFormatString with the JSON format fields.
func JSONFormat(t testing.TB, fields map[string]any) *corepb.SubstitutionFormatString {
	t.Helper()
	s, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	return &corepb.SubstitutionFormatString{Format: &corepb.SubstitutionFormatString_JsonFormat{JsonFormat: s}}
}

// comparison compares with v (the runtime key is not read by the server).
func comparison(op accesslogpb.ComparisonFilter_Op, v uint32) *accesslogpb.ComparisonFilter {
	return &accesslogpb.ComparisonFilter{Op: op, Value: &corepb.RuntimeUInt32{DefaultValue: v, RuntimeKey: "ignored"}}
}

// StatusCode is a status_code_filter comparing the response code with v.
func StatusCode(op accesslogpb.ComparisonFilter_Op, v uint32) *accesslogpb.AccessLogFilter {
	return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogpb.StatusCodeFilter{
		Comparison: comparison(op, v)}}}
}

// Duration is a duration_filter comparing the duration with ms.
func Duration(op accesslogpb.ComparisonFilter_Op, ms uint32) *accesslogpb.AccessLogFilter {
	return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_DurationFilter{DurationFilter: &accesslogpb.DurationFilter{
		Comparison: comparison(op, ms)}}}
}

// Runtime is a runtime_filter sampling num/den of the RPCs.
func Runtime(num uint32, den typepb.FractionalPercent_DenominatorType, independent bool) *accesslogpb.AccessLogFilter {
	return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_RuntimeFilter{RuntimeFilter: &accesslogpb.RuntimeFilter{
		RuntimeKey: "access_log.sampled", PercentSampled: &typepb.FractionalPercent{Numerator: num, Denominator: den},
		UseIndependentRandomness: independent}}}
}

// GRPCStatus is a grpc_status_filter on codes.
func GRPCStatus(exclude bool, codes ...accesslogpb.GrpcStatusFilter_Status) *accesslogpb.AccessLogFilter {
	return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_GrpcStatusFilter{GrpcStatusFilter: &accesslogpb.GrpcStatusFilter{
		Statuses: codes, Exclude: exclude}}}
}

// Header is a header_filter with the matcher m.
func Header(m *routepb.HeaderMatcher) *accesslogpb.AccessLogFilter {
	return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_HeaderFilter{HeaderFilter: &accesslogpb.HeaderFilter{Header: m}}}
}

// Flags is a response_flag_filter on flags (none: any flag).
func Flags(flags ...string) *accesslogpb.AccessLogFilter {
	return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_ResponseFlagFilter{ResponseFlagFilter: &accesslogpb.ResponseFlagFilter{Flags: flags}}}
}

// LogType is a log_type_filter on types.
func LogType(exclude bool, types ...accesslogdatapb.AccessLogType) *accesslogpb.AccessLogFilter {
	return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_LogTypeFilter{LogTypeFilter: &accesslogpb.LogTypeFilter{Types: types, Exclude: exclude}}}
}

// And is an and_filter of fs.
func And(fs ...*accesslogpb.AccessLogFilter) *accesslogpb.AccessLogFilter {
	return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_AndFilter{AndFilter: &accesslogpb.AndFilter{Filters: fs}}}
}

// Or is an or_filter of fs.
func Or(fs ...*accesslogpb.AccessLogFilter) *accesslogpb.AccessLogFilter {
	return &accesslogpb.AccessLogFilter{FilterSpecifier: &accesslogpb.AccessLogFilter_OrFilter{OrFilter: &accesslogpb.OrFilter{Filters: fs}}}
}
