package pipelinemodel

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
)

// Outcome is what one RPC of a case gives: what the client gets and what
// the server's user code and the side services see.
type Outcome struct {
	Code codes.Code
	// Message, when set, is a substring of the status message (for the
	// statuses the server writes itself).
	Message string `json:",omitempty"`
	// Single, Chained and Handler: whether the program's single
	// interceptor (grpc.UnaryInterceptor / StreamInterceptor), its chained
	// interceptor and the handler ran.
	Single, Chained, Handler bool
	// Request is the request metadata they saw (Observe'd); nil when none
	// ran.
	Request map[string][]string `json:",omitempty"`
	// Header and Trailer are the response headers and trailers the client
	// got (Observe'd).
	Header  map[string][]string `json:",omitempty"`
	Trailer map[string][]string `json:",omitempty"`
	// Calls are the side calls the side services received, in order.
	Calls []Call `json:",omitempty"`
	// Proc are the events the ext_proc processor received, in order.
	Proc []ProcEvent `json:",omitempty"`
	// Ended: the RPC ended by its own deadline or cancellation while a
	// side call hung. The client's status is its own then; whether it got
	// the response headers the server had set races with the server's
	// writing them, and is not predicted; nor are the events a processor
	// gets after the one that hung (Proc is a prefix of them), which race
	// with the ends of their streams.
	Ended bool `json:",omitempty"`
}

// Call is one side call a side service received: a Check (HeaderMap) or a
// ShouldRateLimit (Domain, Descriptors), by the filter Filter.
type Call struct {
	Filter      string
	HeaderMap   map[string][]string `json:",omitempty"`
	Domain      string              `json:",omitempty"`
	Descriptors [][]Header          `json:",omitempty"`
}

// environment are the headers every RPC carries that the model does not
// compare: the client transport's, and the RPC's ID.
var environment = map[string]bool{":authority": true, "content-type": true, "user-agent": true, "grpc-accept-encoding": true, IDHeader: true}

// maxShown is the longest value Observe shows as it is; longer ones are
// shown by their length.
const maxShown = 64

// Observe returns what the model compares of headers md: every header but
// the environment's, values longer than 64 bytes as their length; nil when
// nothing is left. The harness passes what it observes through it too.
func Observe(md map[string][]string) map[string][]string {
	var out map[string][]string
	for k, vs := range md {
		if environment[k] || len(vs) == 0 {
			continue
		}
		if out == nil {
			out = map[string][]string{}
		}
		for _, v := range vs {
			if len(v) > maxShown {
				v = fmt.Sprintf("<%d bytes>", len(v))
			}
			out[k] = append(out[k], v)
		}
	}
	return out
}

// HTTPCode is gRPC's mapping of an HTTP status to a code.
func HTTPCode(status int) codes.Code {
	switch status {
	case 400:
		return codes.Internal
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.Unimplemented
	case 429, 502, 503, 504:
		return codes.Unavailable
	}
	return codes.Unknown
}

// model is the state of a case across its RPCs: the token buckets.
type model struct {
	c       *Case
	accept  map[string]bool // Options.Accept
	buckets map[string]int  // tokens left, by bucket identity
}

// Options change what Predict predicts.
type Options struct {
	// Accept names deviations of the server from the semantics that were
	// reported and not yet decided (the Accept* constants), for the model
	// to predict as the server behaves, so that a property test finds the
	// others. Each earlier one was fixed in the server (e2e's
	// pfRegressions).
	Accept map[string]bool
}

// The deviations Options.Accept may name: none at present.

// Predict returns the outcome of each RPC of c, in order.
func Predict(c Case) []Outcome { return PredictWith(c, Options{}) }

// PredictWith is Predict with options.
func PredictWith(c Case, o Options) []Outcome {
	m := &model{c: &c, accept: o.Accept, buckets: map[string]int{}}
	out := make([]Outcome, len(c.RPCs))
	for i := range c.RPCs {
		out[i] = m.rpc(&c.RPCs[i])
	}
	return out
}

// rpcState is one RPC on its way through the pipeline.
type rpcState struct {
	r  *RPC
	md map[string][]string // the request metadata as the filters left it
	// calls are the filters' parts of the response path, in http_filters
	// order: the ext_proc calls started (and not refused by their own
	// processor), and the response headers allowed RPCs get.
	calls []*respCall
	// direct are the trailers set on the RPC itself: a refusal's, an
	// immediate_response's.
	direct  map[string][]string
	out     Outcome
	stopped bool // the RPC has ended
	okEnd   bool // it ended OK without its handler
}

