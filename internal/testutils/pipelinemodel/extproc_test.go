package pipelinemodel

import (
	"encoding/json"
	"testing"

	"google.golang.org/grpc/codes"
)

func proc(name string, mode ProcMode) Filter {
	return Filter{Name: name, ExtProc: &ExtProc{Mode: mode}}
}

func withProc(r RPC, name string, p *ProcScript) RPC {
	if r.Proc == nil {
		r.Proc = map[string]*ProcScript{}
	}
	r.Proc[name] = p
	return r
}

func ev(filter, event string) ProcEvent { return ProcEvent{Filter: filter, Event: event} }

func evStatus(filter, event string, eos bool, code codes.Code) ProcEvent {
	n := int(code)
	return ProcEvent{Filter: filter, Event: event, EndOfStream: eos, Status: &n}
}

// checkProc predicts c's one RPC and compares its code, whether the handler
// ran, and the processor's events (without request headers) with want.
func checkProc(t *testing.T, what string, c Case, code codes.Code, handler bool, want ...ProcEvent) Outcome {
	t.Helper()
	c.Env = env
	if c.Chain.Routes == nil {
		c.Chain.Routes = catchAll
	}
	got := Predict(c)[0]
	var events []ProcEvent
	for _, e := range got.Proc {
		e.Headers = nil
		events = append(events, e)
	}
	if got.Code != code || got.Handler != handler || !equalJSON(events, want) {
		t.Errorf("%s: code %v handler %v events %s; want %v %v %s", what, got.Code, got.Handler, toJSON(events), code, handler, toJSON(want))
	}
	return got
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

var send = ProcMode{RequestHeaders: "SEND", ResponseHeaders: "SEND", ResponseTrailers: "SEND"}

// The events of an RPC the processor lets through, in order; a response
// without a message sends its headers with end_of_stream and its status,
// and no trailers; a call that skips the headers gets the trailers.
func TestExtProcEvents(t *testing.T) {
	c := Case{Chain: Chain{Filters: []Filter{proc("p", send)}}, RPCs: []RPC{rpc("a")}}
	checkProc(t, "OK", c, codes.OK, true,
		ev("p", EventRequestHeaders), ev("p", EventResponseHeaders), evStatus("p", EventResponseTrailers, false, codes.OK))
	c.RPCs[0].HandlerCode = int(codes.NotFound)
	checkProc(t, "handler fails", c, codes.NotFound, true,
		ev("p", EventRequestHeaders), evStatus("p", EventResponseHeaders, true, codes.NotFound))
	c.Chain.Filters[0].ExtProc.Mode.ResponseHeaders = "SKIP"
	checkProc(t, "handler fails, headers skipped", c, codes.NotFound, true,
		ev("p", EventRequestHeaders), evStatus("p", EventResponseTrailers, false, codes.NotFound))
	// DEFAULT: request and response headers, no trailers.
	c = Case{Chain: Chain{Filters: []Filter{proc("p", ProcMode{})}}, RPCs: []RPC{rpc("a")}}
	checkProc(t, "DEFAULT", c, codes.OK, true, ev("p", EventRequestHeaders), ev("p", EventResponseHeaders))
}

// RBAC before ext_proc refuses before the processor hears of the RPC; after
// it, it judges the headers the processor left, and its refusal is a local
// reply through the call.
func TestExtProcWithRBAC(t *testing.T) {
	requireAlice := Filter{Name: "rbac", RBAC: &RBAC{Rules: &Rules{Policies: []Policy{{Permissions: []Rule{{Any: true}}, Principals: []Rule{{Header: &HeaderMatch{Name: "x-user", Kind: "exact", Value: "alice"}}}}}}}}
	setAlice := &ProcScript{RequestHeaders: &ProcAnswer{Set: []HeaderOp{{Key: "x-user", Value: "alice", Action: OverwriteIfExistsOrAdd}}}}
	mode := ProcMode{ResponseTrailers: "SEND"}

	c := Case{Chain: Chain{Filters: []Filter{requireAlice, proc("p", mode)}}, RPCs: []RPC{withProc(rpc("a", "x-user", "bob"), "p", setAlice)}}
	checkProc(t, "rbac first", c, codes.PermissionDenied, false)

	c.Chain.Filters = []Filter{proc("p", mode), requireAlice}
	got := checkProc(t, "ext_proc first", c, codes.OK, true,
		ev("p", EventRequestHeaders), ev("p", EventResponseHeaders), evStatus("p", EventResponseTrailers, false, codes.OK))
	if !equalJSON(got.Request, map[string][]string{"x-user": {"alice"}}) {
		t.Errorf("the handler saw %v, want the processor's x-user", got.Request)
	}
	if h := got.Proc[0].Headers; !equalJSON(h, map[string][]string{":method": {"POST"}, ":path": {MethodUnary}, ":scheme": {"http"}, "x-user": {"bob"}}) {
		t.Errorf("request_headers carried %v", h)
	}

	c.RPCs[0].Proc = nil
	checkProc(t, "ext_proc first, refused after", c, codes.PermissionDenied, false,
		ev("p", EventRequestHeaders), evStatus("p", EventResponseHeaders, true, codes.PermissionDenied))
}

// Failures: UNAVAILABLE unless failure_mode_allow, which ends processing;
// RESOURCE_EXHAUSTED always refuses; a stream that ends OK ends
// processing; a protocol error and a disabled immediate_response are
// failures.
func TestExtProcFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		a     *ProcAnswer
		allow bool
		code  codes.Code
		more  bool // the response events follow
	}{
		{"fail", &ProcAnswer{Kind: "fail", Code: int(codes.Internal)}, false, codes.Unavailable, false},
		{"fail, allowed", &ProcAnswer{Kind: "fail", Code: int(codes.Internal)}, true, codes.OK, false},
		{"resource exhausted, allowed", &ProcAnswer{Kind: "fail", Code: int(codes.ResourceExhausted)}, true, codes.ResourceExhausted, false},
		{"close", &ProcAnswer{Kind: "close"}, false, codes.OK, false},
		{"wrong event", &ProcAnswer{Kind: "wrong"}, false, codes.Unavailable, false},
		{"immediate", &ProcAnswer{Kind: "immediate", Code: int(codes.PermissionDenied)}, false, codes.PermissionDenied, false},
		{"immediate OK", &ProcAnswer{Kind: "immediate"}, false, codes.OK, false},
		{"invalid mutation", &ProcAnswer{Set: []HeaderOp{{Key: "X-User", Value: "v"}}}, true, codes.Internal, false},
		{"reserved ignored", &ProcAnswer{Set: []HeaderOp{{Key: "te", Value: "v"}, {Key: ":path", Value: "/x"}}}, false, codes.OK, true},
	} {
		f := proc("p", send)
		f.ExtProc.FailureModeAllow = tc.allow
		c := Case{Chain: Chain{Filters: []Filter{f}}, RPCs: []RPC{withProc(rpc("a"), "p", &ProcScript{RequestHeaders: tc.a})}}
		handler := tc.code == codes.OK && tc.a.Kind != "immediate"
		want := []ProcEvent{ev("p", EventRequestHeaders)}
		if tc.more {
			want = append(want, ev("p", EventResponseHeaders), evStatus("p", EventResponseTrailers, false, codes.OK))
		}
		checkProc(t, tc.name, c, tc.code, handler, want...)
	}
	f := proc("p", send)
	f.ExtProc.DisableImmediateResponse = true
	c := Case{Chain: Chain{Filters: []Filter{f}}, RPCs: []RPC{withProc(rpc("a"), "p", &ProcScript{RequestHeaders: &ProcAnswer{Kind: "immediate", Code: int(codes.PermissionDenied)}})}}
	checkProc(t, "immediate disabled", c, codes.Unavailable, false, ev("p", EventRequestHeaders))
}

