package e2e_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pm "github.com/proxyless-grpc/xds/internal/testutils/pipelinemodel"
)

// pfRegressions are the differences the pipeline fuzzer found between the
// real server and the model, each as the case it shrank to, replayed on
// every test run (TestPipelineRegressions): each is a bug that was fixed in
// the server.
var pfRegressions = []struct {
	name string
	c    pm.Case
}{
	// A rate limit header_value_match on a binary header sent twice saw
	// only the first value, so a client chose what was matched by
	// repeating the header; Envoy matches every value joined with ",".
	// Here the match fails, so no descriptor and no call.
	{name: "BinaryHeaderSentTwice", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{{Name: "rl", RateLimit: &pm.GlobalRL{Domain: "d"}}},
			Routes: []pm.Route{{Prefix: "/", Overrides: map[string]*pm.Override{"rl": {RateLimit: &pm.RateLimitPerRoute{RateLimits: []pm.RateLimit{{Actions: []pm.Action{
				{Header: pm.IDHeader, Key: "rpc"},
				{Match: &pm.HeaderValueMatch{Value: "m", Headers: []pm.HeaderMatch{{Name: "x-data-bin", Kind: "exact", Value: "AAE"}}}},
			}}}}}}}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodUnary, Authority: pm.Domain, Headers: []pm.Header{{Key: "x-data-bin", Value: "\x00\x01"}, {Key: "x-data-bin", Value: "\x01\x02"}}}},
	}},
	// A fault abort with status OK ended a client-streaming RPC without
	// the one response message its client expects, which the client
	// reported as INTERNAL; a unary RPC got an empty message and OK, and
	// now so does a client-streaming one.
	{name: "FaultAbortOKClientStreaming", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{{Name: "fault", Fault: &pm.Fault{Abort: &pm.FaultAbort{GRPC: new(int), Pct: 100}}}},
			Routes:  []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodClientStream, Authority: pm.Domain}, {Method: pm.MethodUnary, Authority: pm.Domain}},
	}},
	// A response without a message (here an RPC RBAC refused after the
	// processor's call started) went to the processor as response headers
	// with end_of_stream but without grpc-status, and no response_trailers
	// event followed: the processor never learnt the status of a refused
	// or failed RPC. A Trailers-Only response's headers carry it.
	{name: "ExtProcTrailersOnlyStatus", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{
				{Name: "proc0", ExtProc: &pm.ExtProc{Mode: pm.ProcMode{RequestHeaders: "SEND", ResponseTrailers: "SKIP"}}},
				{Name: "rbac1", RBAC: &pm.RBAC{Rules: &pm.Rules{Policies: []pm.Policy{{
					Permissions: []pm.Rule{{Any: true}},
					Principals:  []pm.Rule{{Header: &pm.HeaderMatch{Name: "x-tier", Kind: "exact", Value: "1"}}},
				}}}}},
			},
			Routes: []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodUnary, Authority: pm.Domain}},
	}},
	// A refusal after a processor's call started (here a local rate
	// limit's, with its response_headers_to_add x-limited) set its
	// trailers straight on the stream: the processor's Trailers-Only
	// event neither carried them nor could its answer remove them. The
	// headers and trailers the filters' work sets once a call started are
	// now held for the response path, as Envoy's local reply carries them
	// through the encoder filters.
	{name: "ExtProcRefusalTrailersThroughCalls", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{
				{Name: "p", ExtProc: &pm.ExtProc{Mode: pm.ProcMode{ResponseTrailers: "SEND"}}},
				{Name: "lrl", LocalRL: &pm.LocalRL{StatPrefix: "p0", Enabled: true, Enforced: true, ResponseHeaders: []pm.HeaderOp{{Key: "x-limited", Value: "yes"}}}},
			},
			Routes: []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodUnary, Authority: pm.Domain, Proc: map[string]*pm.ProcScript{"p": {ResponseHeaders: &pm.ProcAnswer{Remove: []string{"x-limited"}}}}}},
	}},
	// An immediate_response with OK on the response headers of a
	// client-streaming RPC ended it without the one message its client
	// expects (the client reported INTERNAL); it now gets an empty one, as
	// a unary RPC does.
	{name: "ExtProcImmediateOKClientStreaming", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{{Name: "proc0", ExtProc: &pm.ExtProc{Mode: pm.ProcMode{RequestHeaders: "SEND", ResponseHeaders: "SEND", ResponseTrailers: "SEND"}}}},
			Routes:  []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodClientStream, Authority: pm.Domain, Proc: map[string]*pm.ProcScript{"proc0": {ResponseHeaders: &pm.ProcAnswer{Kind: "immediate"}}}}},
	}},
	// A client-streaming RPC a fault ended OK after a processor's call
	// started went to the processor as a response without a message, and
	// then got its empty message, the response_trailers it asked for never
	// sent; it is now a response with its message, as a unary RPC's.
	{name: "ExtProcOKEndClientStreaming", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{
				{Name: "proc0", ExtProc: &pm.ExtProc{Mode: pm.ProcMode{ResponseTrailers: "SEND"}}},
				{Name: "fault1", Fault: &pm.Fault{Abort: &pm.FaultAbort{GRPC: new(int), Pct: 100}}},
			},
			Routes: []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodClientStream, Authority: pm.Domain}},
	}},
	// After a processor answered the trailers with an immediate_response
	// of OK, the processor before it got response_trailers with
	// grpc-status 2 and httpfilter.ErrSkipHandler's text; it now gets 0.
	{name: "ExtProcImmediateOKTrailers", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{
				{Name: "proc0", ExtProc: &pm.ExtProc{Mode: pm.ProcMode{RequestHeaders: "SKIP", ResponseTrailers: "SEND"}}},
				{Name: "proc1", ExtProc: &pm.ExtProc{Mode: pm.ProcMode{ResponseTrailers: "SEND"}}},
			},
			Routes: []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodUnary, Authority: pm.Domain, Proc: map[string]*pm.ProcScript{"proc1": {ResponseTrailers: &pm.ProcAnswer{Kind: "immediate"}}}}},
	}},
	// A refusal (here a processor's header mutation disallow_is_error
	// refuses) that the processor before it turned into OK with an
	// immediate_response on its Trailers-Only headers left a
	// client-streaming RPC without its one response (the client reported
	// a cardinality violation); it is now an OK end with an empty one.
	{name: "ExtProcRefusalMadeOKClientStreaming", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{
				{Name: "proc2", ExtProc: &pm.ExtProc{Mode: pm.ProcMode{ResponseHeaders: "SEND", ResponseTrailers: "SEND"}}},
				{Name: "proc3", ExtProc: &pm.ExtProc{Mode: pm.ProcMode{ResponseTrailers: "SEND"}, Rules: &pm.MutationRules{DisallowAll: true, DisallowIsError: true, Allow: "x-a|x-tier", Disallow: "x-user"}}},
			},
			Routes: []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodClientStream, Authority: pm.Domain, Proc: map[string]*pm.ProcScript{
			"proc2": {ResponseHeaders: &pm.ProcAnswer{Kind: "immediate"}},
			"proc3": {RequestHeaders: &pm.ProcAnswer{Set: []pm.HeaderOp{{Key: "x-user", Value: "bob", Action: 1}}}},
		}}},
	}},
	// A unary RPC whose handler failed, made OK by a processor's
	// immediate_response on its Trailers-Only headers, failed INTERNAL
	// ("0 response messages"); it now ends OK with an empty response.
	{name: "ExtProcHandlerErrorMadeOK", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{{Name: "proc2", ExtProc: &pm.ExtProc{Mode: pm.ProcMode{RequestHeaders: "SEND", ResponseTrailers: "SKIP"}}}},
			Routes:  []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{{Method: pm.MethodUnary, Authority: pm.Domain, HandlerCode: 9, Proc: map[string]*pm.ProcScript{"proc2": {ResponseHeaders: &pm.ProcAnswer{Kind: "immediate"}}}}},
	}},
}

