package accesslog

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
)

// commands are the command operators Envoy knows (its
// source/common/formatter/stream_info_formatter.cc and
// http_specific_formatter.cc, and docs/root/configuration/advanced/
// substitution_formatter.rst): the ones this server supports, the ones
// that have no value on a gRPC server and print what Envoy prints then
// ("-", or 0 for a count), and the ones that would have a value this
// server does not record (refusedCommands: "-", with a warning). Anything
// else is unknown, as it is to Envoy, and refused.
var commands = map[string]command{
	// Times and durations.
	"START_TIME":       {syntax: paramsOptional, build: buildTime(startTime, false)},
	"START_TIME_LOCAL": {syntax: paramsOptional, build: buildTime(startTime, true)},
	"EMIT_TIME":        {syntax: paramsOptional, build: buildTime(emitTime, false)},
	"EMIT_TIME_LOCAL":  {syntax: paramsOptional, build: buildTime(emitTime, true)},
	"DURATION":         {build: constant(numOp(func(r *Record) uint64 { return uint64(max(r.Duration.Milliseconds(), 0)) }))},

	// The request and the response.
	"REQ":                   {syntax: paramsRequired | lengthAllowed, build: buildHeader(requestHeader)},
	"REQUEST_HEADER":        {syntax: paramsRequired | lengthAllowed, build: buildHeader(requestHeader)},
	"STREAM_INFO_REQ":       {syntax: paramsRequired | lengthAllowed, build: buildHeader(requestHeader)},
	"RESP":                  {syntax: paramsRequired | lengthAllowed, build: buildHeader(responseHeader)},
	"RESPONSE_HEADER":       {syntax: paramsRequired | lengthAllowed, build: buildHeader(responseHeader)},
	"TRAILER":               {syntax: paramsRequired | lengthAllowed, build: buildHeader(responseTrailer)},
	"RESPONSE_TRAILER":      {syntax: paramsRequired | lengthAllowed, build: buildHeader(responseTrailer)},
	"PATH":                  {syntax: paramsOptional | lengthAllowed, build: buildPath},
	"QUERY_PARAM":           {syntax: paramsRequired | lengthAllowed, build: buildQueryParam},
	"PROTOCOL":              {build: constant(strOp(func(*Record) string { return "HTTP/2" }))},
	"RESPONSE_CODE":         {build: constant(numOp(func(r *Record) uint64 { return uint64(r.ResponseCode) }))},
	"RESPONSE_CODE_DETAILS": {syntax: paramsOptional, build: buildDetails},
	"RESPONSE_FLAGS":        {build: constant(flagsOp{})},
	"RESPONSE_FLAGS_LONG":   {build: constant(flagsOp{long: true})},
	"GRPC_STATUS":           {syntax: paramsOptional, build: buildGRPCStatus},
	"GRPC_STATUS_NUMBER":    {build: constant(grpcStatusOp{form: grpcNumber})},
	"BYTES_RECEIVED":        {build: constant(numOp(func(r *Record) uint64 { return r.BytesReceived }))},
	"BYTES_SENT":            {build: constant(numOp(func(r *Record) uint64 { return r.BytesSent }))},
	"ROUTE_NAME":            {build: constant(strOp(func(r *Record) string { return r.RouteName }))},
	"STREAM_ID":             {build: constant(fnOp{f: appendStreamID})},
	"UNIQUE_ID":             {build: constant(fnOp{f: appendUUID})},
	"ACCESS_LOG_TYPE":       {build: constant(strOp(func(*Record) string { return "DownstreamEnd" }))},
	"CUSTOM_FLAGS":          {build: constant(fnOp{f: func(b []byte, _ *Record) ([]byte, bool) { return b, true }})},

	// The connection.
	"DOWNSTREAM_REMOTE_ADDRESS":                     {build: buildAddr(remote, withPort)},
	"DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT":        {syntax: paramsOptional, build: buildAddr(remote, withoutPort)},
	"DOWNSTREAM_REMOTE_PORT":                        {build: buildAddr(remote, justPort)},
	"DOWNSTREAM_DIRECT_REMOTE_ADDRESS":              {build: buildAddr(remote, withPort)},
	"DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT": {syntax: paramsOptional, build: buildAddr(remote, withoutPort)},
	"DOWNSTREAM_DIRECT_REMOTE_PORT":                 {build: buildAddr(remote, justPort)},
	"DOWNSTREAM_LOCAL_ADDRESS":                      {build: buildAddr(local, withPort)},
	"DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT":         {syntax: paramsOptional, build: buildAddr(local, withoutPort)},
	"DOWNSTREAM_LOCAL_PORT":                         {build: buildAddr(local, justPort)},
	"DOWNSTREAM_DIRECT_LOCAL_ADDRESS":               {build: buildAddr(local, withPort)},
	"DOWNSTREAM_DIRECT_LOCAL_ADDRESS_WITHOUT_PORT":  {syntax: paramsOptional, build: buildAddr(local, withoutPort)},
	"DOWNSTREAM_DIRECT_LOCAL_PORT":                  {build: buildAddr(local, justPort)},
	"CONNECTION_ID":                                 {build: constant(numOp(func(r *Record) uint64 { return r.ConnectionID }))},
	"FILTER_CHAIN_NAME":                             {build: constant(strOp(func(r *Record) string { return r.FilterChainName }))},
	"REQUESTED_SERVER_NAME":                         {syntax: paramsOptional, build: buildServerName},

	// The process.
	"HOSTNAME":    {build: buildHostname},
	"ENVIRONMENT": {syntax: paramsRequired | lengthAllowed, build: buildEnvironment},
}