func (s *rpcState) refuse(code codes.Code, msg string, trailers map[string][]string) {
	s.out.Code, s.out.Message, s.stopped = code, msg, true
	for k, vs := range trailers {
		s.direct[k] = append(s.direct[k], vs...)
	}
}

// Metadata returns the request metadata the server's transport hands the
// tap for r (before any filter): :authority, the transport's headers, the
// RPC's ID and its headers, in order.
func Metadata(env Env, r *RPC) map[string][]string {
	md := map[string][]string{":authority": {r.Authority}}
	for _, h := range env.Transport {
		md[h.Key] = append(md[h.Key], h.V())
	}
	md[IDHeader] = append(md[IDHeader], r.ID)
	for _, h := range r.Headers {
		md[h.Key] = append(md[h.Key], h.V())
	}
	return md
}

// HeaderList returns the number and size of r's request headers as Envoy
// counts them against max_headers_count and max_request_headers_kb: every
// header, pseudo-headers included (:method POST, :scheme http, :path,
// :authority), te, each value of a name on its own, name and value in bytes,
// a binary value as its unpadded base64 (the wire form of gRPC clients).
func HeaderList(env Env, r *RPC) (n, size int) {
	add := func(k, v string) {
		n++
		l := len(v)
		if strings.HasSuffix(k, "-bin") {
			l = base64.RawStdEncoding.EncodedLen(len(v))
		}
		size += len(k) + l
	}
	add(":method", "POST")
	add(":scheme", "http")
	add("te", "trailers")
	add(":path", r.Method)
	for k, vs := range Metadata(env, r) {
		for _, v := range vs {
			add(k, v)
		}
	}
	return n, size
}

// DefaultMaxHeaderBytes is the bound of a chain that sets no
// max_request_headers_kb and sends requests to a side service (Envoy's
// default, 60 KiB).
const DefaultMaxHeaderBytes = 60 << 10

func (m *model) rpc(r *RPC) Outcome {
	c := &m.c.Chain
	s := &rpcState{r: r, direct: map[string][]string{}}
	// The client's own refusals: nothing reaches the server.
	switch {
	case r.Deadline == "passed":
		return Outcome{Code: codes.DeadlineExceeded}
	}
	// 1. The :path.
	if !WellFormed(r.Method) {
		return Outcome{Code: codes.Unimplemented, Message: "malformed method name"}
	}
	// 2. The header bounds.
	maxBytes := c.MaxRequestHeadersKB << 10
	if maxBytes == 0 && slices.ContainsFunc(c.Filters, func(f Filter) bool { return f.CallsOut() }) {
		maxBytes = DefaultMaxHeaderBytes
	}
	if n, size := HeaderList(m.c.Env, r); maxBytes > 0 && size > maxBytes {
		return Outcome{Code: codes.Internal, Message: "max_request_headers_kb"}
	} else if c.MaxHeadersCount > 0 && n > c.MaxHeadersCount {
		return Outcome{Code: codes.Internal, Message: "max_headers_count"}
	}
	s.md = Metadata(m.c.Env, r)
	// 3. The virtual host and route; the route's action before any filter.
	if r.Authority != Domain {
		return Outcome{Code: codes.Unavailable, Message: "no virtual host and route"}
	}
	route := m.route(r, s.md)
	if route == nil {
		return Outcome{Code: codes.Unavailable, Message: "no virtual host and route"}
	}
	if route.Forward {
		return Outcome{Code: codes.Unavailable, Message: "non_forwarding_action"}
	}
	// 4. The filters, in order.
	for i := range c.Filters {
		f := &c.Filters[i]
		o := route.Overrides[f.Name]
		if o != nil && o.Disabled || f.Disabled && o == nil {
			continue
		}
		switch {
		case f.RBAC != nil:
			m.rbac(s, f, o)
		case f.LocalRL != nil:
			m.localRL(s, f, o)
		case f.Fault != nil:
			m.fault(s, f, o)
		case f.ExtAuthz != nil:
			m.extAuthz(s, f)
		case f.RateLimit != nil:
			m.rateLimit(s, f, o, route)
		case f.Script != nil:
			m.script(s, f, o)
		case f.ExtProc != nil:
			m.extProc(s, f, o)
		}
		if s.stopped {
			break
		}
	}
	switch {
	case s.out.Ended:
		// The client's own deadline or cancellation ended it.
	case s.okEnd:
		// A local reply with OK: an empty message when the client expects
		// one.
		shape := ShapeOf(r.Method)
		eos := shape == "server" || shape == "bidi"
		m.respond(s, codes.OK, eos)
	case s.stopped:
		// A local reply: through the calls started before the filter that
		// refused.
		m.respond(s, s.out.Code, true)
	default:
		// 5. The program's interceptors and handler, then the response
		// path: a handler that fails sends no message.
		s.out.Single, s.out.Chained, s.out.Handler = true, true, true
		s.out.Request = Observe(s.md)
		code := codes.Code(r.HandlerCode)
		s.out.Code = code
		m.respond(s, code, code != codes.OK)
	}
	if !s.out.Ended {
		s.out.Trailer = Observe(s.direct)
	}
	return s.out
}

