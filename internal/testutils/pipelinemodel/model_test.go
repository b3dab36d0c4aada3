package pipelinemodel

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// env is a client whose transport adds what grpc-go's adds.
var env = Env{Transport: []Header{{Key: "content-type", Value: "application/grpc"}, {Key: "user-agent", Value: "grpc-go/1.85.0"}}}

func rpc(id string, headers ...string) RPC {
	r := RPC{ID: id + strings.Repeat("0", IDLen-len(id)), Method: MethodUnary, Authority: Domain}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, Header{Key: headers[i], Value: headers[i+1]})
	}
	return r
}

var catchAll = []Route{{Prefix: "/"}}

func intp(n int) *int { return &n }

// check predicts c and compares each outcome's code (and, when want has
// them, handler and request headers) with want.
func check(t *testing.T, c Case, want ...Outcome) []Outcome {
	t.Helper()
	c.Env = env
	got := Predict(c)
	if len(got) != len(want) {
		t.Fatalf("%d outcomes, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Code != w.Code || g.Handler != w.Handler {
			t.Errorf("RPC %d: code %v handler %v, want %v %v", i, g.Code, g.Handler, w.Code, w.Handler)
		}
		if w.Request != nil && !equalJSON(g.Request, w.Request) {
			t.Errorf("RPC %d: request %v, want %v", i, g.Request, w.Request)
		}
		if w.Trailer != nil && !equalJSON(g.Trailer, w.Trailer) {
			t.Errorf("RPC %d: trailer %v, want %v", i, g.Trailer, w.Trailer)
		}
		if w.Calls != nil && len(w.Calls)+len(g.Calls) > 0 && !equalJSON(g.Calls, w.Calls) {
			t.Errorf("RPC %d: calls %+v, want %+v", i, g.Calls, w.Calls)
		}
	}
	return got
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

var ok = Outcome{Code: codes.OK, Handler: true, Single: true, Chained: true}

// A header one filter sets is what the next one reads: the local rate
// limit's shadow header reaches RBAC's DENY, in any order with a delay.
func TestShadowHeaderReachesRBAC(t *testing.T) {
	lrl := Filter{Name: "lrl", LocalRL: &LocalRL{StatPrefix: "p", MaxTokens: 0, Enabled: true, ShadowHeaders: []HeaderOp{{Key: "x-user", Value: "limited"}}}}
	rbac := Filter{Name: "rbac", RBAC: &RBAC{Rules: &Rules{Deny: true, Policies: []Policy{{Permissions: []Rule{{Any: true}}, Principals: []Rule{{Header: &HeaderMatch{Name: "x-user", Kind: "exact", Value: "limited"}}}}}}}}
	delay := Filter{Name: "delay", Fault: &Fault{Delay: true, DelayPct: 100}}
	for _, fs := range [][]Filter{{lrl, rbac}, {delay, lrl, rbac}, {lrl, delay, rbac}} {
		check(t, Case{Chain: Chain{Filters: fs, Routes: catchAll}, RPCs: []RPC{rpc("a")}},
			Outcome{Code: codes.PermissionDenied})
	}
}

// Buckets are state across the RPCs of a case; an RPC refused before the
// filter spends no token; a route action refuses before any filter.
func TestBucketsAndRouteAction(t *testing.T) {
	c := Case{Chain: Chain{
		Filters: []Filter{
			{Name: "authz", ExtAuthz: &ExtAuthz{}},
			{Name: "lrl", LocalRL: &LocalRL{StatPrefix: "p", MaxTokens: 1, Enabled: true, Enforced: true, ResponseHeaders: []HeaderOp{{Key: "x-limited", Value: "yes"}}}},
		},
		Routes: []Route{{Path: MethodBidi, Forward: true}, {Prefix: "/"}},
	}}
	denied := rpc("d")
	denied.Authz = map[string]*AuthzAnswer{"authz": {Kind: "deny", DenyHTTP: 401}}
	forward := rpc("f")
	forward.Method = MethodBidi
	c.RPCs = []RPC{denied, forward, rpc("a"), rpc("b")}
	check(t, c,
		Outcome{Code: codes.Unauthenticated, Calls: []Call{{Filter: "authz"}}},
		Outcome{Code: codes.Unavailable, Calls: []Call{}},
		ok,
		Outcome{Code: codes.Unavailable, Trailer: map[string][]string{"x-limited": {"yes"}}})
}

// A denial stays a denial whatever its headers; an OK answer with one
// invalid mutation applies none; a failed check is allowed only by
// failure_mode_allow, with its header; RESOURCE_EXHAUSTED is a refusal
// whatever failure_mode_allow says.
func TestExtAuthzAnswers(t *testing.T) {
	authz := Filter{Name: "authz", ExtAuthz: &ExtAuthz{FailureModeAllow: true, FailureModeAllowHeaderAdd: true, StatusOnError: 503}}
	c := Case{Chain: Chain{Filters: []Filter{authz}, Routes: catchAll}}
	answers := []*AuthzAnswer{
		{Kind: "deny", DenyHeaders: []HeaderOp{{Key: "x bad", Value: "v"}, {Key: "grpc-status", Value: "0"}, {Key: "x-why", Value: "policy"}}},
		{Kind: "ok", Headers: []HeaderOp{{Key: "x-user", Value: "alice", Action: OverwriteIfExistsOrAdd}, {Key: "x-tier", Value: "bad\x01"}}},
		{Kind: "error", ErrCode: int(codes.Unavailable)},
		{Kind: "nostatus"},
		{Kind: "error", ErrCode: int(codes.ResourceExhausted)},
		{Kind: "ok", Headers: []HeaderOp{{Key: "X-User", Value: "alice", Action: OverwriteIfExistsOrAdd}, {Key: ":path", Value: "/x"}}},
	}
	for i, a := range answers {
		r := rpc(string(rune('a'+i)), "x-user", "mallory")
		r.Authz = map[string]*AuthzAnswer{"authz": a}
		c.RPCs = append(c.RPCs, r)
	}
	allowed := ok
	allowed.Request = map[string][]string{"x-user": {"mallory"}, "x-envoy-auth-failure-mode-allowed": {"true"}}
	alice := ok
	alice.Request = map[string][]string{"x-user": {"alice"}}
	check(t, c,
		Outcome{Code: codes.PermissionDenied, Trailer: map[string][]string{"x-why": {"policy"}}},
		Outcome{Code: codes.Unavailable},
		allowed, allowed,
		Outcome{Code: codes.Unavailable},
		alice)
}

// The mutation rules in Envoy's order: disallow_expression, then
// allow_expression, then disallow_all.
func TestMutationRules(t *testing.T) {
	rules := &MutationRules{DisallowAll: true, Allow: "x-.*", Disallow: "x-user"}
	for _, tc := range []struct {
		key  string
		want bool
	}{{"x-user", false}, {"x-tier", true}, {"other", false}} {
		if got := rules.allows(tc.key); got != tc.want {
			t.Errorf("allows(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

// The rate limit service's request headers are appended, and read by the
// filters after it; OVER_LIMIT is refused with x-envoy-ratelimited unless
// not enforced; a missing header drops its descriptor, and no descriptor
// makes no call.
func TestGlobalRateLimit(t *testing.T) {
	rl := Filter{Name: "rl", RateLimit: &GlobalRL{Domain: "d"}}
	rbac := Filter{Name: "rbac", RBAC: &RBAC{Rules: &Rules{Policies: []Policy{{Permissions: []Rule{{Any: true}}, Principals: []Rule{{Header: &HeaderMatch{Name: "x-user", Kind: "exact", Value: "a,b"}}}}}}}}
	c := Case{Chain: Chain{Filters: []Filter{rl, rbac}, Routes: catchAll,
		RateLimits: []RateLimit{{Actions: []Action{{Header: IDHeader, Key: "rpc"}, {Header: "x-tier", Key: "tier"}}}}}}
	appended := rpc("a", "x-user", "a", "x-tier", "gold")
	appended.RLS = map[string]*RLSAnswer{"rl": {Kind: "ok", RequestHeaders: []HeaderOp{{Key: "x-user", Value: "b"}}}}
	over := rpc("b", "x-tier", "gold")
	over.RLS = map[string]*RLSAnswer{"rl": {Kind: "over", ResponseHeaders: []HeaderOp{{Key: "x-why", Value: "quota"}}}}
	nocall := rpc("c", "x-user", "a,b")
	c.RPCs = []RPC{appended, over, nocall}
	want := ok
	want.Request = map[string][]string{"x-user": {"a", "b"}, "x-tier": {"gold"}}
	want.Calls = []Call{{Filter: "rl", Domain: "d", Descriptors: [][]Header{{{Key: "rpc", Value: appended.ID}, {Key: "tier", Value: "gold"}}}}}
	check(t, c, want,
		Outcome{Code: codes.Unavailable, Trailer: map[string][]string{"x-why": {"quota"}, "x-envoy-ratelimited": {"true"}}},
		Outcome{Code: codes.OK, Handler: true, Calls: []Call{}})
}

// Header bounds: exactly as Envoy counts, the 60 KiB default only on chains
// with a side-call filter; nothing else runs for an RPC over them.
func TestHeaderBounds(t *testing.T) {
	r := rpc("a")
	_, size := HeaderList(env, &r)
	pad := func(n int) RPC {
		p := rpc("p")
		p.Headers = []Header{{Key: "x-pad", Len: n - size - len("x-pad")}}
		return p
	}
	lrl := Filter{Name: "lrl", LocalRL: &LocalRL{StatPrefix: "p", MaxTokens: 1, Enabled: true, Enforced: true}}
	c := Case{Chain: Chain{MaxRequestHeadersKB: 1, Filters: []Filter{lrl}, Routes: catchAll}, RPCs: []RPC{pad(1025), pad(1024)}}
	check(t, c, Outcome{Code: codes.Internal}, ok)
	// Without a side-call filter, no bound; with one, 60 KiB.
	c = Case{Chain: Chain{Routes: catchAll}, RPCs: []RPC{pad(DefaultMaxHeaderBytes + 1)}}
	check(t, c, ok)
	c.Chain.Filters = []Filter{{Name: "rl", RateLimit: &GlobalRL{Domain: "d"}}}
	check(t, c, Outcome{Code: codes.Internal})
	// A -bin value counts as its unpadded base64.
	b := rpc("b", "x-data-bin", "\x00\x01")
	_, bsize := HeaderList(env, &b)
	if want := size + len("x-data-bin") + 3; bsize != want {
		t.Errorf("size with a 2-byte binary header: %d, want %d", bsize, want)
	}
}

// Public filters: undeclared work and panics fail INTERNAL; a header set
// by one is required by the next; work's refusal stops the RPC before the
// program's interceptors.
func TestScript(t *testing.T) {
	set := Filter{Name: "set", Script: &Script{Set: "x-tier=gold", Work: true}}
	req := Filter{Name: "req", Script: &Script{Require: "x-tier=gold"}}
	lazy := Filter{Name: "lazy", Script: &Script{Work: true, Lazy: true}}
	refuse := Filter{Name: "refuse", Script: &Script{Work: true, WorkRefuse: int(codes.Aborted)}}
	for _, tc := range []struct {
		fs   []Filter
		want codes.Code
	}{
		{[]Filter{set, req}, codes.OK},
		{[]Filter{req, set}, codes.Unauthenticated},
		{[]Filter{set, lazy}, codes.Internal},
		{[]Filter{refuse, set}, codes.Aborted},
	} {
		got := Predict(Case{Env: env, Chain: Chain{Filters: tc.fs, Routes: catchAll}, RPCs: []RPC{rpc("a", "x-tier", "lead")}})
		if got[0].Code != tc.want || got[0].Single != (tc.want == codes.OK) {
			t.Errorf("%v: %v (single interceptor %v), want %v", tc.fs, got[0].Code, got[0].Single, tc.want)
		}
	}
}

// Generated cases survive JSON, and the model predicts every one without
// panicking; shrinking always makes something smaller.
func TestGenerate(t *testing.T) {
	for seed := range uint64(300) {
		c := GenerateSeed(seed, env)
		back, err := ParseCase(c.JSON())
		if err != nil || back.JSON() != c.JSON() {
			t.Fatalf("seed %d: JSON round trip: %v", seed, err)
		}
		if n := len(Predict(c)); n != len(c.RPCs) {
			t.Fatalf("seed %d: %d outcomes for %d RPCs", seed, n, len(c.RPCs))
		}
		for _, s := range Shrink(c) {
			if len(s.JSON()) >= len(c.JSON()) {
				t.Fatalf("seed %d: a shrunk case is no smaller:\n%s", seed, s.JSON())
			}
			Predict(s)
		}
	}
}
