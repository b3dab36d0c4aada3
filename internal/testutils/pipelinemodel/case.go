// Package pipelinemodel is a reference model of the per-RPC pipeline of an
// xDS-managed gRPC server: for one filter chain (its HTTP filters, its
// inline routes, its header bounds) and a sequence of RPCs with scripted
// answers of the side services, it says what the client and the server's
// user code observe for each RPC (Predict). Generate makes such cases at
// random, biased towards the combinations where filters interact; Shrink
// proposes smaller cases, to report the smallest one that still differs.
//
// The model is written from the semantics (Envoy's filters, gRFCs A36,
// A39, A41, A33, A92, A93, A102; docs/filters.md), not from the library's
// code: it imports none of the library's filter, routing, matching or rate
// limit descriptor packages, and is small and sequential on purpose. The e2e
// package's property test (e2e/pipeline_fuzz_test.go) holds the real
// server to it. Pure: no I/O, no goroutine, no gRPC but its codes.
package pipelinemodel

import (
	"encoding/json"
	"strings"
)

// Case is one generated configuration (a filter chain) and the RPCs sent to
// it, in order, on one new connection.
type Case struct {
	Env   Env
	Chain Chain
	RPCs  []RPC
}

// Env is what the model needs to know of the client that sends the RPCs:
// the headers its transport adds to every RPC that reach the server's
// metadata (content-type, user-agent, ...), besides :authority and the
// pseudo-headers the model knows. The harness measures them once.
type Env struct {
	Transport []Header
}

// Header is one request header (one value of a name). A binary ("-bin")
// header's Value is its bytes, decoded.
type Header struct {
	Key   string
	Value string `json:",omitempty"`
	// Len, when set, makes the value Len bytes of 'p' (Value is unused): a
	// padding header, short to print.
	Len int `json:",omitempty"`
}

// V returns the header's value.
func (h Header) V() string {
	if h.Len > 0 {
		return strings.Repeat("p", h.Len)
	}
	return h.Value
}

// Chain is a filter chain: an HttpConnectionManager whose HTTP filters run
// before the router, its header bounds, and its inline RouteConfiguration
// of one virtual host (domain Domain) with Routes and RateLimits.
type Chain struct {
	// MaxRequestHeadersKB is max_request_headers_kb; 0: unset.
	MaxRequestHeadersKB int `json:",omitempty"`
	// MaxHeadersCount is common_http_protocol_options.max_headers_count;
	// 0: unset.
	MaxHeadersCount int `json:",omitempty"`
	Filters         []Filter
	Routes          []Route
	// RateLimits are the virtual host's rate_limits (stage 0).
	RateLimits []RateLimit `json:",omitempty"`
}

// Domain is the one domain of the virtual host of every case.
const Domain = "svc"

// Filter is one entry of http_filters (before the router). Exactly one of
// the configs is set; it says the filter's type.
type Filter struct {
	Name string
	// Disabled is HttpFilter.disabled: the filter runs only on routes
	// with an override for it that does not disable it.
	Disabled  bool      `json:",omitempty"`
	RBAC      *RBAC     `json:",omitempty"`
	ExtAuthz  *ExtAuthz `json:",omitempty"`
	LocalRL   *LocalRL  `json:",omitempty"`
	Fault     *Fault    `json:",omitempty"`
	RateLimit *GlobalRL `json:",omitempty"`
	Script    *Script   `json:",omitempty"`
	ExtProc   *ExtProc  `json:",omitempty"`
}

// Kind names the filter's type.
func (f *Filter) Kind() string {
	switch {
	case f.RBAC != nil:
		return "rbac"
	case f.ExtAuthz != nil:
		return "ext_authz"
	case f.LocalRL != nil:
		return "local_ratelimit"
	case f.Fault != nil:
		return "fault"
	case f.RateLimit != nil:
		return "ratelimit"
	case f.Script != nil:
		return "script"
	case f.ExtProc != nil:
		return "ext_proc"
	}
	return "none"
}

// CallsOut reports whether the filter sends the request to a side service.
func (f *Filter) CallsOut() bool { return f.ExtAuthz != nil || f.RateLimit != nil || f.ExtProc != nil }