// route returns the first route that matches r; nil if none.
func (m *model) route(r *RPC, md map[string][]string) *Route {
	for i := range m.c.Chain.Routes {
		rt := &m.c.Chain.Routes[i]
		switch {
		case rt.Path != "":
			if r.Method != rt.Path {
				continue
			}
		case !strings.HasPrefix(r.Method, rt.Prefix):
			continue
		}
		ok := true
		for _, h := range rt.Headers {
			ok = ok && matchHeader(h, md, false)
		}
		if ok {
			return rt
		}
	}
	return nil
}

// matchHeader applies a header matcher to md's values of its name, joined
// with ","; wire: a binary header is seen as its unpadded base64 (as RBAC
// and rate limit descriptors see it).
func matchHeader(h HeaderMatch, md map[string][]string, wire bool) bool {
	vs := md[h.Name]
	if len(vs) == 0 {
		return false
	}
	if wire && strings.HasSuffix(h.Name, "-bin") {
		w := make([]string, len(vs))
		for i, v := range vs {
			w[i] = base64.RawStdEncoding.EncodeToString([]byte(v))
		}
		vs = w
	}
	v := strings.Join(vs, ",")
	switch h.Kind {
	case "present":
		return true
	case "exact":
		return v == h.Value
	case "prefix":
		return strings.HasPrefix(v, h.Value)
	}
	return false
}

// --- RBAC ---

func (m *model) rbac(s *rpcState, f *Filter, o *Override) {
	cfg := f.RBAC
	if o != nil && o.RBAC != nil {
		if cfg = o.RBAC.RBAC; cfg == nil {
			return // an RBACPerRoute without rbac disables the filter
		}
	}
	rules := cfg.Rules
	if rules == nil {
		return
	}
	matched := false
	for _, p := range rules.Policies {
		if anyRule(p.Permissions, s) && anyRule(p.Principals, s) {
			matched = true
			break
		}
	}
	if matched == rules.Deny {
		s.refuse(codes.PermissionDenied, "RBAC: access denied", nil)
	}
}

func anyRule(rs []Rule, s *rpcState) bool {
	for _, r := range rs {
		switch {
		case r.Any:
			return true
		case r.Header != nil:
			if matchHeader(*r.Header, s.md, true) {
				return true
			}
		case r.Path != "":
			if s.r.Method == r.Path {
				return true
			}
		case r.PathPrefix != "":
			if strings.HasPrefix(s.r.Method, r.PathPrefix) {
				return true
			}
		case r.Authenticated:
			// Plaintext: never authenticated.
		}
	}
	return false
}

// --- local rate limit ---

