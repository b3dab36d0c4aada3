package pipelinemodel

import "slices"

// Shrink returns cases each a little smaller than c (an RPC, a filter, a
// route, a header, an override, an answer or a bound less), largest cuts
// first; a harness keeps the first that still shows a difference and asks
// again, until none does.
func Shrink(c Case) []Case {
	var out []Case
	add := func(f func(*Case)) {
		n := clone(c)
		f(&n)
		out = append(out, n)
	}
	for i := range c.RPCs {
		add(func(n *Case) { n.RPCs = slices.Delete(n.RPCs, i, i+1) })
	}
	for i := range c.Chain.Filters {
		add(func(n *Case) { dropFilter(n, i) })
	}
	for i := range c.Chain.Routes {
		add(func(n *Case) { n.Chain.Routes = slices.Delete(n.Chain.Routes, i, i+1) })
	}
	for i := range c.Chain.RateLimits {
		add(func(n *Case) { n.Chain.RateLimits = slices.Delete(n.Chain.RateLimits, i, i+1) })
	}
	if c.Chain.MaxRequestHeadersKB != 0 {
		add(func(n *Case) { n.Chain.MaxRequestHeadersKB = 0 })
	}
	if c.Chain.MaxHeadersCount != 0 {
		add(func(n *Case) { n.Chain.MaxHeadersCount = 0 })
	}
	for i, rt := range c.Chain.Routes {
		for name := range rt.Overrides {
			add(func(n *Case) { delete(n.Chain.Routes[i].Overrides, name) })
		}
		for j := range rt.Headers {
			add(func(n *Case) { n.Chain.Routes[i].Headers = slices.Delete(n.Chain.Routes[i].Headers, j, j+1) })
		}
		if rt.Forward {
			add(func(n *Case) { n.Chain.Routes[i].Forward = false })
		}
	}
	for i, r := range c.RPCs {
		for j := range r.Headers {
			add(func(n *Case) { n.RPCs[i].Headers = slices.Delete(n.RPCs[i].Headers, j, j+1) })
		}
		for name := range r.Authz {
			add(func(n *Case) { delete(n.RPCs[i].Authz, name) })
		}
		for name := range r.RLS {
			add(func(n *Case) { delete(n.RPCs[i].RLS, name) })
		}
		for name := range r.Proc {
			add(func(n *Case) { delete(n.RPCs[i].Proc, name) })
		}
		if r.Method != MethodUnary && WellFormed(r.Method) {
			add(func(n *Case) { n.RPCs[i].Method = MethodUnary })
		}
	}
	// Smaller answers.
	for i, r := range c.RPCs {
		for name, a := range r.Authz {
			for j := range a.Headers {
				add(func(n *Case) {
					x := n.RPCs[i].Authz[name]
					x.Headers = slices.Delete(x.Headers, j, j+1)
				})
			}
			for j := range a.DenyHeaders {
				add(func(n *Case) {
					x := n.RPCs[i].Authz[name]
					x.DenyHeaders = slices.Delete(x.DenyHeaders, j, j+1)
				})
			}
			if len(a.RespHeaders)+len(a.Remove) > 0 {
				add(func(n *Case) { n.RPCs[i].Authz[name].RespHeaders, n.RPCs[i].Authz[name].Remove = nil, nil })
			}
		}
		for name, a := range r.RLS {
			if len(a.RequestHeaders)+len(a.ResponseHeaders) > 0 {
				add(func(n *Case) { n.RPCs[i].RLS[name].RequestHeaders, n.RPCs[i].RLS[name].ResponseHeaders = nil, nil })
			}
		}
		for name, p := range r.Proc {
			for _, ev := range []string{EventRequestHeaders, EventResponseHeaders, EventResponseTrailers} {
				a := p.Answer(ev)
				if a.Kind == "" && len(a.Set)+len(a.Remove) == 0 {
					continue
				}
				add(func(n *Case) { n.RPCs[i].Proc[name].set(ev, nil) })
				for j := range a.Set {
					add(func(n *Case) {
						x := n.RPCs[i].Proc[name].Answer(ev)
						x.Set = slices.Delete(x.Set, j, j+1)
					})
				}
				if len(a.Remove) > 0 {
					add(func(n *Case) { n.RPCs[i].Proc[name].Answer(ev).Remove = nil })
				}
			}
		}
	}
	// Simpler configs.
	for i, f := range c.Chain.Filters {
		if p := f.ExtProc; p != nil {
			if p.Rules != nil {
				add(func(n *Case) { n.Chain.Filters[i].ExtProc.Rules = nil })
			}
			if p.FailureModeAllow || p.DisableImmediateResponse {
				add(func(n *Case) {
					n.Chain.Filters[i].ExtProc.FailureModeAllow, n.Chain.Filters[i].ExtProc.DisableImmediateResponse = false, false
				})
			}
		}
		if f.Disabled {
			add(func(n *Case) { n.Chain.Filters[i].Disabled = false })
		}
	}
	return out
}

// dropFilter removes the i-th filter and what refers to it.
func dropFilter(c *Case, i int) {
	name := c.Chain.Filters[i].Name
	c.Chain.Filters = slices.Delete(c.Chain.Filters, i, i+1)
	for _, rt := range c.Chain.Routes {
		delete(rt.Overrides, name)
	}
	for _, r := range c.RPCs {
		delete(r.Authz, name)
		delete(r.RLS, name)
		delete(r.Proc, name)
	}
}

// clone returns a deep copy of c.
func clone(c Case) Case {
	n, err := ParseCase(c.JSON())
	if err != nil {
		panic("pipelinemodel: a case does not survive JSON: " + err.Error())
	}
	return n
}