func init() {
	for name, cmd := range tlsCommands {
		commands[name] = cmd
	}
	for name, cmd := range absentCommands() {
		commands[name] = cmd
	}
	for name, cmd := range refusedCommands {
		commands[name] = cmd
	}
}

// absentCommands are the operators Envoy knows that have no value for an
// RPC on a gRPC server, each printing what Envoy prints when the value is
// absent: "-" (null in typed JSON), or 0 for a count.
func absentCommands() map[string]command {
	dash := command{build: constant(fnOp{})}
	dashOpt := command{syntax: paramsOptional, build: constant(fnOp{})}
	zero := command{build: constant(numOp(func(*Record) uint64 { return 0 }))}
	m := map[string]command{
		// No upstream: the server is the end of the stream.
		"UPSTREAM_HOST": dash, "UPSTREAM_HOST_NAME": dash, "UPSTREAM_HOST_NAME_WITHOUT_PORT": dash,
		"UPSTREAM_CLUSTER": dash, "UPSTREAM_CLUSTER_RAW": dash, "UPSTREAM_PROTOCOL": dash,
		"UPSTREAM_LOCAL_ADDRESS": dash, "UPSTREAM_LOCAL_ADDRESS_WITHOUT_PORT": dashOpt, "UPSTREAM_LOCAL_PORT": dash,
		"UPSTREAM_REMOTE_ADDRESS": dash, "UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT": dashOpt, "UPSTREAM_REMOTE_PORT": dash,
		"UPSTREAM_REMOTE_ADDRESS_ENDPOINT_ID": dash, "UPSTREAM_TRANSPORT_FAILURE_REASON": dash,
		"UPSTREAM_TLS_CIPHER": dash, "UPSTREAM_TLS_VERSION": dash, "UPSTREAM_TLS_SESSION_ID": dash,
		"UPSTREAM_PEER_ISSUER": dash, "UPSTREAM_PEER_CERT": dash, "UPSTREAM_PEER_SUBJECT": dash,
		"UPSTREAM_PEER_URI_SAN": dash, "UPSTREAM_PEER_DNS_SAN": dash, "UPSTREAM_PEER_IP_SAN": dash,
		"UPSTREAM_LOCAL_URI_SAN": dash, "UPSTREAM_LOCAL_DNS_SAN": dash, "UPSTREAM_LOCAL_IP_SAN": dash,
		"UPSTREAM_PEER_CERT_V_START": dashOpt, "UPSTREAM_PEER_CERT_V_END": dashOpt,
		"UPSTREAM_CONNECTION_POOL_READY_DURATION": dash,
		"REQUEST_TX_DURATION":                     dash, "RESPONSE_DURATION": dash, "RESPONSE_TX_DURATION": dash,
		"CLUSTER_METADATA":         {syntax: paramsRequired | lengthAllowed, build: constant(fnOp{})},
		"UPSTREAM_METADATA":        {syntax: paramsRequired | lengthAllowed, build: constant(fnOp{})},
		"UPSTREAM_FILTER_STATE":    {syntax: paramsOptional | lengthAllowed, build: constant(fnOp{})},
		"UPSTREAM_WIRE_BYTES_SENT": zero, "UPSTREAM_WIRE_BYTES_RECEIVED": zero,
		"UPSTREAM_HEADER_BYTES_SENT": zero, "UPSTREAM_HEADER_BYTES_RECEIVED": zero,
		"UPSTREAM_DECOMPRESSED_HEADER_BYTES_SENT": zero, "UPSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED": zero,
		"UPSTREAM_CONNECTION_ID": zero, "UPSTREAM_REQUEST_ATTEMPT_COUNT": zero,
		// HTTP/3 only.
		"ROUNDTRIP_DURATION": dash, "BYTES_RETRANSMITTED": zero, "PACKETS_RETRANSMITTED": zero,
		// Connection-level or listener-level only, or features a gRPC
		// server has none of (tracing, virtual clusters, internal
		// listeners, connection termination by network filters).
		"CONNECTION_TERMINATION_DETAILS": dash, "DOWNSTREAM_TRANSPORT_FAILURE_REASON": dash,
		"DOWNSTREAM_LOCAL_CLOSE_REASON": dash, "DOWNSTREAM_DETECTED_CLOSE_TYPE": dash,
		"DOWNSTREAM_HANDSHAKE_DURATION": dash, "VIRTUAL_CLUSTER_NAME": dash, "TRACE_ID": dash,
		"DOWNSTREAM_LOCAL_ADDRESS_ENDPOINT_ID": dash, "DOWNSTREAM_DIRECT_LOCAL_ADDRESS_ENDPOINT_ID": dash,
	}
	return m
}