func (m *model) localRL(s *rpcState, f *Filter, o *Override) {
	cfg, level := f.LocalRL, "filter"
	if o != nil && o.LocalRL != nil {
		cfg, level = o.LocalRL, "route"
	}
	if cfg.NoBucket || !cfg.Enabled {
		return
	}
	key := f.Name + "|" + level + "|" + cfg.StatPrefix + "|" + strconv.Itoa(cfg.MaxTokens)
	left, ok := m.buckets[key]
	if !ok {
		left = cfg.MaxTokens
	}
	if left > 0 {
		m.buckets[key] = left - 1
		return
	}
	m.buckets[key] = 0
	if !cfg.Enforced {
		for _, h := range cfg.ShadowHeaders {
			if h.Value != "" || h.KeepEmpty {
				apply(s.md, h.Key, h.Value, h.Action)
			}
		}
		return
	}
	status := cfg.Status
	if status < 400 {
		status = 429
	}
	code := HTTPCode(status)
	if cfg.AsResourceExhausted {
		code = codes.ResourceExhausted
	}
	tr := map[string][]string{}
	for _, h := range cfg.ResponseHeaders {
		if h.Value != "" || h.KeepEmpty {
			apply(tr, h.Key, h.Value, h.Action)
		}
	}
	s.refuse(code, "local_rate_limited", tr)
}

// apply applies one header mutation to md as Envoy's append_action says.
func apply(md map[string][]string, key, value string, action int) {
	_, exists := md[key]
	switch action {
	case AppendIfExistsOrAdd:
		md[key] = append(md[key], value)
	case AddIfAbsent:
		if !exists {
			md[key] = []string{value}
		}
	case OverwriteIfExistsOrAdd:
		md[key] = []string{value}
	case OverwriteIfExists:
		if exists {
			md[key] = []string{value}
		}
	}
}

// --- fault ---

func (m *model) fault(s *rpcState, f *Filter, o *Override) {
	cfg := f.Fault
	if o != nil && o.Fault != nil {
		cfg = o.Fault
	}
	// The delay (a millisecond) changes no outcome.
	a := cfg.Abort
	if a == nil || a.Pct == 0 {
		return
	}
	var code codes.Code
	switch {
	case a.Header:
		vs := s.md["x-envoy-fault-abort-grpc-request"]
		if len(vs) == 0 {
			return
		}
		n, err := strconv.ParseUint(vs[0], 10, 64)
		if err != nil {
			return
		}
		code = grpcCode(n)
	case a.GRPC != nil:
		code = grpcCode(uint64(*a.GRPC))
	default:
		code = HTTPCode(a.HTTP)
	}
	msg := a.Body
	if msg == "" {
		msg = "fault filter abort"
	}
	if code == codes.OK {
		// The RPC ends OK at once, without the handler (gRFC A33); a
		// client that expects one response (unary, client streaming) gets
		// an empty one.
		s.out.Code, s.stopped, s.okEnd = codes.OK, true, true
		return
	}
	s.refuse(code, msg, nil)
}

func grpcCode(n uint64) codes.Code {
	if n > uint64(codes.Unauthenticated) {
		return codes.Unknown
	}
	return codes.Code(n)
}

// --- script ---

func (m *model) script(s *rpcState, f *Filter, o *Override) {
	cfg := f.Script
	if o != nil && o.Script != nil {
		cfg = o.Script
	}
	internal := `"` + f.Name
	if cfg.Panic == "run" {
		s.refuse(codes.Internal, internal, nil)
		return
	}
	if k, v, ok := strings.Cut(cfg.Require, "="); ok {
		if vs := s.md[k]; len(vs) == 0 || vs[0] != v {
			s.refuse(codes.Unauthenticated, "script", nil)
			return
		}
	}
	if k, v, ok := strings.Cut(cfg.Set, "="); ok {
		s.md[k] = []string{v}
	}
	if !cfg.Work && cfg.Panic != "work" {
		return
	}
	if f.Script.Lazy { // the filter's type does not declare Needs.After
		s.refuse(codes.Internal, internal, nil)
		return
	}
	if cfg.Panic == "work" {
		s.refuse(codes.Internal, internal, nil)
		return
	}
	if k, v, ok := strings.Cut(cfg.WorkSet, "="); ok {
		s.md[k] = []string{v}
	}
	if cfg.WorkRefuse != 0 {
		s.refuse(codes.Code(cfg.WorkRefuse), "script work", nil)
	}
}

// --- the side calls' common rules (gRFC A92, A102) ---

// MaxSideMessage is the receive limit of the harness's side services: a
// request larger than that is refused by the service's gRPC with
// RESOURCE_EXHAUSTED before its handler sees it.
const MaxSideMessage = 64 << 10