// Route is one route of the virtual host: a path matcher (Path exact, else
// Prefix) and header matchers, all of which must match.
type Route struct {
	Prefix  string        `json:",omitempty"`
	Path    string        `json:",omitempty"`
	Headers []HeaderMatch `json:",omitempty"`
	// Forward: the route's action is a `route` (to a cluster), which a
	// server refuses; otherwise non_forwarding_action.
	Forward bool `json:",omitempty"`
	// Overrides is typed_per_filter_config, by filter name.
	Overrides map[string]*Override `json:",omitempty"`
}

// Override is one typed_per_filter_config entry. Disabled is a
// FilterConfig{disabled: true}; otherwise the one field of the filter's
// type is set.
type Override struct {
	Disabled  bool               `json:",omitempty"`
	RBAC      *RBACPerRoute      `json:",omitempty"`
	ExtAuthz  bool               `json:",omitempty"` // an ExtAuthzPerRoute (gRFC A92: its fields are ignored)
	LocalRL   *LocalRL           `json:",omitempty"`
	Fault     *Fault             `json:",omitempty"`
	RateLimit *RateLimitPerRoute `json:",omitempty"`
	Script    *Script            `json:",omitempty"`
	ExtProc   *ExtProcPerRoute   `json:",omitempty"`
}

// HeaderMatch is a header matcher: Exact, Prefix or Present (the kind),
// on the header's values joined with ",".
type HeaderMatch struct {
	Name  string
	Kind  string // "exact", "prefix", "present"
	Value string `json:",omitempty"`
}

// RBAC is an RBAC filter config: Rules (nil: none, every RPC allowed) and
// ShadowRules, which never change an outcome.
type RBAC struct {
	Rules       *Rules `json:",omitempty"`
	ShadowRules *Rules `json:",omitempty"`
}

// Rules is an RBAC policy set: ALLOW (Deny false) or DENY.
type Rules struct {
	Deny     bool `json:",omitempty"`
	Policies []Policy
}

// Policy matches when one of its permissions and one of its principals
// match.
type Policy struct {
	Permissions []Rule
	Principals  []Rule
}

// Rule is a permission or principal: Any, a header matcher, a url_path
// (exact Path, or PathPrefix), or (principals) Authenticated.
type Rule struct {
	Any           bool         `json:",omitempty"`
	Header        *HeaderMatch `json:",omitempty"`
	Path          string       `json:",omitempty"`
	PathPrefix    string       `json:",omitempty"`
	Authenticated bool         `json:",omitempty"`
}

// RBACPerRoute replaces the filter's config on a route; without RBAC it
// disables the filter there.
type RBACPerRoute struct {
	RBAC *RBAC `json:",omitempty"`
}

// ExtAuthz is an ext_authz filter config.
type ExtAuthz struct {
	// NotEnabled is filter_enabled at 0% (else 100%).
	NotEnabled                bool `json:",omitempty"`
	DenyAtDisable             bool `json:",omitempty"`
	FailureModeAllow          bool `json:",omitempty"`
	FailureModeAllowHeaderAdd bool `json:",omitempty"`
	// StatusOnError is an HTTP status; 0: unset (403).
	StatusOnError int            `json:",omitempty"`
	Allowed       []StringMatch  `json:",omitempty"` // allowed_headers
	Disallowed    []StringMatch  `json:",omitempty"` // disallowed_headers
	Rules         *MutationRules `json:",omitempty"`
	// ShortTimeout: grpc_service.timeout is ShortTimeout (else
	// LongTimeout).
	ShortTimeout bool `json:",omitempty"`
}

// Side call timeouts of the generated configs, and the deadline of an RPC
// with a short deadline. The short timeout ends well before the deadline.
const (
	ShortTimeoutMillis = 200
	LongTimeoutMillis  = 10_000
	DeadlineMillis     = 1_000
)

// StringMatch is a string matcher of a header name: Exact or Prefix.
type StringMatch struct {
	Exact  string `json:",omitempty"`
	Prefix string `json:",omitempty"`
}

// MutationRules is decoder_header_mutation_rules; the expressions are RE2
// regular expressions matching the whole header name ("" unset).
type MutationRules struct {
	DisallowAll     bool   `json:",omitempty"`
	DisallowIsError bool   `json:",omitempty"`
	Allow           string `json:",omitempty"`
	Disallow        string `json:",omitempty"`
}