// refusedCommands are the operators Envoy knows that would have a value
// here which this server does not record. A config using one is accepted
// (a log field is no reason to refuse a Listener): the operator prints
// "-", and the server warns that it does (Config.NotRecorded).
var refusedCommands = map[string]command{
	"REQUEST_DURATION":                              {refused: "the time the request's last byte arrived is not recorded"},
	"COMMON_DURATION":                               {refused: "the stream's timing points are not recorded"},
	"DOWNSTREAM_WIRE_BYTES_SENT":                    {refused: "gRPC does not report an RPC's HTTP/2 frame bytes"},
	"DOWNSTREAM_WIRE_BYTES_RECEIVED":                {refused: "gRPC does not report an RPC's HTTP/2 frame bytes"},
	"DOWNSTREAM_HEADER_BYTES_SENT":                  {refused: "gRPC does not report an RPC's header bytes"},
	"DOWNSTREAM_HEADER_BYTES_RECEIVED":              {refused: "gRPC does not report an RPC's header bytes"},
	"DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_SENT":     {refused: "gRPC does not report an RPC's header bytes"},
	"DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED": {refused: "gRPC does not report an RPC's header bytes"},
	"REQUEST_HEADERS_BYTES":                         {refused: "gRPC does not give the server every request header (it keeps te, grpc-timeout and others)"},
	"RESPONSE_HEADERS_BYTES":                        {refused: "the response headers gRPC adds are not recorded"},
	"RESPONSE_TRAILERS_BYTES":                       {refused: "the response trailers gRPC adds are not recorded"},
	"LOCAL_REPLY_BODY":                              {refused: "a refused RPC has no body; its message is %RESP(GRPC-MESSAGE)%"},
	"DYNAMIC_METADATA":                              {refused: "the server's filters set no dynamic metadata"},
	"FILTER_STATE":                                  {refused: "the server's filters set no filter state"},
	"METADATA":                                      {refused: "route, virtual host and listener metadata are not carried to the log"},
	"CEL":                                           {refused: "CEL expressions are not supported"},
	"TYPED_CEL":                                     {refused: "CEL expressions are not supported"},
	"COALESCE":                                      {refused: "not supported; use one operator"},
	"REQ_WITHOUT_QUERY":                             {refused: "a formatter extension; use %PATH(NQ)%"},
	"DOWNSTREAM_TLS_SESSION_ID":                     {refused: "Go's TLS does not expose the session ID"},
	"TLS_JA3_FINGERPRINT":                           {refused: "the client's hello is not recorded"},
	"TLS_JA4_FINGERPRINT":                           {refused: "the client's hello is not recorded"},
	"DOWNSTREAM_PEER_OTHERNAME_SAN":                 {refused: "Go's x509 does not parse otherName SANs"},
	"DOWNSTREAM_LOCAL_OTHERNAME_SAN":                {refused: "Go's x509 does not parse otherName SANs"},
}