// Two processors: one refusing on the request headers is a local reply
// through the one before it, not through itself; one answering the
// trailers with an immediate_response changes the status the one before it
// sees.
func TestExtProcTwo(t *testing.T) {
	c := Case{Chain: Chain{Filters: []Filter{proc("a", send), proc("b", send)}}, RPCs: []RPC{
		withProc(rpc("a"), "b", &ProcScript{RequestHeaders: &ProcAnswer{Kind: "immediate", Code: int(codes.Aborted)}}),
	}}
	checkProc(t, "b refuses", c, codes.Aborted, false,
		ev("a", EventRequestHeaders), ev("b", EventRequestHeaders), evStatus("a", EventResponseHeaders, true, codes.Aborted))

	c.RPCs = []RPC{withProc(rpc("a"), "b", &ProcScript{ResponseTrailers: &ProcAnswer{Kind: "immediate", Code: int(codes.DataLoss), Set: []HeaderOp{{Key: "x-why", Value: "b"}}}})}
	got := checkProc(t, "b's trailers", c, codes.DataLoss, true,
		ev("a", EventRequestHeaders), ev("b", EventRequestHeaders), ev("b", EventResponseHeaders), ev("a", EventResponseHeaders),
		evStatus("b", EventResponseTrailers, false, codes.OK), evStatus("a", EventResponseTrailers, false, codes.DataLoss))
	if !equalJSON(got.Trailer, map[string][]string{"x-why": {"b"}}) {
		t.Errorf("trailers %v, want the immediate_response's", got.Trailer)
	}

	// An immediate_response on the response headers ends the RPC there:
	// the call before it sees nothing more.
	c.RPCs = []RPC{withProc(rpc("a"), "b", &ProcScript{ResponseHeaders: &ProcAnswer{Kind: "immediate", Code: int(codes.DataLoss)}})}
	checkProc(t, "b's headers", c, codes.DataLoss, true,
		ev("a", EventRequestHeaders), ev("b", EventRequestHeaders), ev("b", EventResponseHeaders))
}

