package accesslog

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	accesslogdatapb "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/matcher"
)

// filter decides whether a record is logged. Immutable and safe for
// concurrent use.
type filter interface {
	match(r *Record) bool
}

// compileFilter compiles an AccessLogFilter (envoy.config.accesslog.v3),
// with Envoy's meaning for a record of an RPC. Errors name the field
// relative to the AccessLogFilter.
func (c *compiler) compileFilter(f *accesslogpb.AccessLogFilter) (filter, error) {
	switch s := f.GetFilterSpecifier().(type) {
	case *accesslogpb.AccessLogFilter_StatusCodeFilter:
		cmp, err := compileComparison(s.StatusCodeFilter.GetComparison())
		if err != nil {
			return nil, inField("status_code_filter.comparison", err)
		}
		return statusCodeFilter{cmp}, nil
	case *accesslogpb.AccessLogFilter_DurationFilter:
		cmp, err := compileComparison(s.DurationFilter.GetComparison())
		if err != nil {
			return nil, inField("duration_filter.comparison", err)
		}
		return durationFilter{cmp}, nil
	case *accesslogpb.AccessLogFilter_NotHealthCheckFilter:
		// Envoy's health_check HTTP filter marks the requests it answers;
		// a gRPC server has none, so no RPC is a health check (gRPC's
		// grpc.health.v1 RPCs included, as on an Envoy without that filter).
		return constFilter(true), nil
	case *accesslogpb.AccessLogFilter_TraceableFilter:
		// The server traces no request: as on an Envoy without tracing,
		// none is traceable.
		return constFilter(false), nil
	case *accesslogpb.AccessLogFilter_RuntimeFilter:
		return compileRuntimeFilter(s.RuntimeFilter)
	case *accesslogpb.AccessLogFilter_AndFilter:
		fs, err := c.compileFilters("and_filter", s.AndFilter.GetFilters())
		return andFilter(fs), err
	case *accesslogpb.AccessLogFilter_OrFilter:
		fs, err := c.compileFilters("or_filter", s.OrFilter.GetFilters())
		return orFilter(fs), err
	case *accesslogpb.AccessLogFilter_HeaderFilter:
		if s.HeaderFilter.GetHeader() == nil {
			return nil, fieldErrorf("header_filter.header", "missing")
		}
		m, err := matcher.NewHeaderMatcher(s.HeaderFilter.GetHeader())
		if err != nil {
			return nil, inField("header_filter.header", err)
		}
		return headerFilter{m}, nil
	case *accesslogpb.AccessLogFilter_ResponseFlagFilter:
		return compileFlagFilter(s.ResponseFlagFilter)
	case *accesslogpb.AccessLogFilter_GrpcStatusFilter:
		return compileGRPCStatusFilter(s.GrpcStatusFilter)
	case *accesslogpb.AccessLogFilter_LogTypeFilter:
		return compileLogTypeFilter(s.LogTypeFilter)
	case *accesslogpb.AccessLogFilter_MetadataFilter:
		return nil, fieldErrorf("metadata_filter", "is not supported: the server's filters set no dynamic metadata, so the filter would decide on an absence Envoy would not see")
	case *accesslogpb.AccessLogFilter_ExtensionFilter:
		return nil, fieldErrorf("extension_filter", "is not supported: the server has no access log filter extension")
	case nil:
		return nil, fieldErrorf("filter_specifier", "missing, want one of status_code_filter, duration_filter, not_health_check_filter, traceable_filter, runtime_filter, and_filter, or_filter, header_filter, response_flag_filter, grpc_status_filter, log_type_filter")
	default:
		return nil, fieldErrorf("filter_specifier", "unsupported %T", s)
	}
}

// compileFilters compiles the filters of an and_filter or or_filter (at
// least two, Envoy's rule).
func (c *compiler) compileFilters(field string, fs []*accesslogpb.AccessLogFilter) ([]filter, error) {
	if len(fs) < 2 {
		return nil, fieldErrorf(field+".filters", "holds %d, want at least 2 filters (Envoy's rule)", len(fs))
	}
	out := make([]filter, len(fs))
	for i, f := range fs {
		var err error
		if out[i], err = c.compileFilter(f); err != nil {
			return nil, inField(fmt.Sprintf("%s.filters[%d]", field, i), err)
		}
	}
	return out, nil
}

// comparison is a compiled ComparisonFilter: its value is the default
// value of its RuntimeUInt32 (the server has no runtime).
type comparison struct {
	op    accesslogpb.ComparisonFilter_Op
	value uint64
}

func compileComparison(c *accesslogpb.ComparisonFilter) (comparison, error) {
	if c == nil {
		return comparison{}, fieldErrorf("", "missing")
	}
	if _, ok := accesslogpb.ComparisonFilter_Op_name[int32(c.GetOp())]; !ok {
		return comparison{}, fieldErrorf("op", "unknown value %d, want EQ, GE, LE or NE", int32(c.GetOp()))
	}
	if c.GetValue() == nil {
		return comparison{}, fieldErrorf("value", "missing")
	}
	return comparison{op: c.GetOp(), value: uint64(c.GetValue().GetDefaultValue())}, nil
}

func (c comparison) holds(v uint64) bool {
	switch c.op {
	case accesslogpb.ComparisonFilter_GE:
		return v >= c.value
	case accesslogpb.ComparisonFilter_LE:
		return v <= c.value
	case accesslogpb.ComparisonFilter_NE:
		return v != c.value
	}
	return v == c.value
}

// statusCodeFilter compares the HTTP status (0 without one).
type statusCodeFilter struct{ comparison }

func (f statusCodeFilter) match(r *Record) bool { return f.holds(uint64(r.ResponseCode)) }