// constant builds an operator that takes no parameters.
func constant(op operator) func(*compiler, string, int) (operator, error) {
	return func(*compiler, string, int) (operator, error) { return op, nil }
}

// fnOp is an operator computed by a function; a nil f has no value.
type fnOp struct {
	f   func(b []byte, r *Record) ([]byte, bool)
	num bool
}

func (o fnOp) appendText(b []byte, r *Record) ([]byte, bool) {
	if o.f == nil {
		return b, false
	}
	return o.f(b, r)
}

func (o fnOp) numeric() bool { return o.num }

// strOp is an operator whose value is a string, absent when empty.
func strOp(f func(r *Record) string) fnOp {
	return fnOp{f: func(b []byte, r *Record) ([]byte, bool) {
		s := f(r)
		return append(b, s...), s != ""
	}}
}

// numOp is an operator whose value is a count, always present.
func numOp(f func(r *Record) uint64) fnOp {
	return fnOp{num: true, f: func(b []byte, r *Record) ([]byte, bool) {
		return strconv.AppendUint(b, f(r), 10), true
	}}
}

// headerSource says which headers a header operator reads.
type headerSource uint8

const (
	requestHeader headerSource = iota
	responseHeader
	responseTrailer
)

// headerOp is %REQ(X?Y):Z%, %RESP(X?Y):Z% or %TRAILER(X?Y):Z%: the first
// value of header X, else of Y, cut to Z bytes.
type headerOp struct {
	src       headerSource
	main, alt string
	maxLen    int
}

func buildHeader(src headerSource) func(*compiler, string, int) (operator, error) {
	return func(_ *compiler, params string, maxLen int) (operator, error) {
		main, alt, err := splitHeaders(params)
		if err != nil {
			return nil, err
		}
		return headerOp{src: src, main: main, alt: alt, maxLen: maxLen}, nil
	}
}

func (o headerOp) lookup(r *Record, name string) (string, bool) {
	switch o.src {
	case responseHeader:
		return r.responseHeader(name)
	case responseTrailer:
		return r.responseTrailer(name)
	}
	return r.requestHeader(name)
}

func (o headerOp) appendText(b []byte, r *Record) ([]byte, bool) {
	v, ok := o.lookup(r, o.main)
	if !ok && o.alt != "" {
		v, ok = o.lookup(r, o.alt)
	}
	if !ok {
		return b, false
	}
	return appendTrunc(b, v, o.maxLen), true
}

func (headerOp) numeric() bool { return false }

