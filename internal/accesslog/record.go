package accesslog

import (
	"crypto/x509"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Record is what the access log knows of one RPC: every value the command
// operators and the filters read. The server fills one per RPC when the RPC
// ends and hands it to the loggers (package internal/accesslog/sink), which
// take ownership: nothing may change it, or the maps, slices and
// certificates it refers to, afterwards. Filling it copies no header and
// formats nothing; formatting happens on the log's own goroutine.
//
// Headers are gRPC metadata as gRPC gives them: keys lower-case, values in
// order, the values of binary ("-bin") keys decoded. The log shows a binary
// value in its wire form (base64 without padding, matcher.WireBinary), as
// Envoy in front of the server would have.
type Record struct {
	// StartTime is when the RPC's request headers arrived (Envoy: the
	// stream's start, %START_TIME%).
	StartTime time.Time
	// Duration is the time from StartTime to the RPC's end: its status
	// sent, or its stream reset (%DURATION%).
	Duration time.Duration

	// FullMethod is the :path pseudo-header, "/pkg.Service/Method".
	FullMethod string
	// Authority is the :authority pseudo-header.
	Authority string
	// RequestHeaders is the request metadata. It may hold :authority too;
	// the pseudo-headers are read from the fields above (:method is always
	// POST, :scheme https on TLS and http otherwise, as gRPC clients send
	// them).
	RequestHeaders map[string][]string

	// ResponseHeaders is the response header metadata the server sent
	// before the first message, without :status; nil when none was sent.
	ResponseHeaders map[string][]string
	// Trailers is the trailer metadata the server sent, without
	// grpc-status and grpc-message (read from GRPCStatus and GRPCMessage).
	Trailers map[string][]string
	// TrailersOnly reports that the status was sent in the response's only
	// HEADERS frame (no header metadata or message went before it, as for
	// an RPC the filters refused): Envoy then sees the status and the
	// trailer metadata as response headers, and no trailers.
	TrailersOnly bool

	// GRPCStatus is the status code sent in grpc-status, and GRPCMessage
	// its message (as the application set it; logged percent-encoded as on
	// the wire). HasGRPCStatus is false when no status was sent (the
	// stream was reset first); Envoy then infers the code from
	// ResponseCode.
	GRPCStatus    uint32
	GRPCMessage   string
	HasGRPCStatus bool
	// ResponseCode is the HTTP :status sent: 200 for every gRPC response
	// that got headers, refusals included (Envoy logs 200 for a gRPC local
	// reply too: the status is in grpc-status); 0 when the stream ended
	// before any response header was sent (%RESPONSE_CODE%).
	ResponseCode uint32
	// ResponseFlags are Envoy's response flags (%RESPONSE_FLAGS%).
	ResponseFlags Flags
	// ResponseCodeDetails says who ended the RPC and why, in Envoy's words
	// (the Details constants, RBACDenied); "" is unset (%RESPONSE_CODE_DETAILS%).
	ResponseCodeDetails string

	// BytesReceived and BytesSent are the RPC's messages on the wire: each
	// message as encoded plus its 5-byte prefix, as the mesh metrics count
	// them (%BYTES_RECEIVED%, %BYTES_SENT%).
	BytesReceived, BytesSent uint64

	// Remote is the peer's address and Local the connection's local
	// address; the zero value when unknown.
	Remote, Local netip.AddrPort

	// TLSVersion is the connection's TLS version (crypto/tls's
	// VersionTLS12, VersionTLS13), 0 on a plaintext connection; CipherSuite
	// its cipher suite; ServerName the SNI the client sent.
	TLSVersion, CipherSuite uint16
	ServerName              string
	// PeerCertificates is the client's certificate chain, leaf first; nil
	// when it sent none. LocalCertificate is the certificate the server
	// presented; nil in plaintext.
	PeerCertificates []*x509.Certificate
	LocalCertificate *x509.Certificate

	// RouteName is the name of the route that matched; FilterChainName the
	// name of the connection's filter chain.
	RouteName, FilterChainName string
	// ConnectionID identifies the connection within the process
	// (%CONNECTION_ID%; 0 when unset, as Envoy prints it).
	ConnectionID uint64
	// StreamID identifies the RPC (%STREAM_ID%). Envoy's is the request's
	// x-request-id, which Envoy generates for a request without one: the
	// server sets StreamID (NewStreamID) for such a request; when StreamID
	// is zero, the log shows the request's x-request-id.
	StreamID UUID
}

// Flags are Envoy's response flags (%RESPONSE_FLAGS%): additional details
// about a response, in Envoy's order. Several join with ",".
type Flags uint32

// Envoy's response flags (source/common/stream_info/utility.h), in the
// order Envoy prints them. The ones a gRPC server sets: FlagRateLimited
// (a local or global rate limit refused the RPC), FlagUnauthorizedExternalService
// (ext_authz denied it, or failed closed), FlagRateLimitServiceError (the
// Rate Limit Service failed closed), FlagFaultInjected and
// FlagDelayInjected (fault injection), FlagNoRouteFound,
// FlagDownstreamRemoteReset (the client reset the stream). An RBAC denial
// sets none: Envoy's RBAC filter sets no flag.
const (
	FlagFailedLocalHealthCheck Flags = 1 << iota
	FlagNoHealthyUpstream
	FlagUpstreamRequestTimeout
	FlagLocalReset
	FlagUpstreamRemoteReset
	FlagUpstreamConnectionFailure
	FlagUpstreamConnectionTermination
	FlagUpstreamOverflow
	FlagNoRouteFound
	FlagDelayInjected
	FlagFaultInjected
	FlagRateLimited
	FlagUnauthorizedExternalService
	FlagRateLimitServiceError
	FlagDownstreamConnectionTermination
	FlagUpstreamRetryLimitExceeded
	FlagStreamIdleTimeout
	FlagInvalidEnvoyRequestHeaders
	FlagDownstreamProtocolError
	FlagUpstreamMaxStreamDurationReached
	FlagResponseFromCacheFilter
	FlagNoFilterConfigFound
	FlagDurationTimeout
	FlagUpstreamProtocolError
	FlagNoClusterFound
	FlagOverloadManager
	FlagDNSResolutionFailed
	FlagDropOverload
	FlagDownstreamRemoteReset
	FlagUnconditionalDropOverload
	numFlags = iota
)

// flagNames are the short and long names of the flags, by bit.
var flagNames = [numFlags]struct{ short, long string }{
	{"LH", "FailedLocalHealthCheck"},
	{"UH", "NoHealthyUpstream"},
	{"UT", "UpstreamRequestTimeout"},
	{"LR", "LocalReset"},
	{"UR", "UpstreamRemoteReset"},
	{"UF", "UpstreamConnectionFailure"},
	{"UC", "UpstreamConnectionTermination"},
	{"UO", "UpstreamOverflow"},
	{"NR", "NoRouteFound"},
	{"DI", "DelayInjected"},
	{"FI", "FaultInjected"},
	{"RL", "RateLimited"},
	{"UAEX", "UnauthorizedExternalService"},
	{"RLSE", "RateLimitServiceError"},
	{"DC", "DownstreamConnectionTermination"},
	{"URX", "UpstreamRetryLimitExceeded"},
	{"SI", "StreamIdleTimeout"},
	{"IH", "InvalidEnvoyRequestHeaders"},
	{"DPE", "DownstreamProtocolError"},
	{"UMSDR", "UpstreamMaxStreamDurationReached"},
	{"RFCF", "ResponseFromCacheFilter"},
	{"NFCF", "NoFilterConfigFound"},
	{"DT", "DurationTimeout"},
	{"UPE", "UpstreamProtocolError"},
	{"NC", "NoClusterFound"},
	{"OM", "OverloadManagerTerminated"},
	{"DF", "DnsResolutionFailed"},
	{"DO", "DropOverload"},
	{"DR", "DownstreamRemoteReset"},
	{"UDO", "UnconditionalDropOverload"},
}

// flagOf returns the flag whose short name is s.
func flagOf(s string) (Flags, bool) {
	for i, n := range flagNames {
		if n.short == s {
			return 1 << i, true
		}
	}
	return 0, false
}

// String returns the flags' short names joined with ",", or "-" for none
// (%RESPONSE_FLAGS%).
func (f Flags) String() string { return string(f.appendNames(nil, false)) }

// appendNames appends the flags' short (or long) names joined with ",", or
// "-" for none.
func (f Flags) appendNames(b []byte, long bool) []byte {
	if f == 0 {
		return append(b, '-')
	}
	first := true
	for i := range numFlags {
		if f&(1<<i) == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		if long {
			b = append(b, flagNames[i].long...)
		} else {
			b = append(b, flagNames[i].short...)
		}
	}
	return b
}

// Envoy's response code details (%RESPONSE_CODE_DETAILS%) for what a gRPC
// server's filters and routes do, each the string Envoy's own filter sets
// (its source: the filter's RcDetails, or docs/root/configuration/http/
// http_conn_man/response_code_details.rst). RBACDenied builds the RBAC
// filter's.
const (
	// DetailsViaUpstream: the response came from the application (Envoy:
	// the router got it from the upstream). Every RPC the filters let
	// through.
	DetailsViaUpstream = "via_upstream"
	// DetailsExtAuthzDenied: ext_authz denied the RPC (flag UAEX).
	DetailsExtAuthzDenied = "ext_authz_denied"
	// DetailsExtAuthzError: the authorization service failed and the filter
	// failed closed (flag UAEX).
	DetailsExtAuthzError = "ext_authz_error"
	// DetailsLocalRateLimited: a local rate limit refused the RPC (flag RL).
	DetailsLocalRateLimited = "local_rate_limited"
	// DetailsRateLimited: the Rate Limit Service said over limit (flag RL).
	DetailsRateLimited = "request_rate_limited"
	// DetailsRateLimiterError: the Rate Limit Service failed and the
	// filter failed closed (flag RLSE).
	DetailsRateLimiterError = "rate_limiter_error"
	// DetailsFaultAbort: fault injection aborted the RPC (flag FI; a delay
	// sets DI and no details of its own).
	DetailsFaultAbort = "fault_filter_abort"
	// DetailsRouteNotFound: no route matched (flag NR).
	DetailsRouteNotFound = "route_not_found"
	// DetailsRemoteReset: the client reset the stream (flag DR).
	DetailsRemoteReset = "http2.remote_reset"
)

// RBACDenied returns the details of an RPC the RBAC filter denied, as
// Envoy's RBAC filter writes them: rbac_access_denied_matched_policy[NAME],
// where NAME is the policy that matched (a DENY policy) with each
// whitespace character replaced by '_', or "none" when none did (no ALLOW
// policy matched). No response flag goes with it.
func RBACDenied(policy string) string {
	if policy == "" {
		policy = "none"
	}
	return "rbac_access_denied_matched_policy[" + replaceSpace(policy) + "]"
}

// replaceSpace replaces each of " \t\f\v\n\r" with '_', as Envoy's
// StringUtil::replaceAllEmptySpace does.
func replaceSpace(s string) string {
	if !strings.ContainsAny(s, " \t\f\v\n\r") {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if isSpace(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

// isSpace reports whether c is one of Envoy's whitespace characters,
// " \t\f\v\n\r".
func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\f', '\v', '\n', '\r':
		return true
	}
	return false
}

// grpcStatus returns the RPC's gRPC status as Envoy reads it for the
// access log: the one sent, else one inferred from the HTTP status (gRPC's
// mapping), else none.
func (r *Record) grpcStatus() (uint32, bool) {
	switch {
	case r.HasGRPCStatus:
		return r.GRPCStatus, true
	case r.ResponseCode != 0:
		return grpcCodeOfHTTP(r.ResponseCode), true
	}
	return 0, false
}

// requestHeader returns the first value of the request header name (lower
// case), pseudo-headers included, in the form Envoy would see it.
func (r *Record) requestHeader(name string) (string, bool) {
	switch name {
	case ":path":
		return r.FullMethod, r.FullMethod != ""
	case ":authority":
		if r.Authority != "" {
			return r.Authority, true
		}
	case ":method":
		return "POST", true
	case ":scheme":
		if r.TLSVersion != 0 {
			return "https", true
		}
		return "http", true
	}
	return firstValue(r.RequestHeaders, name)
}

// requestHeaderValues returns every value of the request header name, in
// the form Envoy would see them (for header filters).
func (r *Record) requestHeaderValues(name string) []string {
	if strings.HasPrefix(name, ":") {
		if v, ok := r.requestHeader(name); ok {
			return []string{v}
		}
		return nil
	}
	vals := r.RequestHeaders[name]
	if strings.HasSuffix(name, binSuffix) && len(vals) > 0 {
		wire := make([]string, len(vals))
		for i, v := range vals {
			wire[i] = wireBinary(v)
		}
		return wire
	}
	return vals
}

// responseHeader returns the first value of the response header name as
// Envoy would see it: in a trailers-only response, the status and the
// trailer metadata are headers.
func (r *Record) responseHeader(name string) (string, bool) {
	switch name {
	case ":status":
		if r.ResponseCode == 0 {
			return "", false
		}
		return strconv.FormatUint(uint64(r.ResponseCode), 10), true
	}
	if r.TrailersOnly {
		return r.trailerValue(name)
	}
	return firstValue(r.ResponseHeaders, name)
}

// responseTrailer returns the first value of the response trailer name as
// Envoy would see it: none in a trailers-only response.
func (r *Record) responseTrailer(name string) (string, bool) {
	if r.TrailersOnly || r.ResponseCode == 0 {
		return "", false
	}
	return r.trailerValue(name)
}

// trailerValue reads name from the trailers, grpc-status and grpc-message
// included.
func (r *Record) trailerValue(name string) (string, bool) {
	switch name {
	case "grpc-status":
		if !r.HasGRPCStatus {
			return "", false
		}
		return strconv.FormatUint(uint64(r.GRPCStatus), 10), true
	case "grpc-message":
		if !r.HasGRPCStatus || r.GRPCMessage == "" {
			return "", false
		}
		return grpcPercentEncode(r.GRPCMessage), true
	}
	return firstValue(r.Trailers, name)
}

const binSuffix = "-bin"

// firstValue returns the first value of key in h, a binary one in its wire
// form.
func firstValue(h map[string][]string, key string) (string, bool) {
	vals := h[key]
	if len(vals) == 0 {
		return "", false
	}
	if strings.HasSuffix(key, binSuffix) {
		return wireBinary(vals[0]), true
	}
	return vals[0], true
}

// grpcPercentEncode encodes a status message as gRPC sends it in
// grpc-message: bytes outside printable ASCII, and '%', percent-encoded.
func grpcPercentEncode(s string) string {
	needs := false
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '%' {
			needs = true
			break
		}
	}
	if !needs {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '%' {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}
