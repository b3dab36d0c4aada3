package pipelinemodel

import (
	"fmt"
	"math/rand/v2"
)

// Generate returns a random case for env's client. It draws from small
// sets of header names and values, so that what one filter sets another
// reads (RBAC and the script filter require x-user and x-tier, the fault
// filter reads its abort header, descriptors read x-user; ext_authz,
// the local rate limit's shadow headers, the rate limit service and the
// script filter and the ext_proc processor set them), and it favours the
// interactions that broke before, or are easy to break: a header set by one filter and read by the next, a failure mode
// with a request over a bound, a refusal after the tap with the program's
// interceptors, a route action with side-call filters, headers at the
// bounds' edges, a processor's headers read by the filters after it and a
// refusal after a processor's call started.
func Generate(r *rand.Rand, env Env) Case {
	g := &gen{r: r}
	// The case's token: a header and value that setters write and readers
	// look for more often than chance would have them meet.
	g.tokKey, g.tokVal = pick(g, readKeys...), pick(g, userVals...)
	c := Case{Env: env}
	g.chain(&c.Chain)
	n := 1 + g.r.IntN(6)
	for i := range n {
		c.RPCs = append(c.RPCs, g.rpc(&c, i))
	}
	return c
}

// GenerateSeed returns the case of seed (Generate with a PCG source).
func GenerateSeed(seed uint64, env Env) Case {
	return Generate(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), env)
}

type gen struct {
	r              *rand.Rand
	tokKey, tokVal string
	// tokenProcs are the ext_proc filters whose processor sets the token
	// on the request headers, mostly.
	tokenProcs map[string]bool
}

// setKV is a header and value a filter sets: often the case's token.
func (g *gen) setKV() (string, string) {
	if g.chance(0.5) {
		return g.tokKey, g.tokVal
	}
	return pick(g, setKeys...), pick(g, userVals...)
}