// buildPath compiles %PATH(X:Y):Z%: the request path with its query (X
// WQ, the default) or without it (NQ), from x-envoy-original-path (Y
// ORIG), :path (PATH) or the first of them present (ORIG_OR_PATH, the
// default).
func buildPath(_ *compiler, params string, maxLen int) (operator, error) {
	mode, source, _ := strings.Cut(params, ":")
	noQuery := false
	switch mode {
	case "", "WQ":
	case "NQ":
		noQuery = true
	default:
		return nil, fmt.Errorf("invalid path mode %q, want WQ or NQ", mode)
	}
	orig, path := true, true
	switch source {
	case "", "ORIG_OR_PATH":
	case "ORIG":
		path = false
	case "PATH":
		orig = false
	default:
		return nil, fmt.Errorf("invalid path source %q, want ORIG, PATH or ORIG_OR_PATH", source)
	}
	return fnOp{f: func(b []byte, r *Record) ([]byte, bool) {
		var v string
		ok := false
		if orig {
			v, ok = r.requestHeader("x-envoy-original-path")
		}
		if !ok && path {
			v, ok = r.requestHeader(":path")
		}
		if !ok {
			return b, false
		}
		if noQuery {
			v, _, _ = strings.Cut(v, "?")
		}
		return appendTrunc(b, v, maxLen), true
	}}, nil
}

// buildQueryParam compiles %QUERY_PARAM(X):Z%: the first value of the
// query parameter X of :path, percent-decoded.
func buildQueryParam(_ *compiler, key string, maxLen int) (operator, error) {
	return fnOp{f: func(b []byte, r *Record) ([]byte, bool) {
		_, query, ok := strings.Cut(r.FullMethod, "?")
		if !ok {
			return b, false
		}
		for _, pair := range strings.Split(query, "&") {
			k, v, _ := strings.Cut(pair, "=")
			if dk, err := url.PathUnescape(k); err != nil || dk != key {
				continue
			}
			if dv, err := url.PathUnescape(v); err == nil {
				v = dv
			}
			return appendTrunc(b, v, maxLen), true
		}
		return b, false
	}}, nil
}

// buildDetails compiles %RESPONSE_CODE_DETAILS(X)%: whitespace becomes
// '_' unless X is ALLOW_WHITESPACES (any other parameter is ignored, as by
// Envoy).
func buildDetails(_ *compiler, params string, _ int) (operator, error) {
	keep := params == "ALLOW_WHITESPACES"
	return fnOp{f: func(b []byte, r *Record) ([]byte, bool) {
		d := r.ResponseCodeDetails
		if d == "" {
			return b, false
		}
		if keep {
			return append(b, d...), true
		}
		for i := 0; i < len(d); i++ {
			if isSpace(d[i]) {
				b = append(b, '_')
			} else {
				b = append(b, d[i])
			}
		}
		return b, true
	}}, nil
}

// flagsOp is %RESPONSE_FLAGS% (short names) or %RESPONSE_FLAGS_LONG%:
// "-" for none is a value, as in Envoy.
type flagsOp struct{ long bool }

func (o flagsOp) appendText(b []byte, r *Record) ([]byte, bool) {
	return r.ResponseFlags.appendNames(b, o.long), true
}

func (flagsOp) numeric() bool { return false }

// grpcForm is how %GRPC_STATUS% prints a code.
type grpcForm uint8

const (
	grpcCamel grpcForm = iota
	grpcSnake
	grpcNumber
)

// Names of the gRPC codes as Envoy prints them: its grpcStatusToString
// (CAMEL_STRING) and absl's StatusCodeToString (SNAKE_STRING).
var (
	grpcCamelNames = [...]string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded",
		"NotFound", "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
		"Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}
	grpcSnakeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
		"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
		"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}
)

// grpcStatusOp is %GRPC_STATUS(X)% and %GRPC_STATUS_NUMBER%: the code
// sent, or the one Envoy infers from the HTTP status; a code without a
// name prints as its number.
type grpcStatusOp struct{ form grpcForm }