// Response headers added by a filter (ext_authz's) join the response at the
// filter's place: a processor before it in http_filters sees them and may
// remove them, one after it cannot.
func TestExtProcResponseHeaderOrder(t *testing.T) {
	authz := Filter{Name: "authz", ExtAuthz: &ExtAuthz{}}
	remove := &ProcScript{ResponseHeaders: &ProcAnswer{Remove: []string{"x-a"}, Set: []HeaderOp{{Key: "x-p", Value: "1"}}}}
	r := rpc("a")
	r.Authz = map[string]*AuthzAnswer{"authz": {Kind: "ok", RespHeaders: []HeaderOp{{Key: "x-a", Value: "authz"}}}}
	r = withProc(r, "p", remove)
	c := Case{Chain: Chain{Filters: []Filter{proc("p", ProcMode{}), authz}}, RPCs: []RPC{r}}
	got := checkProc(t, "processor first", c, codes.OK, true, ev("p", EventRequestHeaders), ev("p", EventResponseHeaders))
	if !equalJSON(got.Header, map[string][]string{"x-p": {"1"}}) {
		t.Errorf("processor first: response headers %v, want x-a removed", got.Header)
	}
	c.Chain.Filters = []Filter{authz, proc("p", ProcMode{})}
	got = checkProc(t, "authz first", c, codes.OK, true, ev("p", EventRequestHeaders), ev("p", EventResponseHeaders))
	if !equalJSON(got.Header, map[string][]string{"x-a": {"authz"}, "x-p": {"1"}}) {
		t.Errorf("authz first: response headers %v, want x-a kept", got.Header)
	}
}

// A fault abort with OK after a call is a local reply through it: a unary
// RPC's response has its (empty) message, a server-streaming one has none.
func TestExtProcOKEnd(t *testing.T) {
	abort := Filter{Name: "fault", Fault: &Fault{Abort: &FaultAbort{GRPC: intp(0), Pct: 100}}}
	c := Case{Chain: Chain{Filters: []Filter{proc("p", send), abort}}, RPCs: []RPC{rpc("a")}}
	checkProc(t, "unary", c, codes.OK, false,
		ev("p", EventRequestHeaders), ev("p", EventResponseHeaders), evStatus("p", EventResponseTrailers, false, codes.OK))
	c.RPCs[0].Method = MethodServerStream
	checkProc(t, "server streaming", c, codes.OK, false,
		ev("p", EventRequestHeaders), evStatus("p", EventResponseHeaders, true, codes.OK))
}