// durationFilter compares the duration in milliseconds.
type durationFilter struct{ comparison }

func (f durationFilter) match(r *Record) bool {
	return f.holds(uint64(max(r.Duration.Milliseconds(), 0)))
}

type constFilter bool

func (f constFilter) match(*Record) bool { return bool(f) }

type andFilter []filter

func (f andFilter) requestHeaders(add func(string)) { filtersRead(f, add) }

func (f orFilter) requestHeaders(add func(string)) { filtersRead(f, add) }

// filtersRead tells add of the request headers fs read.
func filtersRead(fs []filter, add func(string)) {
	for _, f := range fs {
		if r, ok := f.(headerReader); ok {
			r.requestHeaders(add)
		}
	}
}

func (f andFilter) match(r *Record) bool {
	for _, g := range f {
		if !g.match(r) {
			return false
		}
	}
	return true
}

type orFilter []filter

func (f orFilter) match(r *Record) bool {
	for _, g := range f {
		if g.match(r) {
			return true
		}
	}
	return false
}

// runtimeFilter samples records: percent_sampled (0% when unset; there is
// no runtime to override it). Unless use_independent_randomness, a request
// with an x-request-id whose first 8 characters are hex digits is sampled
// by that number, as Envoy does, so that the hosts of a request decide
// alike; others draw at random.
type runtimeFilter struct {
	frac        httpfilter.Fraction
	independent bool
}

func compileRuntimeFilter(f *accesslogpb.RuntimeFilter) (filter, error) {
	if f.GetRuntimeKey() == "" {
		return nil, fieldErrorf("runtime_filter.runtime_key", "empty, want a key (Envoy's rule)")
	}
	frac, err := httpfilter.ParseFraction("", f.GetPercentSampled(), httpfilter.Fraction{})
	if err != nil {
		return nil, inField("runtime_filter.percent_sampled", err)
	}
	return runtimeFilter{frac: frac, independent: f.GetUseIndependentRandomness()}, nil
}

func (f runtimeFilter) requestHeaders(add func(string)) {
	if !f.independent {
		add("x-request-id")
	}
}

func (f runtimeFilter) match(r *Record) bool {
	if f.frac.Never() || f.frac.Always() {
		return f.frac.Always()
	}
	den, num := f.frac.Denominator(), f.frac.Numerator()
	if !f.independent {
		if id, ok := r.requestHeader("x-request-id"); ok && len(id) >= 8 {
			if v, err := strconv.ParseUint(id[:8], 16, 64); err == nil {
				return v%den < num
			}
		}
	}
	return rand.Uint64N(den) < num
}

// headerFilter matches a request header, pseudo-headers included, binary
// values in their wire form, as Envoy's does.
type headerFilter struct{ m matcher.HeaderMatcher }

func (f headerFilter) requestHeaders(add func(string)) { add(f.m.Name()) }

func (f headerFilter) match(r *Record) bool {
	return f.m.MatchValues(r.requestHeaderValues(f.m.Name()))
}

// flagFilter matches records with any of its flags, or any flag at all.
type flagFilter Flags

func compileFlagFilter(f *accesslogpb.ResponseFlagFilter) (filter, error) {
	var mask Flags
	for i, s := range f.GetFlags() {
		fl, ok := flagOf(s)
		if !ok {
			return nil, fieldErrorf(fmt.Sprintf("response_flag_filter.flags[%d]", i), "unknown flag %q, want one of %s", s, shortFlagNames())
		}
		mask |= fl
	}
	if mask == 0 {
		mask = ^Flags(0)
	}
	return flagFilter(mask), nil
}

func shortFlagNames() string {
	names := make([]string, len(flagNames))
	for i, n := range flagNames {
		names[i] = n.short
	}
	return strings.Join(names, ", ")
}

func (f flagFilter) match(r *Record) bool { return r.ResponseFlags&Flags(f) != 0 }

// grpcStatusFilter matches records whose gRPC status (the one sent, else
// inferred from the HTTP status, else UNKNOWN) is one of its, or (exclude)
// none of them.
type grpcStatusFilter struct {
	codes   uint32 // bit n for code n
	exclude bool
}

const grpcUnknown = 2

func compileGRPCStatusFilter(f *accesslogpb.GrpcStatusFilter) (filter, error) {
	out := grpcStatusFilter{exclude: f.GetExclude()}
	for i, s := range f.GetStatuses() {
		if _, ok := accesslogpb.GrpcStatusFilter_Status_name[int32(s)]; !ok {
			return nil, fieldErrorf(fmt.Sprintf("grpc_status_filter.statuses[%d]", i), "unknown value %d, want a gRPC status code (0 to 16)", int32(s))
		}
		out.codes |= 1 << uint32(s)
	}
	return out, nil
}

func (f grpcStatusFilter) match(r *Record) bool {
	code, ok := r.grpcStatus()
	if !ok {
		code = grpcUnknown
	}
	found := code < 32 && f.codes&(1<<code) != 0
	return found != f.exclude
}

// compileLogTypeFilter compiles a log_type_filter: every record of this
// server is logged when its RPC ends (Envoy's DownstreamEnd), so the
// filter's answer is the same for all.
func compileLogTypeFilter(f *accesslogpb.LogTypeFilter) (filter, error) {
	found := false
	for i, t := range f.GetTypes() {
		if _, ok := accesslogdatapb.AccessLogType_name[int32(t)]; !ok {
			return nil, fieldErrorf(fmt.Sprintf("log_type_filter.types[%d]", i), "unknown value %d", int32(t))
		}
		found = found || t == accesslogdatapb.AccessLogType_DownstreamEnd
	}
	return constFilter(found != f.GetExclude()), nil
}