// reserved reports whether key is a header no side channel may change
// (pseudo-headers, host, grpc-*): such a mutation is ignored.
func reserved(key string) bool {
	return strings.HasPrefix(key, ":") || key == "host" || strings.HasPrefix(key, "grpc-")
}

// validName reports whether key (lower-cased) may be a header a side
// service sets: a-z 0-9 - _ . only.
func validName(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// answerHeader judges one header of a side service's answer: its key
// lower-cased and its value (raw_value when set); keep false for a
// reserved one (ignored); ok false for an invalid one.
func answerHeader(h HeaderOp) (key, value string, keep, ok bool) {
	key = strings.ToLower(h.Key)
	if reserved(key) {
		return "", "", false, true
	}
	if !validName(key) {
		return "", "", false, false
	}
	value = h.Value
	if h.Both && value == "" {
		value = BothIgnored // raw_value empty: value is used
	}
	if !strings.HasSuffix(key, "-bin") {
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < 0x20 || c > 0x7e {
				return "", "", false, false
			}
		}
	}
	if len(value) >= 16<<10 {
		return "", "", false, false
	}
	return key, value, true, true
}

// BothIgnored is the value field of a HeaderOp with Both set.
const BothIgnored = "ignored"

// option judges a HeaderValueOption of an ext_authz answer: answerHeader,
// then its action (the deprecated append wins when set; an unknown action
// is invalid).
func option(h HeaderOp) (key, value string, action int, keep, ok bool) {
	key, value, keep, ok = answerHeader(h)
	if !keep || !ok {
		return "", "", 0, keep, ok
	}
	action = h.Action
	if h.Append != nil {
		action = OverwriteIfExistsOrAdd
		if *h.Append {
			action = AppendIfExistsOrAdd
		}
	}
	if action < 0 || action > 3 {
		return "", "", 0, false, false
	}
	return key, value, action, true, true
}

// sideSize is a (generous) lower bound of the size of a side call's request
// carrying these strings; the generator keeps requests either far below
// MaxSideMessage or far above it.
func sideSize(parts ...string) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// hang returns how a side call that hangs ends for s's RPC, with the
// filter's timeout short or not: the RPC's own end (DEADLINE_EXCEEDED,
// CANCELED), or a failed call (ok true) when the filter's timeout ends it
// first.
func (s *rpcState) hang(short bool) (code codes.Code, failed bool) {
	switch {
	case s.r.CancelAtHang:
		return codes.Canceled, false
	case short:
		return 0, true
	case s.r.Deadline == "short":
		return codes.DeadlineExceeded, false
	}
	// The generator never leaves a hang unbounded; the long timeout ends
	// it.
	return 0, true
}

// --- ext_authz ---

func (m *model) extAuthz(s *rpcState, f *Filter) {
	cfg := f.ExtAuthz
	onError := codes.PermissionDenied
	if cfg.StatusOnError != 0 {
		onError = HTTPCode(cfg.StatusOnError)
	}
	if cfg.NotEnabled {
		if cfg.DenyAtDisable {
			s.refuse(onError, "deny_at_disable", nil)
		}
		return
	}
	// The Check: header_map of the current headers the config lets through.
	hm := map[string][]string{}
	var parts []string
	for k, vs := range s.md {
		if matchesAny(cfg.Disallowed, k) || len(cfg.Allowed) > 0 && !matchesAny(cfg.Allowed, k) {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.StdEncoding.EncodeToString([]byte(v))
			}
			hm[k] = append(hm[k], v)
			parts = append(parts, k, v)
		}
	}
	parts = append(parts, s.r.Method, s.r.Authority)
	if sideSize(parts...) > MaxSideMessage {
		// The service's gRPC refuses the request: RESOURCE_EXHAUSTED, a
		// refusal whatever failure_mode_allow says.
		s.refuse(onError, "ext_authz", nil)
		return
	}
	s.out.Calls = append(s.out.Calls, Call{Filter: f.Name, HeaderMap: Observe(hm)})
	a := s.r.Authz[f.Name]
	if a == nil {
		a = &AuthzAnswer{Kind: "ok"}
	}
	failed := func() {
		if !cfg.FailureModeAllow {
			s.refuse(onError, "ext_authz", nil)
			return
		}
		if cfg.FailureModeAllowHeaderAdd {
			s.md["x-envoy-auth-failure-mode-allowed"] = []string{"true"}
		}
	}
	switch a.Kind {
	case "hang":
		code, isFailure := s.hang(cfg.ShortTimeout)
		if isFailure {
			failed()
		} else {
			s.refuse(code, "", nil)
			s.out.Ended = true
		}
	case "error":
		if codes.Code(a.ErrCode) == codes.ResourceExhausted {
			s.refuse(onError, "ext_authz", nil)
			return
		}
		failed()
	case "nostatus", "okdenied":
		failed()
	case "deny":
		m.authzDeny(s, cfg, a, onError)
	case "ok":
		m.authzAllow(s, cfg, a, onError)
	}
}