func buildGRPCStatus(_ *compiler, params string, _ int) (operator, error) {
	switch params {
	case "", "CAMEL_STRING":
		return grpcStatusOp{form: grpcCamel}, nil
	case "SNAKE_STRING":
		return grpcStatusOp{form: grpcSnake}, nil
	case "NUMBER":
		return grpcStatusOp{form: grpcNumber}, nil
	}
	return nil, fmt.Errorf("invalid format %q, want CAMEL_STRING, SNAKE_STRING or NUMBER", params)
}

func (o grpcStatusOp) appendText(b []byte, r *Record) ([]byte, bool) {
	code, ok := r.grpcStatus()
	if !ok {
		return b, false
	}
	switch {
	case o.form == grpcCamel && code < uint32(len(grpcCamelNames)):
		return append(b, grpcCamelNames[code]...), true
	case o.form == grpcSnake && code < uint32(len(grpcSnakeNames)):
		return append(b, grpcSnakeNames[code]...), true
	}
	return strconv.AppendUint(b, uint64(code), 10), true
}

func (o grpcStatusOp) numeric() bool { return o.form == grpcNumber }

// appendStreamID is %STREAM_ID%: the record's stream ID, else the
// request's x-request-id (Envoy's stream ID).
func appendStreamID(b []byte, r *Record) ([]byte, bool) {
	if r.StreamID != (UUID{}) {
		return r.StreamID.append(b), true
	}
	v, ok := r.requestHeader("x-request-id")
	if !ok || v == "" {
		return b, false
	}
	return append(b, v...), true
}

// UUID is a UUID's 16 bytes; the zero UUID is none.
type UUID [16]byte

// NewStreamID returns a new stream ID for Record.StreamID: a random
// (version 4) UUID, as Envoy's connection manager generates an
// x-request-id, its stream ID, for a request without one. It allocates
// nothing: the text is written with the line.
func NewStreamID() UUID {
	var u UUID
	hi, lo := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		u[i], u[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// append appends u in its text form (8-4-4-4-12 hex digits) to b.
func (u UUID) append(b []byte) []byte {
	const hex = "0123456789abcdef"
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[c>>4], hex[c&15])
	}
	return b
}

// String is u in its text form.
func (u UUID) String() string { return string(u.append(make([]byte, 0, 36))) }

// appendUUID is %UNIQUE_ID%: a new random (version 4) UUID.
func appendUUID(b []byte, _ *Record) ([]byte, bool) {
	return NewStreamID().append(b), true
}

// addrSide says which end of the connection an address operator reads.
type addrSide uint8

const (
	remote addrSide = iota
	local
)

// addrMode says how an address operator prints it.
type addrMode uint8

const (
	withPort addrMode = iota
	withoutPort
	justPort
)

// addrOp prints the peer's or the local address: "ip:port" ("[ip]:port"
// for IPv6), the IP alone, or the IP masked to a prefix ("10.1.0.0/16"),
// or the port alone (a number in typed JSON).
type addrOp struct {
	side addrSide
	mode addrMode
	mask int // -1: none
}

// buildAddr compiles an address operator; the _WITHOUT_PORT ones take an
// optional prefix length to mask the address with (0 to 128; an IPv4
// address is masked to at most 32 bits).
func buildAddr(side addrSide, mode addrMode) func(*compiler, string, int) (operator, error) {
	return func(_ *compiler, params string, _ int) (operator, error) {
		op := addrOp{side: side, mode: mode, mask: -1}
		if params != "" {
			n, err := strconv.Atoi(params)
			if err != nil || n < 0 || n > 128 {
				return nil, fmt.Errorf("invalid prefix length %q, want 0 to 128", params)
			}
			op.mask = n
		}
		return op, nil
	}
}