// Mutations: removes first, then sets in order; an empty value removes the
// header it would have written; the rules skip a change, or refuse the
// RPC with disallow_is_error.
func TestExtProcMutations(t *testing.T) {
	a := &ProcAnswer{
		Remove: []string{"X-Tier"},
		Set: []HeaderOp{
			{Key: "x-tier", Value: "gold", Action: AddIfAbsent},
			{Key: "x-user", Value: "", Action: OverwriteIfExistsOrAdd},
			{Key: "x-a", Value: "", KeepEmpty: true},
			{Key: "x-new", Value: "n"},
		},
	}
	f := proc("p", ProcMode{})
	c := Case{Chain: Chain{Filters: []Filter{f}}, RPCs: []RPC{withProc(rpc("a", "x-tier", "lead", "x-user", "bob"), "p", &ProcScript{RequestHeaders: a})}}
	got := checkProc(t, "no rules", c, codes.OK, true, ev("p", EventRequestHeaders), ev("p", EventResponseHeaders))
	if want := map[string][]string{"x-tier": {"gold"}, "x-a": {""}, "x-new": {"n"}}; !equalJSON(got.Request, want) {
		t.Errorf("no rules: the handler saw %v, want %v", got.Request, want)
	}
	c.Chain.Filters[0].ExtProc.Rules = &MutationRules{Disallow: "x-new"}
	got = checkProc(t, "x-new disallowed", c, codes.OK, true, ev("p", EventRequestHeaders), ev("p", EventResponseHeaders))
	if want := map[string][]string{"x-tier": {"gold"}, "x-a": {""}}; !equalJSON(got.Request, want) {
		t.Errorf("x-new disallowed: the handler saw %v, want %v", got.Request, want)
	}
	c.Chain.Filters[0].ExtProc.Rules.DisallowIsError = true
	checkProc(t, "x-new disallowed, is error", c, codes.Internal, false, ev("p", EventRequestHeaders))
}

// A Trailers-Only response (here a local rate limit's refusal, then a
// failed handler) is one response_headers event with end_of_stream at the
// trailers' turn, in reverse http_filters order with the trailers events
// of calls that skip the headers; its answer acts on the trailers, the
// refusal's among them.
func TestExtProcTrailersOnly(t *testing.T) {
	lrl := Filter{Name: "lrl", LocalRL: &LocalRL{StatPrefix: "p", Enabled: true, Enforced: true, ResponseHeaders: []HeaderOp{{Key: "x-limited", Value: "yes"}}}}
	eos := &ProcScript{ResponseHeaders: &ProcAnswer{Remove: []string{"x-limited"}, Set: []HeaderOp{{Key: "x-p", Value: "1"}}}}
	c := Case{Chain: Chain{Filters: []Filter{proc("p", send), lrl}}, RPCs: []RPC{withProc(rpc("a"), "p", eos)}}
	got := checkProc(t, "refused", c, codes.Unavailable, false,
		ev("p", EventRequestHeaders), evStatus("p", EventResponseHeaders, true, codes.Unavailable))
	if got.Header != nil || !equalJSON(got.Trailer, map[string][]string{"x-p": {"1"}}) {
		t.Errorf("refused: headers %v trailers %v, want the processor's trailers alone", got.Header, got.Trailer)
	}

	r := rpc("b")
	r.HandlerCode = int(codes.NotFound)
	c = Case{Chain: Chain{Filters: []Filter{proc("a", send), proc("b", ProcMode{ResponseHeaders: "SKIP", ResponseTrailers: "SEND"})}}, RPCs: []RPC{r}}
	checkProc(t, "handler fails", c, codes.NotFound, true,
		ev("a", EventRequestHeaders), ev("b", EventRequestHeaders),
		evStatus("b", EventResponseTrailers, false, codes.NotFound), evStatus("a", EventResponseHeaders, true, codes.NotFound))
}