func matchesAny(ms []StringMatch, k string) bool {
	for _, sm := range ms {
		if sm.Exact != "" && k == sm.Exact || sm.Prefix != "" && strings.HasPrefix(k, sm.Prefix) {
			return true
		}
	}
	return false
}

func (m *model) authzDeny(s *rpcState, cfg *ExtAuthz, a *AuthzAnswer, onError codes.Code) {
	code := codes.PermissionDenied
	if a.DenyHTTP != 0 {
		code = HTTPCode(a.DenyHTTP)
	}
	tr := map[string][]string{}
	for _, h := range a.DenyHeaders {
		key, value, action, keep, ok := option(h)
		if !ok {
			if cfg.Rules != nil && cfg.Rules.DisallowIsError {
				s.refuse(onError, "ext_authz", nil)
				return
			}
			continue
		}
		if keep {
			apply(tr, key, value, action)
		}
	}
	s.refuse(code, a.DenyMessage, tr)
}

// regexps are the compiled expressions of mutation rules.
var (
	regexpsMu sync.Mutex
	regexps   = map[string]*regexp.Regexp{}
)

// allows reports whether the mutation rules let the service change key,
// in Envoy's order.
func (r *MutationRules) allows(key string) bool {
	if r == nil {
		return true
	}
	full := func(expr string) bool {
		regexpsMu.Lock()
		re, ok := regexps[expr]
		if !ok {
			re = regexp.MustCompile(`^(?:` + expr + `)$`)
			regexps[expr] = re
		}
		regexpsMu.Unlock()
		return re.MatchString(key)
	}
	switch {
	case r.Disallow != "" && full(r.Disallow):
		return false
	case r.Allow != "" && full(r.Allow):
		return true
	}
	return !r.DisallowAll
}

func (m *model) authzAllow(s *rpcState, cfg *ExtAuthz, a *AuthzAnswer, onError codes.Code) {
	rules := cfg.Rules
	isError := rules != nil && rules.DisallowIsError
	type set struct {
		key, value string
		action     int
	}
	var sets []set
	for _, h := range a.Headers {
		key, value, action, keep, ok := option(h)
		if !ok {
			s.refuse(onError, "cannot be applied", nil)
			return
		}
		if !keep {
			continue
		}
		if !rules.allows(key) {
			if isError {
				s.refuse(onError, "cannot be applied", nil)
				return
			}
			continue
		}
		sets = append(sets, set{key, value, action})
	}
	var removes []string
	for _, k := range a.Remove {
		k = strings.ToLower(k)
		if reserved(k) || !validName(k) {
			continue
		}
		if !rules.allows(k) {
			if isError {
				s.refuse(onError, "cannot be applied", nil)
				return
			}
			continue
		}
		removes = append(removes, k)
	}
	resp := map[string][]string{}
	for _, h := range a.RespHeaders {
		key, value, action, keep, ok := option(h)
		if !ok {
			s.refuse(onError, "cannot be applied", nil)
			return
		}
		if keep {
			apply(resp, key, value, action)
		}
	}
	for _, st := range sets {
		apply(s.md, st.key, st.value, st.action)
	}
	for _, k := range removes {
		delete(s.md, k)
	}
	if len(resp) > 0 {
		// Added at the filter's place on the response path.
		s.calls = append(s.calls, &respCall{adds: resp})
	}
}

// --- global rate limit ---