// readKV is a header and value a filter looks for: often the token.
func (g *gen) readKV() (string, string) {
	if g.chance(0.5) {
		return g.tokKey, g.tokVal
	}
	return pick(g, readKeys...), pick(g, userVals...)
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func pick[T any](g *gen, xs ...T) T { return xs[g.r.IntN(len(xs))] }

// The names and values the generator draws from.
var (
	readKeys  = []string{"x-user", "x-tier", "x-a"}
	setKeys   = []string{"x-user", "x-tier", "x-a", "x-new"}
	userVals  = []string{"alice", "bob", "gold", "1"}
	abortHdr  = "x-envoy-fault-abort-grpc-request"
	methods   = []string{MethodUnary, MethodClientStream, MethodServerStream, MethodBidi}
	httpCodes = []int{0, 400, 401, 403, 404, 429, 500, 503}
)

func (g *gen) chain(c *Chain) {
	n := 1 + g.r.IntN(4)
	kinds := []string{"rbac", "ext_authz", "local_ratelimit", "fault", "ratelimit", "script", "ext_proc", "ext_proc"}
	hasRL := false
	for i := range n {
		k := pick(g, kinds...)
		f := Filter{Name: fmt.Sprintf("%s%d", shortKind(k), i)}
		switch k {
		case "rbac":
			f.RBAC = g.rbac()
		case "ext_authz":
			f.ExtAuthz = g.extAuthz()
		case "local_ratelimit":
			f.LocalRL = g.localRL(f.Name, false)
		case "fault":
			f.Fault = g.fault()
		case "ratelimit":
			f.RateLimit = g.globalRL(f.Name)
			hasRL = true
		case "script":
			f.Script = g.script()
		case "ext_proc":
			f.ExtProc = g.extProc()
		}
		f.Disabled = g.chance(0.15)
		c.Filters = append(c.Filters, f)
	}
	if len(c.Filters) >= 2 && g.chance(0.4) {
		g.interact(c)
	}
	if hasRL {
		for range 1 + g.r.IntN(2) {
			c.RateLimits = append(c.RateLimits, g.rateLimit())
		}
	}
	// Routes: a few specific ones, then (mostly) a catch-all.
	for range g.r.IntN(3) {
		c.Routes = append(c.Routes, g.route(c, false))
	}
	if g.chance(0.9) {
		c.Routes = append(c.Routes, g.route(c, true))
	}
	if g.chance(0.3) {
		c.MaxRequestHeadersKB = pick(g, 1, 2, 8, 1024)
	}
	if g.chance(0.2) {
		c.MaxHeadersCount = 8 + g.r.IntN(5)
	}
}

// interact makes one filter set the case's token and a later one read it,
// both deciding in the same phase or not: the pairs that broke before.
func (g *gen) interact(c *Chain) {
	i := g.r.IntN(len(c.Filters) - 1)
	j := i + 1 + g.r.IntN(len(c.Filters)-i-1)
	tok := g.tokKey + "=" + g.tokVal
	setter := Filter{Name: fmt.Sprintf("script%d", i), Script: &Script{Set: tok, Work: g.chance(0.3)}}
	switch g.r.IntN(3) {
	case 0:
		setter = Filter{Name: fmt.Sprintf("lrl%d", i), LocalRL: &LocalRL{StatPrefix: "p0", Enabled: true,
			ShadowHeaders: []HeaderOp{{Key: g.tokKey, Value: g.tokVal, Action: pick(g, AppendIfExistsOrAdd, OverwriteIfExistsOrAdd)}}}}
	case 1:
		// A processor that sets the token on the request headers (its
		// answers are the RPCs').
		setter = Filter{Name: fmt.Sprintf("proc%d", i), ExtProc: g.extProc()}
		setter.ExtProc.Mode.RequestHeaders = pick(g, "", "SEND")
		if g.tokenProcs == nil {
			g.tokenProcs = map[string]bool{}
		}
		g.tokenProcs[setter.Name] = true
	}
	reader := Filter{Name: fmt.Sprintf("script%d", j), Script: &Script{Require: tok}}
	if g.chance(0.6) {
		h := HeaderMatch{Name: g.tokKey, Kind: "exact", Value: g.tokVal}
		reader = Filter{Name: fmt.Sprintf("rbac%d", j), RBAC: &RBAC{Rules: &Rules{Deny: g.chance(0.5),
			Policies: []Policy{{Permissions: []Rule{{Any: true}}, Principals: []Rule{{Header: &h}}}}}}}
	}
	c.Filters[i], c.Filters[j] = setter, reader
}

func shortKind(k string) string {
	switch k {
	case "ext_authz":
		return "authz"
	case "local_ratelimit":
		return "lrl"
	case "ratelimit":
		return "rl"
	case "ext_proc":
		return "proc"
	}
	return k
}

func (g *gen) headerMatch() HeaderMatch {
	switch g.r.IntN(4) {
	case 0:
		return HeaderMatch{Name: pick(g, readKeys...), Kind: "present"}
	case 1:
		return HeaderMatch{Name: pick(g, readKeys...), Kind: "prefix", Value: pick(g, "a", "g", "b")}
	case 2:
		return HeaderMatch{Name: "x-data-bin", Kind: "exact", Value: "AAE"} // the wire form of 0x00 0x01
	}
	k, v := g.readKV()
	return HeaderMatch{Name: k, Kind: "exact", Value: v}
}

func (g *gen) rule(principal bool) Rule {
	switch g.r.IntN(6) {
	case 0:
		return Rule{Any: true}
	case 1:
		if principal {
			return Rule{Authenticated: true}
		}
		return Rule{Path: pick(g, methods...)}
	case 2:
		return Rule{PathPrefix: pick(g, "/grpc.testing.TestService/Streaming", "/grpc.testing.TestService/")}
	}
	h := g.headerMatch()
	return Rule{Header: &h}
}

func (g *gen) rules() *Rules {
	rs := &Rules{Deny: g.chance(0.5)}
	for range g.r.IntN(3) {
		p := Policy{}
		for range 1 + g.r.IntN(2) {
			p.Permissions = append(p.Permissions, g.rule(false))
		}
		for range 1 + g.r.IntN(2) {
			p.Principals = append(p.Principals, g.rule(true))
		}
		rs.Policies = append(rs.Policies, p)
	}
	return rs
}

func (g *gen) rbac() *RBAC {
	c := &RBAC{}
	if g.chance(0.9) {
		c.Rules = g.rules()
	}
	if g.chance(0.2) {
		c.ShadowRules = g.rules()
	}
	return c
}

func (g *gen) extAuthz() *ExtAuthz {
	c := &ExtAuthz{
		FailureModeAllow:          g.chance(0.5),
		FailureModeAllowHeaderAdd: g.chance(0.5),
		ShortTimeout:              g.chance(0.3),
	}
	if g.chance(0.1) {
		c.NotEnabled, c.DenyAtDisable = true, g.chance(0.5)
	}
	if g.chance(0.3) {
		c.StatusOnError = pick(g, 401, 403, 429, 500, 503)
	}
	if g.chance(0.25) {
		// The RPC's ID always reaches the service.
		c.Allowed = []StringMatch{{Exact: IDHeader}, pick(g, StringMatch{Prefix: "x-u"}, StringMatch{Exact: "x-tier"}, StringMatch{Prefix: "x-"})}
	}
	if g.chance(0.25) {
		c.Disallowed = []StringMatch{pick(g, StringMatch{Exact: "x-user"}, StringMatch{Prefix: "x-t"}, StringMatch{Exact: "x-pad"})}
	}
	if g.chance(0.5) {
		c.Rules = g.mutationRules()
	}
	return c
}

func (g *gen) localRL(name string, perRoute bool) *LocalRL {
	c := &LocalRL{
		StatPrefix: pick(g, "p0", "p1"),
		MaxTokens:  pick(g, 0, 0, 1, 2, 3),
		Enabled:    g.chance(0.9),
		Enforced:   g.chance(0.6),
	}
	if !perRoute && g.chance(0.1) {
		c.NoBucket = true
	}
	if g.chance(0.3) {
		c.Status = pick(g, 403, 429, 503, 400, 300)
	}
	c.AsResourceExhausted = g.chance(0.15)
	if g.chance(0.4) {
		c.ResponseHeaders = []HeaderOp{{Key: "x-limited", Value: pick(g, "yes", ""), KeepEmpty: g.chance(0.3), Action: g.r.IntN(4)}}
	}
	if g.chance(0.6) {
		for range 1 + g.r.IntN(2) {
			k, v := g.setKV()
			c.ShadowHeaders = append(c.ShadowHeaders, HeaderOp{Key: k, Value: v, Action: g.r.IntN(4)})
		}
	}
	return c
}

func (g *gen) fault() *Fault {
	c := &Fault{}
	if g.chance(0.5) {
		c.Delay, c.DelayPct = true, pick(g, 0, 100)
	}
	if g.chance(0.8) {
		a := &FaultAbort{Pct: pick(g, 0, 100, 100)}
		switch g.r.IntN(3) {
		case 0:
			code := pick(g, 0, 4, 9, 14, 20)
			a.GRPC = &code
		case 1:
			a.HTTP = pick(g, 200, 403, 503, 418)
		default:
			a.Header = true
		}
		if g.chance(0.3) {
			a.Body = "injected"
		}
		c.Abort = a
	}
	return c
}

func (g *gen) globalRL(name string) *GlobalRL {
	c := &GlobalRL{
		Domain:          "d-" + name,
		FailureModeDeny: g.chance(0.5),
		ShortTimeout:    g.chance(0.3),
	}
	c.NotEnabled = g.chance(0.05)
	c.NotEnforced = g.chance(0.15)
	if g.chance(0.3) {
		c.StatusOnError = pick(g, 403, 429, 500, 503)
	}
	if g.chance(0.3) {
		c.LimitedStatus = pick(g, 403, 429, 503, 300)
	}
	c.AsResourceExhausted = g.chance(0.15)
	return c
}

func (g *gen) procMode() ProcMode {
	mode := func(skip float64) string {
		if g.chance(skip) {
			return "SKIP"
		}
		return pick(g, "", "SEND")
	}
	m := ProcMode{RequestHeaders: mode(0.2), ResponseHeaders: mode(0.3)}
	// response_trailer_mode: DEFAULT is SKIP.
	m.ResponseTrailers = pick(g, "", "SEND", "SEND", "SKIP")
	return m
}

func (g *gen) extProc() *ExtProc {
	c := &ExtProc{
		Mode:                     g.procMode(),
		FailureModeAllow:         g.chance(0.4),
		DisableImmediateResponse: g.chance(0.2),
	}
	if g.chance(0.4) {
		c.Rules = g.mutationRules()
	}
	return c
}

func (g *gen) mutationRules() *MutationRules {
	return &MutationRules{
		DisallowAll:     g.chance(0.5),
		DisallowIsError: g.chance(0.4),
		Allow:           pick(g, "", "x-user", "x-.*", "x-t.*", "x-a|x-tier"),
		Disallow:        pick(g, "", "x-user", "x-a|x-new"),
	}
}

// rateLimit is one rate limit whose first entry is the RPC's ID, so that
// the service tells its calls apart.
func (g *gen) rateLimit() RateLimit {
	rl := RateLimit{Actions: []Action{{Header: IDHeader, Key: "rpc"}}}
	for range g.r.IntN(3) {
		switch g.r.IntN(5) {
		case 0:
			rl.Actions = append(rl.Actions, Action{Generic: pick(g, "g1", "g2"), Key: pick(g, "", "k")})
		case 1:
			rl.Actions = append(rl.Actions, Action{Match: &HeaderValueMatch{Value: "hv", Headers: []HeaderMatch{g.headerMatch()}, NotExpected: g.chance(0.3)}})
		case 2:
			rl.Actions = append(rl.Actions, Action{Header: pick(g, "x-data-bin", "x-pad", ":path"), Key: "h"})
		default:
			k, _ := g.readKV()
			rl.Actions = append(rl.Actions, Action{Header: k, Key: "user"})
		}
	}
	return rl
}

func (g *gen) script() *Script {
	c := &Script{}
	switch g.r.IntN(10) {
	case 0:
		c.Panic = pick(g, "run", "work")
		return c
	case 1, 2:
		c.Lazy = true
		c.Work = g.chance(0.7)
		return c
	}
	if g.chance(0.4) {
		k, v := g.readKV()
		c.Require = k + "=" + v
	}
	if g.chance(0.5) {
		k, v := g.setKV()
		c.Set = k + "=" + v
	}
	if g.chance(0.5) {
		c.Work = true
		if g.chance(0.4) {
			k, v := g.setKV()
			c.WorkSet = k + "=" + v
		}
		if g.chance(0.2) {
			c.WorkRefuse = pick(g, 10, 9)
		}
	}
	return c
}

func (g *gen) route(c *Chain, catchAll bool) Route {
	rt := Route{Prefix: "/"}
	if !catchAll {
		switch g.r.IntN(3) {
		case 0:
			rt.Path = pick(g, methods...)
			rt.Prefix = ""
		case 1:
			rt.Prefix = "/grpc.testing.TestService/Streaming"
		}
		if g.chance(0.5) {
			rt.Headers = []HeaderMatch{g.headerMatch()}
			if rt.Headers[0].Name == "x-data-bin" {
				// gRPC's routes do not match binary headers as RBAC does:
				// not generated.
				rt.Headers[0] = HeaderMatch{Name: "x-tier", Kind: "exact", Value: "gold"}
			}
		}
	}
	rt.Forward = g.chance(0.15)
	for _, f := range c.Filters {
		if !g.chance(0.3) && !(f.Disabled && g.chance(0.5)) {
			continue
		}
		if rt.Overrides == nil {
			rt.Overrides = map[string]*Override{}
		}
		o := &Override{}
		if g.chance(0.25) {
			o.Disabled = true
		} else {
			switch {
			case f.RBAC != nil:
				o.RBAC = &RBACPerRoute{}
				if g.chance(0.7) {
					o.RBAC.RBAC = g.rbac()
				}
			case f.ExtAuthz != nil:
				o.ExtAuthz = true
			case f.LocalRL != nil:
				o.LocalRL = g.localRL(f.Name, true)
			case f.Fault != nil:
				o.Fault = g.fault()
			case f.RateLimit != nil:
				o.RateLimit = &RateLimitPerRoute{}
				if g.chance(0.5) {
					o.RateLimit.RateLimits = []RateLimit{g.rateLimit()}
				}
				if g.chance(0.3) {
					o.RateLimit.Domain = "route-domain"
				}
			case f.Script != nil:
				// Needs.After is the filter type's: an override is of the
				// filter's own type.
				o.Script = g.script()
				o.Script.Lazy = f.Script.Lazy
			case f.ExtProc != nil:
				o.ExtProc = &ExtProcPerRoute{}
				if g.chance(0.7) {
					m := g.procMode()
					o.ExtProc.Mode = &m
				}
				if g.chance(0.4) {
					b := g.chance(0.5)
					o.ExtProc.FailureModeAllow = &b
				}
			}
		}
		rt.Overrides[f.Name] = o
	}
	return rt
}

func (g *gen) headerOp(forAnswer bool) HeaderOp {
	k, v := g.setKV()
	h := HeaderOp{Key: k, Value: v, Action: g.r.IntN(4)}
	if !forAnswer {
		return h
	}
	switch g.r.IntN(14) {
	case 0:
		h.Key = pick(g, ":path", "grpc-tag", "host", ":authority") // reserved: ignored
	case 1:
		h.Key = "X-User" // lower-cased
	case 2:
		h.Key = "x bad" // invalid name
	case 3:
		h.Value = "bad\x01" // invalid value
	case 4:
		h.Action = 7 // unknown append_action
	case 5:
		b := g.chance(0.5)
		h.Append = &b
	case 6:
		h.Key, h.Value = abortHdr, pick(g, "0", "9", "14")
	}
	h.Raw = g.chance(0.4)
	h.Both = h.Raw && g.chance(0.3)
	return h
}

func (g *gen) headerOps(n int) []HeaderOp {
	var out []HeaderOp
	for range n {
		out = append(out, g.headerOp(true))
	}
	return out
}

func (g *gen) authzAnswer() *AuthzAnswer {
	switch g.r.IntN(12) {
	case 0, 1:
		return &AuthzAnswer{Kind: "deny", DenyCode: pick(g, 0, 7, 16), DenyHTTP: pick(g, httpCodes...), DenyMessage: "no", DenyHeaders: g.headerOps(1 + g.r.IntN(3))}
	case 2:
		return &AuthzAnswer{Kind: "nostatus"}
	case 3:
		return &AuthzAnswer{Kind: "okdenied"}
	case 4, 5:
		return &AuthzAnswer{Kind: "error", ErrCode: pick(g, 2, 4, 8, 13, 14)}
	}
	a := &AuthzAnswer{Kind: "ok", NoOkResponse: g.chance(0.1)}
	if !a.NoOkResponse {
		a.Headers = g.headerOps(g.r.IntN(4))
		if g.chance(0.3) {
			a.Remove = []string{pick(g, "x-user", "X-Tier", "x-a", ":path", "grpc-tag", "x bad")}
		}
		if g.chance(0.3) {
			a.RespHeaders = g.headerOps(1 + g.r.IntN(2))
		}
	}
	return a
}

// procAnswer is the processor's answer to one event; token: set the
// case's token (on the request headers).
func (g *gen) procAnswer(token bool) *ProcAnswer {
	if token && g.chance(0.7) {
		return &ProcAnswer{Set: []HeaderOp{{Key: g.tokKey, Value: g.tokVal, Action: pick(g, AppendIfExistsOrAdd, OverwriteIfExistsOrAdd)}}}
	}
	switch g.r.IntN(16) {
	case 0, 1:
		a := &ProcAnswer{Kind: "immediate", Code: pick(g, 0, 3, 7, 14, 16)}
		if g.chance(0.4) {
			a.Set = g.procOps(1)
		}
		return a
	case 2:
		return &ProcAnswer{Kind: "fail", Code: pick(g, 2, 7, 8, 13, 14)}
	case 3:
		return &ProcAnswer{Kind: "close"}
	case 4:
		return &ProcAnswer{Kind: "wrong"}
	}
	a := &ProcAnswer{}
	if g.chance(0.75) {
		a.Set = g.procOps(1 + g.r.IntN(2))
	}
	if g.chance(0.3) {
		a.Remove = []string{pick(g, "x-user", "X-Tier", "x-a", "x-new", ":path", "grpc-tag", "x bad", "x-limited")}
	}
	return a
}

// procOps are a processor's set_headers: the answers' mutations, now and
// then a te or content-type (ignored) or an empty value.
func (g *gen) procOps(n int) []HeaderOp {
	out := g.headerOps(n)
	for i := range out {
		switch g.r.IntN(12) {
		case 0:
			out[i].Key = pick(g, "te", "content-type")
		case 1:
			out[i].Value, out[i].KeepEmpty = "", g.chance(0.5)
			out[i].Raw, out[i].Both = true, false
		}
	}
	return out
}

func (g *gen) procScript(token bool) *ProcScript {
	p := &ProcScript{}
	if token || g.chance(0.6) {
		p.RequestHeaders = g.procAnswer(token)
	}
	if g.chance(0.6) {
		p.ResponseHeaders = g.procAnswer(false)
	}
	if g.chance(0.5) {
		p.ResponseTrailers = g.procAnswer(false)
	}
	return p
}

func (g *gen) rlsAnswer() *RLSAnswer {
	switch g.r.IntN(10) {
	case 0, 1, 2:
		return &RLSAnswer{Kind: "over", ResponseHeaders: g.headerOps(g.r.IntN(2))}
	case 3, 4:
		return &RLSAnswer{Kind: "error", ErrCode: pick(g, 2, 4, 8, 14)}
	case 5:
		return &RLSAnswer{Kind: "unknown"}
	}
	a := &RLSAnswer{Kind: "ok"}
	if g.chance(0.5) {
		a.RequestHeaders = g.headerOps(1 + g.r.IntN(2))
	}
	if g.chance(0.3) {
		a.ResponseHeaders = g.headerOps(1)
	}
	return a
}

func (g *gen) rpc(c *Case, i int) RPC {
	r := RPC{ID: fmt.Sprintf("%0*d", IDLen, i), Method: pick(g, methods...), Authority: Domain}
	switch {
	case g.chance(0.03):
		r.Method = pick(g, "grpc.testing.TestService/UnaryCall", "/nope")
	case g.chance(0.04):
		r.Authority = "other"
	}
	for range g.r.IntN(4) {
		switch g.r.IntN(8) {
		case 0:
			r.Headers = append(r.Headers, Header{Key: "x-data-bin", Value: "\x00\x01"})
		case 1:
			r.Headers = append(r.Headers, Header{Key: "grpc-tag", Value: "t"})
		case 2:
			r.Headers = append(r.Headers, Header{Key: abortHdr, Value: pick(g, "0", "9", "14", "x")})
		default:
			// The client's own value of a header the filters set or read.
			k, v := g.readKV()
			if g.chance(0.5) {
				v = pick(g, userVals...)
			}
			r.Headers = append(r.Headers, Header{Key: k, Value: v})
		}
	}
	if g.chance(0.05) {
		r.HandlerCode = pick(g, 9, 5)
	}
	// Side services' answers.
	r.Authz, r.RLS, r.Proc = map[string]*AuthzAnswer{}, map[string]*RLSAnswer{}, map[string]*ProcScript{}
	var sides []*Filter
	for j := range c.Chain.Filters {
		f := &c.Chain.Filters[j]
		switch {
		case f.ExtAuthz != nil:
			if g.chance(0.8) {
				r.Authz[f.Name] = g.authzAnswer()
			}
			sides = append(sides, f)
		case f.RateLimit != nil:
			if g.chance(0.8) {
				r.RLS[f.Name] = g.rlsAnswer()
			}
			sides = append(sides, f)
		case f.ExtProc != nil:
			if token := g.tokenProcs[f.Name]; token || g.chance(0.85) {
				r.Proc[f.Name] = g.procScript(token)
			}
			sides = append(sides, f)
		}
	}
	// At most one call that hangs, always bounded: by the filter's short
	// timeout, the RPC's deadline, or its cancellation.
	if len(sides) > 0 && g.chance(0.08) {
		f := pick(g, sides...)
		short := f.ExtAuthz != nil && f.ExtAuthz.ShortTimeout || f.RateLimit != nil && f.RateLimit.ShortTimeout
		if !short {
			if g.chance(0.5) {
				r.Deadline = "short"
			} else {
				r.CancelAtHang = true
			}
		}
		switch {
		case f.ExtAuthz != nil:
			r.Authz[f.Name] = &AuthzAnswer{Kind: "hang"}
		case f.RateLimit != nil:
			r.RLS[f.Name] = &RLSAnswer{Kind: "hang"}
		default:
			// The processor's streams have no timeout: the RPC's deadline
			// or cancellation ends the hang, mostly the cheaper.
			if r.Deadline == "short" && g.chance(0.6) {
				r.Deadline, r.CancelAtHang = "", true
			}
			p := r.Proc[f.Name]
			if p == nil {
				p = &ProcScript{}
				r.Proc[f.Name] = p
			}
			hang := &ProcAnswer{Kind: "hang"}
			switch g.r.IntN(3) {
			case 0:
				p.RequestHeaders = hang
			case 1:
				p.ResponseHeaders = hang
			default:
				p.ResponseTrailers = hang
			}
		}
	} else if g.chance(0.03) {
		r.Deadline = "passed"
	}
	if len(r.Authz) == 0 {
		r.Authz = nil
	}
	if len(r.RLS) == 0 {
		r.RLS = nil
	}
	if len(r.Proc) == 0 {
		r.Proc = nil
	}
	g.bounds(c, &r)
	return r
}

// bounds adds, now and then, a header that takes r's headers to the edge
// of the chain's bounds (one byte or header under, at, or over), or far
// over them.
func (g *gen) bounds(c *Case, r *RPC) {
	maxBytes := c.Chain.MaxRequestHeadersKB << 10
	for _, f := range c.Chain.Filters {
		if maxBytes == 0 && f.CallsOut() {
			maxBytes = DefaultMaxHeaderBytes
		}
	}
	if maxBytes > 0 && g.chance(0.15) {
		_, size := HeaderList(c.Env, r)
		want := maxBytes + pick(g, -1, 0, 1, 300)
		if maxBytes >= 1<<20 {
			// Within the bound, over what a side service takes.
			want = pick(g, 100<<10, 150<<10)
		}
		if n := want - size - len("x-pad"); n > 0 {
			r.Headers = append(r.Headers, Header{Key: "x-pad", Len: n})
		}
	}
	if c.Chain.MaxHeadersCount > 0 && g.chance(0.3) {
		n, _ := HeaderList(c.Env, r)
		for range c.Chain.MaxHeadersCount + pick(g, -1, 0, 1) - n {
			r.Headers = append(r.Headers, Header{Key: "x-many", Value: "m"})
		}
	}
}