func (o addrOp) appendText(b []byte, r *Record) ([]byte, bool) {
	a := r.Remote
	if o.side == local {
		a = r.Local
	}
	if !a.IsValid() {
		return b, false
	}
	switch o.mode {
	case justPort:
		return strconv.AppendUint(b, uint64(a.Port()), 10), true
	case withoutPort:
		if o.mask < 0 {
			return a.Addr().AppendTo(b), true
		}
		p, err := a.Addr().Prefix(min(o.mask, a.Addr().BitLen()))
		if err != nil {
			return b, false
		}
		return p.AppendTo(b), true
	}
	return a.AppendTo(b), true
}

func (o addrOp) numeric() bool { return o.mode == justPort }

// buildServerName compiles %REQUESTED_SERVER_NAME(X:Y)%: the SNI
// (SNI_ONLY, the default), the SNI or else the request's host (SNI_FIRST),
// or the host or else the SNI (HOST_FIRST); the host is
// x-envoy-original-host (Y ORIG), :authority (HOST), or the first of them
// present (ORIG_OR_HOST, the default). An SNI with a byte that is not a
// letter, digit, '.' or '-' is printed as Envoy prints it: those bytes as
// '_', after "invalid:".
func buildServerName(_ *compiler, params string, _ int) (operator, error) {
	mode, source, _ := strings.Cut(params, ":")
	switch mode {
	case "", "SNI_ONLY", "SNI_FIRST", "HOST_FIRST":
	default:
		return nil, fmt.Errorf("invalid mode %q, want SNI_ONLY, SNI_FIRST or HOST_FIRST", mode)
	}
	switch source {
	case "", "ORIG", "HOST", "ORIG_OR_HOST":
	default:
		return nil, fmt.Errorf("invalid host source %q, want ORIG, HOST or ORIG_OR_HOST", source)
	}
	host := func(r *Record) (string, bool) {
		if source != "HOST" {
			if v, ok := r.requestHeader("x-envoy-original-host"); ok && v != "" {
				return v, true
			}
		}
		if source != "ORIG" {
			if v, ok := r.requestHeader(":authority"); ok && v != "" {
				return v, true
			}
		}
		return "", false
	}
	return fnOp{f: func(b []byte, r *Record) ([]byte, bool) {
		if mode == "HOST_FIRST" {
			if h, ok := host(r); ok {
				return append(b, h...), true
			}
		}
		if r.ServerName != "" {
			return appendHostname(b, r.ServerName), true
		}
		if mode == "SNI_FIRST" {
			if h, ok := host(r); ok {
				return append(b, h...), true
			}
		}
		return b, false
	}}, nil
}

// appendHostname appends the SNI s as Envoy logs it: when s has a byte
// that is not a letter, digit, '.' or '-', "invalid:" and s with those
// bytes replaced by '_'.
func appendHostname(b []byte, s string) []byte {
	bad := false
	for i := 0; i < len(s); i++ {
		if !isHostnameByte(s[i]) {
			bad = true
			break
		}
	}
	if !bad {
		return append(b, s...)
	}
	b = append(b, "invalid:"...)
	for i := 0; i < len(s); i++ {
		if c := s[i]; isHostnameByte(c) {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	return b
}

func isHostnameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-'
}

// buildHostname compiles %HOSTNAME%: the host's name, read once when the
// config is compiled (as Envoy does).
func buildHostname(c *compiler, _ string, _ int) (operator, error) {
	name, err := c.hostname()
	if err != nil || name == "" {
		return fnOp{}, nil
	}
	return strOp(func(*Record) string { return name }), nil
}

// buildEnvironment compiles %ENVIRONMENT(X):Z%: the value of the process's
// environment variable X, cut to Z bytes, read once when the config is
// compiled (as Envoy does); "-" when it is not set (a string in typed JSON,
// as Envoy prints it).
func buildEnvironment(c *compiler, name string, maxLen int) (operator, error) {
	v, ok := c.lookupEnv(name)
	if !ok {
		v = "-"
	}
	v = string(appendTrunc(nil, v, maxLen))
	return fnOp{f: func(b []byte, _ *Record) ([]byte, bool) { return append(b, v...), true }}, nil
}