func (m *model) rateLimit(s *rpcState, f *Filter, o *Override, route *Route) {
	cfg := f.RateLimit
	if cfg.NotEnabled {
		return
	}
	domain, limits := cfg.Domain, m.c.Chain.RateLimits
	if o != nil && o.RateLimit != nil {
		if len(o.RateLimit.RateLimits) > 0 {
			limits = o.RateLimit.RateLimits
		}
		if o.RateLimit.Domain != "" {
			domain = o.RateLimit.Domain
		}
	}
	var ds [][]Header
	for _, rl := range limits {
		if d, ok := descriptor(rl, s); ok {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return
	}
	onError := HTTPCode(500)
	if cfg.StatusOnError != 0 {
		onError = HTTPCode(cfg.StatusOnError)
	}
	var parts []string
	for _, d := range ds {
		for _, e := range d {
			parts = append(parts, e.Key, e.Value)
		}
	}
	if sideSize(parts...) > MaxSideMessage {
		s.refuse(onError, "ratelimit", nil)
		return
	}
	s.out.Calls = append(s.out.Calls, Call{Filter: f.Name, Domain: domain, Descriptors: observeDescriptors(ds)})
	a := s.r.RLS[f.Name]
	if a == nil {
		a = &RLSAnswer{Kind: "ok"}
	}
	failed := func() {
		if cfg.FailureModeDeny {
			s.refuse(onError, "ratelimit", nil)
		}
	}
	switch a.Kind {
	case "hang":
		code, isFailure := s.hang(cfg.ShortTimeout)
		if isFailure {
			failed()
		} else {
			s.refuse(code, "", nil)
			s.out.Ended = true
		}
	case "error":
		if codes.Code(a.ErrCode) == codes.ResourceExhausted {
			s.refuse(onError, "ratelimit", nil)
			return
		}
		failed()
	case "over":
		if cfg.NotEnforced {
			return
		}
		tr := map[string][]string{}
		for _, h := range a.ResponseHeaders {
			if k, v, keep, ok := answerHeader(h); keep && ok {
				tr[k] = append(tr[k], v)
			}
		}
		tr["x-envoy-ratelimited"] = []string{"true"}
		status := cfg.LimitedStatus
		if status < 400 {
			status = 429
		}
		code := HTTPCode(status)
		if cfg.AsResourceExhausted {
			code = codes.ResourceExhausted
		}
		s.refuse(code, "over the limit", tr)
	case "ok", "unknown":
		adds := map[string][]string{}
		for _, h := range a.ResponseHeaders {
			if k, v, keep, ok := answerHeader(h); keep && ok {
				adds[k] = append(adds[k], v)
			}
		}
		if len(adds) > 0 {
			// Added at the filter's place on the response path.
			s.calls = append(s.calls, &respCall{adds: adds})
		}
		for _, h := range a.RequestHeaders {
			if k, v, keep, ok := answerHeader(h); keep && ok {
				s.md[k] = append(s.md[k], v)
			}
		}
	}
}

// descriptor builds rl's descriptor from s's current headers; ok false
// when an action has nothing to read (the descriptor is left out).
func descriptor(rl RateLimit, s *rpcState) (d []Header, ok bool) {
	for _, a := range rl.Actions {
		switch {
		case a.Header != "":
			vs := s.md[a.Header]
			switch a.Header {
			case ":path":
				vs = []string{s.r.Method}
			case ":authority":
				vs = []string{s.r.Authority}
			}
			if len(vs) == 0 {
				return nil, false
			}
			v := vs[0]
			if strings.HasSuffix(a.Header, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			d = append(d, Header{Key: a.Key, Value: v})
		case a.Generic != "":
			k := a.Key
			if k == "" {
				k = "generic_key"
			}
			d = append(d, Header{Key: k, Value: a.Generic})
		case a.Match != nil:
			all := true
			for _, h := range a.Match.Headers {
				all = all && matchHeader(h, s.md, true)
			}
			if all == a.Match.NotExpected {
				return nil, false
			}
			d = append(d, Header{Key: "header_match", Value: a.Match.Value})
		}
	}
	return d, len(d) > 0
}

// observeDescriptors shows long descriptor values by their length, as
// Observe does.
func observeDescriptors(ds [][]Header) [][]Header {
	out := make([][]Header, len(ds))
	for i, d := range ds {
		for _, e := range d {
			if len(e.Value) > maxShown {
				e.Value = fmt.Sprintf("<%d bytes>", len(e.Value))
			}
			out[i] = append(out[i], e)
		}
	}
	return out
}