// LocalRL is a local rate limit config: a token bucket of MaxTokens
// refilled one an hour (so never within a case), or none (NoBucket: a
// filter config that limits only where routes override it).
type LocalRL struct {
	StatPrefix string
	MaxTokens  int
	NoBucket   bool `json:",omitempty"`
	// Enabled and Enforced are filter_enabled and filter_enforced at 100%
	// (else 0%).
	Enabled  bool `json:",omitempty"`
	Enforced bool `json:",omitempty"`
	// Status is the HTTP status of a refusal; 0: unset (429).
	Status              int        `json:",omitempty"`
	AsResourceExhausted bool       `json:",omitempty"`
	ResponseHeaders     []HeaderOp `json:",omitempty"` // response_headers_to_add
	ShadowHeaders       []HeaderOp `json:",omitempty"` // request_headers_to_add_when_not_enforced
}

// Fault is a fault injection config: a fixed delay of a millisecond at
// DelayPct (0 or 100), and an abort.
type Fault struct {
	Delay    bool        `json:",omitempty"`
	DelayPct int         `json:",omitempty"`
	Abort    *FaultAbort `json:",omitempty"`
}

// FaultAbort aborts with GRPC (a code), HTTP (a status) or, with Header,
// what the x-envoy-fault-abort-grpc-request header says, at Pct (0 or
// 100).
type FaultAbort struct {
	GRPC   *int   `json:",omitempty"`
	HTTP   int    `json:",omitempty"`
	Header bool   `json:",omitempty"`
	Pct    int    `json:",omitempty"`
	Body   string `json:",omitempty"`
}

// GlobalRL is a global rate limit filter config (its rate limits are the
// virtual host's, or a route's RateLimitPerRoute's).
type GlobalRL struct {
	Domain          string
	NotEnabled      bool `json:",omitempty"` // filter_enabled 0%
	NotEnforced     bool `json:",omitempty"` // filter_enforced 0%
	FailureModeDeny bool `json:",omitempty"`
	// StatusOnError and LimitedStatus are HTTP statuses; 0: unset (500
	// and 429).
	StatusOnError       int  `json:",omitempty"`
	LimitedStatus       int  `json:",omitempty"`
	AsResourceExhausted bool `json:",omitempty"`
	ShortTimeout        bool `json:",omitempty"`
}

// RateLimitPerRoute replaces the virtual host's rate limits on a route
// when it has some, and the domain when Domain is set.
type RateLimitPerRoute struct {
	Domain     string      `json:",omitempty"`
	RateLimits []RateLimit `json:",omitempty"`
}

// RateLimit is one rate limit: a descriptor of the entries of its actions.
type RateLimit struct {
	Actions []Action
}

// Action is one rate limit action: request_headers (Header, Key),
// generic_key (Generic, Key "" for the default), or header_value_match
// (Match).
type Action struct {
	Header  string            `json:",omitempty"`
	Key     string            `json:",omitempty"`
	Generic string            `json:",omitempty"`
	Match   *HeaderValueMatch `json:",omitempty"`
}

// HeaderValueMatch is a header_value_match action.
type HeaderValueMatch struct {
	Value       string
	Headers     []HeaderMatch
	NotExpected bool `json:",omitempty"` // expect_match: false
}

// Script is the config of the test's public filter "script": its step
// refuses unless Require ("key=value") holds, then sets Set ("key=value",
// replacing the header's values) in a new context, and returns work when
// Work; the work sets WorkSet and refuses with WorkRefuse (a code) if set.
// Panic "run" or "work" panics there. Lazy: the filter's type does not
// declare Needs.After (a property of the filter, not of a route's
// override, which is of the filter's type).
type Script struct {
	Require    string `json:",omitempty"`
	Set        string `json:",omitempty"`
	Work       bool   `json:",omitempty"`
	WorkSet    string `json:",omitempty"`
	WorkRefuse int    `json:",omitempty"`
	Panic      string `json:",omitempty"`
	Lazy       bool   `json:",omitempty"`
}

// HeaderOp is a HeaderValueOption (or, for a rate limit answer's headers,
// a HeaderValue: Action and Append unused).
type HeaderOp struct {
	Key   string
	Value string
	// Raw: the value is in raw_value (else value); Both: value holds
	// "ignored" and raw_value Value.
	Raw  bool `json:",omitempty"`
	Both bool `json:",omitempty"`
	// Action is append_action's number (0 APPEND_IF_EXISTS_OR_ADD, 1
	// ADD_IF_ABSENT, 2 OVERWRITE_IF_EXISTS_OR_ADD, 3 OVERWRITE_IF_EXISTS;
	// others unknown).
	Action int `json:",omitempty"`
	// Append is the deprecated append field; nil: unset.
	Append    *bool `json:",omitempty"`
	KeepEmpty bool  `json:",omitempty"`
}