// pfKnownCases are the smallest cases the fuzzer found of each deviation
// in pfKnown: each differs from the model when the model does not accept
// it (TestPipelineKnownDeviations), until the server is changed.
var pfKnownCases = map[string]pm.Case{}

// TestPipelineKnownDeviations runs each case of pfKnownCases with the
// model not accepting its deviation: it must still differ; one that no
// longer does was fixed, and moves to pfRegressions.
func TestPipelineKnownDeviations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := startPFFixture(ctx, t)
	for name := range pfKnown {
		t.Run(name, func(t *testing.T) {
			c, ok := pfKnownCases[name]
			if !ok {
				t.Fatalf("pfKnown has %q, pfKnownCases no case of it", name)
			}
			accept := map[string]bool{}
			for k := range pfKnown {
				accept[k] = k != name
			}
			c.Env = f.env
			if diff := f.runWith(ctx, t, c, accept); diff == "" {
				t.Errorf("the server no longer deviates (%s): take it out of pfKnown, and its case to pfRegressions", name)
			} else {
				t.Logf("as reported:\n%s", diff)
			}
			if diff := f.run(ctx, t, c); diff != "" {
				t.Errorf("with the deviation accepted:\n%s", diff)
			}
		})
	}
}

// pfPinned are hand-written cases of what the seeds reach rarely, held to
// the model on every run (TestPipelineRegressions): two processors, a
// processor's answer on the trailers, the order of response headers along
// the response path, a processor's request headers read by RBAC.
var pfPinned = []struct {
	name string
	c    pm.Case
}{
	// The second processor's immediate_response on the request headers is
	// a local reply through the first one's call (response headers with
	// end_of_stream), not through its own.
	{name: "ExtProcTwoLocalReply", c: pm.Case{
		Chain: pm.Chain{Filters: []pm.Filter{pfProcFilter("a", pfSendAll), pfProcFilter("b", pfSendAll)}, Routes: []pm.Route{{Prefix: "/"}}},
		RPCs: []pm.RPC{
			{Method: pm.MethodUnary, Authority: pm.Domain, Proc: map[string]*pm.ProcScript{"b": {RequestHeaders: &pm.ProcAnswer{Kind: "immediate", Code: int(codes.Aborted)}}}},
			{Method: pm.MethodBidi, Authority: pm.Domain, Proc: map[string]*pm.ProcScript{"b": {RequestHeaders: &pm.ProcAnswer{Kind: "fail", Code: int(codes.Internal)}}}},
		},
	}},
	// An immediate_response on the trailers replaces the status, its
	// headers in the trailers, and the processor before sees the new
	// status; one on the response headers ends the RPC there.
	{name: "ExtProcTrailers", c: pm.Case{
		Chain: pm.Chain{Filters: []pm.Filter{pfProcFilter("a", pfSendAll), pfProcFilter("b", pfSendAll)}, Routes: []pm.Route{{Prefix: "/"}}},
		RPCs: []pm.RPC{
			{Method: pm.MethodServerStream, Authority: pm.Domain, Proc: map[string]*pm.ProcScript{"b": {ResponseTrailers: &pm.ProcAnswer{Kind: "immediate", Code: int(codes.DataLoss), Set: []pm.HeaderOp{{Key: "x-why", Value: "b"}}}}}},
			{Method: pm.MethodClientStream, Authority: pm.Domain, Proc: map[string]*pm.ProcScript{"b": {ResponseHeaders: &pm.ProcAnswer{Kind: "immediate", Code: int(codes.DataLoss)}}}},
			{Method: pm.MethodUnary, Authority: pm.Domain, Proc: map[string]*pm.ProcScript{"a": {ResponseTrailers: &pm.ProcAnswer{Set: []pm.HeaderOp{{Key: "x-t", Value: "a"}}}}}},
		},
	}},
	// A response without a message (a failed handler) is Trailers-Only:
	// one response_headers event with end_of_stream for the processor
	// that sends the headers, response_trailers for the one that skips
	// them, in reverse http_filters order; an immediate_response there
	// replaces the status the one before sees.
	{name: "ExtProcTrailersOnlyOrder", c: pm.Case{
		Chain: pm.Chain{Filters: []pm.Filter{pfProcFilter("a", pfSendAll), pfProcFilter("b", pm.ProcMode{ResponseHeaders: "SKIP", ResponseTrailers: "SEND"})}, Routes: []pm.Route{{Prefix: "/"}}},
		RPCs: []pm.RPC{
			{Method: pm.MethodUnary, Authority: pm.Domain, HandlerCode: int(codes.NotFound)},
			{Method: pm.MethodBidi, Authority: pm.Domain, HandlerCode: int(codes.NotFound), Proc: map[string]*pm.ProcScript{"b": {ResponseTrailers: &pm.ProcAnswer{Kind: "immediate", Code: int(codes.DataLoss)}}}},
		},
	}},
	// ext_authz's response headers join the response at its place: the
	// processor before it removes them, the one after it cannot.
	{name: "ExtProcResponseHeaderOrder", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{pfProcFilter("a", pm.ProcMode{}), {Name: "authz", ExtAuthz: &pm.ExtAuthz{}}, pfProcFilter("b", pm.ProcMode{})},
			Routes:  []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{
			{Method: pm.MethodUnary, Authority: pm.Domain,
				Authz: map[string]*pm.AuthzAnswer{"authz": {Kind: "ok", RespHeaders: []pm.HeaderOp{{Key: "x-a", Value: "authz"}, {Key: "x-b", Value: "authz"}}}},
				Proc: map[string]*pm.ProcScript{
					"a": {ResponseHeaders: &pm.ProcAnswer{Remove: []string{"x-a"}}},
					"b": {ResponseHeaders: &pm.ProcAnswer{Remove: []string{"x-b"}, Set: []pm.HeaderOp{{Key: "x-b2", Value: "b"}}}},
				}},
		},
	}},
	// RBAC after the processor judges the headers it left.
	{name: "ExtProcHeadersReachRBAC", c: pm.Case{
		Chain: pm.Chain{
			Filters: []pm.Filter{pfProcFilter("p", pm.ProcMode{ResponseTrailers: "SEND"}), {Name: "rbac", RBAC: &pm.RBAC{Rules: &pm.Rules{Policies: []pm.Policy{{
				Permissions: []pm.Rule{{Any: true}},
				Principals:  []pm.Rule{{Header: &pm.HeaderMatch{Name: "x-user", Kind: "exact", Value: "alice"}}},
			}}}}}},
			Routes: []pm.Route{{Prefix: "/"}},
		},
		RPCs: []pm.RPC{
			{Method: pm.MethodUnary, Authority: pm.Domain, Headers: []pm.Header{{Key: "x-user", Value: "bob"}},
				Proc: map[string]*pm.ProcScript{"p": {RequestHeaders: &pm.ProcAnswer{Set: []pm.HeaderOp{{Key: "x-user", Value: "alice", Action: pm.OverwriteIfExistsOrAdd}}}}}},
			{Method: pm.MethodServerStream, Authority: pm.Domain, Headers: []pm.Header{{Key: "x-user", Value: "bob"}}},
		},
	}},
}

var pfSendAll = pm.ProcMode{RequestHeaders: "SEND", ResponseHeaders: "SEND", ResponseTrailers: "SEND"}

func pfProcFilter(name string, mode pm.ProcMode) pm.Filter {
	return pm.Filter{Name: name, ExtProc: &pm.ExtProc{Mode: mode}}
}

// TestPipelineRegressions replays pfRegressions and pfPinned through the
// real server and holds it to the model.
func TestPipelineRegressions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := startPFFixture(ctx, t)
	for _, tc := range append(pfRegressions[:len(pfRegressions):len(pfRegressions)], pfPinned...) {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.Env = f.env
			if diff := f.run(ctx, t, c); diff != "" {
				f.fail(ctx, t, tc.name, c, diff)
			}
		})
	}
}