// The append actions.
const (
	AppendIfExistsOrAdd    = 0
	AddIfAbsent            = 1
	OverwriteIfExistsOrAdd = 2
	OverwriteIfExists      = 3
)

// Shapes of RPCs: the four methods of grpc.testing.TestService the harness
// serves, one per call shape.
const (
	MethodUnary        = "/grpc.testing.TestService/UnaryCall"
	MethodClientStream = "/grpc.testing.TestService/StreamingInputCall"
	MethodServerStream = "/grpc.testing.TestService/StreamingOutputCall"
	MethodBidi         = "/grpc.testing.TestService/FullDuplexCall"
)

// RPC is one RPC of a case and the answers the side services give it.
type RPC struct {
	// ID is the RPC's x-rpc-id (IDLen characters): the side services and
	// the handler tell RPCs apart by it. The harness gives each RPC a
	// unique one before predicting.
	ID string
	// Method is the :path: one of the Method* constants, or a malformed
	// one.
	Method    string
	Authority string
	Headers   []Header `json:",omitempty"`
	// Deadline: "" none; "passed" (the client's deadline passed before the
	// RPC starts); "short" (DeadlineMillis).
	Deadline string `json:",omitempty"`
	// CancelAtHang: the client cancels the RPC once a side service holds
	// a call of it that hangs.
	CancelAtHang bool `json:",omitempty"`
	// HandlerCode is the code the handler returns; 0: OK.
	HandlerCode int `json:",omitempty"`
	// Authz and RLS are the side services' answers to this RPC's calls,
	// and Proc the processor's to its ext_proc events, by filter name
	// (none: allow with nothing, OK with nothing, CONTINUE).
	Authz map[string]*AuthzAnswer `json:",omitempty"`
	RLS   map[string]*RLSAnswer   `json:",omitempty"`
	Proc  map[string]*ProcScript  `json:",omitempty"`
}

// IDLen is the length of an RPC's ID.
const IDLen = 8

// IDHeader is the request header that carries an RPC's ID.
const IDHeader = "x-rpc-id"

// AuthzAnswer is the authorization server's answer to one Check.
type AuthzAnswer struct {
	// Kind: "ok", "deny", "nostatus" (a CheckResponse without status),
	// "okdenied" (status OK with a denied_response), "error" (the call
	// fails with ErrCode), "hang" (until the call's context ends).
	Kind string
	// ok: the ok_response's headers, headers_to_remove and
	// response_headers_to_add; NoOkResponse: status OK alone.
	Headers      []HeaderOp `json:",omitempty"`
	Remove       []string   `json:",omitempty"`
	RespHeaders  []HeaderOp `json:",omitempty"`
	NoOkResponse bool       `json:",omitempty"`
	// deny: the status's code (0: PERMISSION_DENIED), the
	// denied_response's HTTP status (0: absent) and headers.
	DenyCode    int        `json:",omitempty"`
	DenyHTTP    int        `json:",omitempty"`
	DenyMessage string     `json:",omitempty"`
	DenyHeaders []HeaderOp `json:",omitempty"`
	ErrCode     int        `json:",omitempty"`
}

// RLSAnswer is the rate limit service's answer to one ShouldRateLimit.
type RLSAnswer struct {
	// Kind: "ok", "unknown" (overall code UNKNOWN), "over", "error"
	// (ErrCode), "hang".
	Kind            string
	RequestHeaders  []HeaderOp `json:",omitempty"`
	ResponseHeaders []HeaderOp `json:",omitempty"`
	ErrCode         int        `json:",omitempty"`
}

// JSON renders c, indented.
func (c Case) JSON() string {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// ParseCase reads a Case as JSON renders it.
func ParseCase(s string) (Case, error) {
	var c Case
	err := json.Unmarshal([]byte(s), &c)
	return c, err
}

// ShapeOf returns the call shape of method: "unary", "client", "server",
// "bidi"; "unary" for a method the server does not have.
func ShapeOf(method string) string {
	switch method {
	case MethodClientStream:
		return "client"
	case MethodServerStream:
		return "server"
	case MethodBidi:
		return "bidi"
	}
	return "unary"
}

// WellFormed reports whether method is "/service/method".
func WellFormed(method string) bool {
	return len(method) > 1 && method[0] == '/' && strings.LastIndexByte(method, '/') > 0
}
