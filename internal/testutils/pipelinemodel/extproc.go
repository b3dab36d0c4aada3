package pipelinemodel

import (
	"encoding/base64"
	"strings"

	"google.golang.org/grpc/codes"
)

// The ext_proc filter (gRFC A93; docs/filters.md, "ext_proc"), header
// events only: the request headers, the response headers and the response
// trailers of an RPC go to a processor as its processing_mode says, each
// waiting for the processor's answer, on one stream per RPC; bodies are
// NONE and observability mode is off.
//
// The semantics the model holds the server to, from A93 and Envoy:
//   - request events go through the filters in http_filters order, response
//     events (headers, trailers) in reverse order (Envoy's encoder filters);
//     a filter's response_headers_to_add (ext_authz, a rate limit answer)
//     are added at its place on that path, so an ext_proc before it in
//     http_filters sees them and one after it does not;
//   - an RPC refused by a filter after calls of earlier filters started is
//     Envoy's local reply: it goes through those earlier calls' response
//     hooks as a response without a message (below), not through the
//     refusing call's own; an RPC refused before an ext_proc filter never
//     reaches its processor;
//   - an RPC ended OK without its handler (a fault abort with status OK, an
//     immediate_response with OK) is a local reply too: its client gets OK,
//     with an empty message when it expects one (unary, client streaming),
//     and the calls before the filter see it as any response;
//   - a stream that ends OK ends processing: the events pass as they are,
//     and no more go to the processor; one that fails (a status other than
//     OK, or a protocol error: an answer for an event not waiting for one,
//     an immediate_response with disable_immediate_response) fails the RPC
//     with UNAVAILABLE, unless failure_mode_allow, which ends processing as
//     an OK end does; RESOURCE_EXHAUSTED from the processor (its answer to
//     a request over its receive limit) refuses the RPC with
//     RESOURCE_EXHAUSTED whatever failure_mode_allow says, the side
//     channels' rule (docs/filters.md, ext_authz);
//   - an immediate_response on the request headers, or on the response
//     headers of a response with a message, ends the RPC at once with its
//     grpc_status and details, its headers in the trailers (the handler is
//     not reached from the request headers; from the response headers,
//     nothing more goes through the filters: Envoy's direct local reply);
//     on the trailers, or a Trailers-Only response, it replaces the
//     status, its headers mutating the trailers, and the calls before see
//     the new one;
//   - header mutations (A93's "Header rewriting", docs/filters.md): removes
//     first, then sets in order; host, pseudo-headers, te, content-type and
//     grpc-* are never changed; an invalid entry, or a change the rules
//     refuse with disallow_is_error, makes the whole mutation unusable and
//     fails the RPC with INTERNAL (on the trailers: the status becomes
//     INTERNAL); an entry with an empty value removes its header where it
//     would have written it, unless keep_empty_value;
//   - a processor that never answers holds the RPC until its deadline or
//     cancellation;
//   - a response without a message (a failed RPC, a local reply) is
//     Trailers-Only: with response_header_mode SEND it is one
//     response_headers event with end_of_stream carrying the headers, the
//     trailers and the status, whose answer acts on the trailers as one to
//     response_trailers does; a call that skips the headers and sends the
//     trailers gets response_trailers (docs/filters.md; A93 only says that
//     end_of_stream marks a Trailers-Only response);
//   - the trailers a call sees and may change are the response's: a
//     refusal's trailers (a rate limit's), an immediate_response's headers,
//     as Envoy's local reply carries them through the encoder filters.

// ExtProc is an ext_proc filter config (ExternalProcessor) of the header
// events; its grpc_service is the harness's processor.
type ExtProc struct {
	Mode                     ProcMode
	FailureModeAllow         bool           `json:",omitempty"`
	DisableImmediateResponse bool           `json:",omitempty"`
	Rules                    *MutationRules `json:",omitempty"` // mutation_rules
}

// ProcMode is a processing_mode's header modes, each "" (DEFAULT), "SEND"
// or "SKIP"; the body modes are NONE.
type ProcMode struct {
	RequestHeaders   string `json:",omitempty"`
	ResponseHeaders  string `json:",omitempty"`
	ResponseTrailers string `json:",omitempty"`
}

// sends returns whether each header event goes to the processor: DEFAULT
// is SEND for the headers, SKIP for the trailers.
func (m ProcMode) sends() (req, resp, trailers bool) {
	return m.RequestHeaders != "SKIP", m.ResponseHeaders != "SKIP", m.ResponseTrailers == "SEND"
}

// ExtProcPerRoute is an ExtProcPerRoute's overrides: a processing_mode
// (the whole mode) and failure_mode_allow, each when set; neither set is an
// empty override.
type ExtProcPerRoute struct {
	Mode             *ProcMode `json:",omitempty"`
	FailureModeAllow *bool     `json:",omitempty"`
}

// ProcScript is how the processor answers one RPC's events on one filter's
// stream (nil: CONTINUE without a mutation).
type ProcScript struct {
	RequestHeaders   *ProcAnswer `json:",omitempty"`
	ResponseHeaders  *ProcAnswer `json:",omitempty"`
	ResponseTrailers *ProcAnswer `json:",omitempty"`
}

// Answer returns the answer to event: CONTINUE without a mutation when p
// has none.
func (p *ProcScript) Answer(event string) *ProcAnswer {
	var a *ProcAnswer
	if p != nil {
		switch event {
		case EventRequestHeaders:
			a = p.RequestHeaders
		case EventResponseHeaders:
			a = p.ResponseHeaders
		case EventResponseTrailers:
			a = p.ResponseTrailers
		}
	}
	if a == nil {
		return &ProcAnswer{}
	}
	return a
}

// set sets the answer to event.
func (p *ProcScript) set(event string, a *ProcAnswer) {
	switch event {
	case EventRequestHeaders:
		p.RequestHeaders = a
	case EventResponseHeaders:
		p.ResponseHeaders = a
	case EventResponseTrailers:
		p.ResponseTrailers = a
	}
}

// ProcAnswer is the processor's answer to one event.
type ProcAnswer struct {
	// Kind: "" (CONTINUE, with the header mutation Set and Remove),
	// "immediate" (an immediate_response of grpc_status Code, details
	// ImmediateDetails and the header mutation Set), "fail" (the stream
	// ends with status Code), "close" (the stream ends OK), "hang" (no
	// answer until the stream ends), "wrong" (an answer for another event:
	// a protocol error).
	Kind   string     `json:",omitempty"`
	Set    []HeaderOp `json:",omitempty"`
	Remove []string   `json:",omitempty"`
	Code   int        `json:",omitempty"`
}

// ImmediateDetails are the details of every scripted immediate_response.
const ImmediateDetails = "processor says so"

// The header events, as the ProcessingRequest's fields are named.
const (
	EventRequestHeaders   = "request_headers"
	EventResponseHeaders  = "response_headers"
	EventResponseTrailers = "response_trailers"
)

// ProcEvent is one event a processor received, in the order received.
type ProcEvent struct {
	Filter string
	Event  string
	// EndOfStream is response_headers' end_of_stream.
	EndOfStream bool `json:",omitempty"`
	// Status is the grpc-status the event's headers carry (trailers, and
	// the headers of a Trailers-Only response); nil: none.
	Status *int `json:",omitempty"`
	// Headers are request_headers' headers (Observe'd: pseudo-headers but
	// :authority, a binary value as its base64 with padding).
	Headers map[string][]string `json:",omitempty"`
}

// procIgnored reports whether a processor's mutation of key is ignored:
// pseudo-headers, host, and what gRPC writes itself.
func procIgnored(key string) bool {
	return strings.HasPrefix(key, ":") || key == "host" || key == "te" || key == "content-type" || strings.HasPrefix(key, "grpc-")
}

// procState is where a call's stream stands.
type procState int

const (
	procOpen procState = iota
	procDone           // ended OK, or failed under failure_mode_allow: events pass as they are
)

// procCall is one ext_proc filter's call on one RPC.
type procCall struct {
	f            *Filter
	cfg          ExtProc // merged with the route's override
	script       *ProcScript
	st           procState
	trailersOnly bool // the response headers went with end_of_stream
}

// respCall is a filter's part of the response path: an ext_proc call, or
// headers a filter adds to the response (adds).
type respCall struct {
	p    *procCall
	adds map[string][]string
}

// effect is what a processor's answer does to the RPC.
type effect int

const (
	goOn  effect = iota // the event passes, mutated or not
	ended               // the RPC ends with code
	hung                // the RPC ends by its own deadline or cancellation
)

// procMutation judges a header mutation: ok false when it cannot be
// applied (an invalid entry, a change the rules refuse with
// disallow_is_error); else mutate applies it to md.
func procMutation(rules *MutationRules, set []HeaderOp, remove []string) (mutate func(md map[string][]string), ok bool) {
	isError := rules != nil && rules.DisallowIsError
	var removes []string
	for _, name := range remove {
		k := strings.ToLower(name)
		if k == "" || procIgnored(k) || !validName(k) {
			continue
		}
		if !rules.allows(k) {
			if isError {
				return nil, false
			}
			continue
		}
		removes = append(removes, k)
	}
	type setOp struct {
		key, value string
		action     int
		keepEmpty  bool
	}
	var sets []setOp
	for _, h := range set {
		k := h.Key
		if k == "" {
			return nil, false
		}
		if procIgnored(k) {
			continue
		}
		if !validName(k) { // upper case included: A93 wants lower-case names
			return nil, false
		}
		v := h.Value
		if h.Both && v == "" {
			v = BothIgnored
		}
		if len(v) > 16384 {
			return nil, false
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e {
				return nil, false
			}
		}
		if h.Action < 0 || h.Action > 3 {
			return nil, false
		}
		if !rules.allows(k) {
			if isError {
				return nil, false
			}
			continue
		}
		// The deprecated append is ignored (A93).
		sets = append(sets, setOp{k, v, h.Action, h.KeepEmpty})
	}
	return func(md map[string][]string) {
		for _, k := range removes {
			delete(md, k)
		}
		for _, st := range sets {
			if st.value == "" && !st.keepEmpty {
				_, exists := md[st.key]
				writes := exists
				switch st.action {
				case AddIfAbsent:
					writes = false
				}
				if writes {
					delete(md, st.key)
				}
				continue
			}
			apply(md, st.key, st.value, st.action)
		}
	}, true
}

// extProc runs an ext_proc filter's step and its request headers event.
func (m *model) extProc(s *rpcState, f *Filter, o *Override) {
	cfg := *f.ExtProc
	if o != nil && o.ExtProc != nil {
		if o.ExtProc.Mode != nil {
			cfg.Mode = *o.ExtProc.Mode
		}
		if o.ExtProc.FailureModeAllow != nil {
			cfg.FailureModeAllow = *o.ExtProc.FailureModeAllow
		}
	}
	p := &procCall{f: f, cfg: cfg, script: s.r.Proc[f.Name]}
	req, _, _ := cfg.Mode.sends()
	if !req {
		s.calls = append(s.calls, &respCall{p: p})
		return
	}
	// The request headers event: :authority, :method, :path, :scheme, then
	// the headers as the filters before left them.
	hm := map[string][]string{":method": {"POST"}, ":path": {s.r.Method}, ":scheme": {"http"}}
	parts := []string{s.r.Authority, s.r.Method}
	for k, vs := range s.md {
		if strings.HasPrefix(k, ":") {
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
	if sideSize(parts...) > MaxSideMessage {
		// The processor's gRPC refuses the request: never a failure
		// failure_mode_allow lets through.
		s.refuse(codes.ResourceExhausted, "ext_proc", nil)
		return
	}
	s.out.Proc = append(s.out.Proc, ProcEvent{Filter: f.Name, Event: EventRequestHeaders, Headers: Observe(hm)})
	a := p.script.Answer(EventRequestHeaders)
	switch a.Kind {
	case "hang":
		code, _ := s.hang(false)
		s.refuse(code, "", nil)
		s.out.Ended = true
		return
	case "close":
		p.st = procDone
	case "fail", "wrong":
		if !m.procFailed(s, p, a) {
			return
		}
	case "immediate":
		if cfg.DisableImmediateResponse {
			if !m.procFailed(s, p, &ProcAnswer{Kind: "wrong"}) {
				return
			}
			break
		}
		p.st = procDone
		code := codes.Code(a.Code)
		if !m.immediateHeaders(s, p, a, s.direct) {
			return
		}
		if code == codes.OK {
			s.out.Code, s.stopped, s.okEnd = codes.OK, true, true
			return
		}
		s.refuse(code, ImmediateDetails, nil)
		return
	default:
		mutate, ok := procMutation(cfg.Rules, a.Set, a.Remove)
		if !ok {
			s.refuse(codes.Internal, "header mutation cannot be applied", nil)
			return
		}
		mutate(s.md)
	}
	s.calls = append(s.calls, &respCall{p: p})
}

// procFailed handles a failed stream of p on the request path: true when
// the RPC goes on (failure_mode_allow).
func (m *model) procFailed(s *rpcState, p *procCall, a *ProcAnswer) bool {
	switch {
	case a.Kind == "fail" && codes.Code(a.Code) == codes.ResourceExhausted:
		s.refuse(codes.ResourceExhausted, "ext_proc", nil)
		return false
	case p.cfg.FailureModeAllow:
		p.st = procDone
		return true
	}
	s.refuse(codes.Unavailable, "ext_proc", nil)
	return false
}

// failedCode is the status a failed stream of p gives the RPC on the
// response path; ok false when the RPC goes on (failure_mode_allow).
func failedCode(p *procCall, a *ProcAnswer) (codes.Code, bool) {
	switch {
	case a.Kind == "fail" && codes.Code(a.Code) == codes.ResourceExhausted:
		return codes.ResourceExhausted, true
	case p.cfg.FailureModeAllow:
		p.st = procDone
		return 0, false
	}
	return codes.Unavailable, true
}

// immediateHeaders applies an immediate_response's headers to tr (the
// trailers it goes to); false when the mutation cannot be applied, which
// refuses the RPC with INTERNAL instead.
func (m *model) immediateHeaders(s *rpcState, p *procCall, a *ProcAnswer, tr map[string][]string) bool {
	mutate, ok := procMutation(p.cfg.Rules, a.Set, nil)
	if !ok {
		s.refuse(codes.Internal, "header mutation cannot be applied", nil)
		return false
	}
	mutate(tr)
	return true
}

// respond runs the response path of s's RPC through its calls, in reverse
// http_filters order: the response headers, then the trailers with the
// status code. A response without a message (eos: a failed RPC, a local
// reply) is Trailers-Only: its headers, trailers and status go to a call
// whose mode sends the response headers as one response_headers event
// with end_of_stream, at the trailers' turn, whose answer acts on the
// trailers; a call that skips the headers and sends the trailers gets a
// response_trailers event instead (docs/filters.md). It sets the outcome's
// code, response headers and s.direct, the trailers.
func (m *model) respond(s *rpcState, code codes.Code, eos bool) {
	hdr := map[string][]string{}
	for i := len(s.calls) - 1; i >= 0; i-- {
		c := s.calls[i]
		if c.p == nil {
			for k, vs := range c.adds {
				hdr[k] = append(hdr[k], vs...)
			}
			continue
		}
		p := c.p
		if _, resp, _ := p.cfg.Mode.sends(); !resp || p.st != procOpen {
			continue
		}
		if eos {
			p.trailersOnly = true // sent with the status
			continue
		}
		s.out.Proc = append(s.out.Proc, ProcEvent{Filter: p.f.Name, Event: EventResponseHeaders})
		a := p.script.Answer(EventResponseHeaders)
		end, endCode, msg := goOn, codes.OK, ""
		switch a.Kind {
		case "hang":
			end = hung
		case "close":
			p.st = procDone
		case "fail", "wrong":
			if c, failed := failedCode(p, a); failed {
				end, endCode, msg = ended, c, "ext_proc"
			}
		case "immediate":
			if p.cfg.DisableImmediateResponse {
				if c, failed := failedCode(p, &ProcAnswer{Kind: "wrong"}); failed {
					end, endCode, msg = ended, c, "ext_proc"
				}
				break
			}
			p.st = procDone
			end, endCode, msg = ended, codes.Code(a.Code), ImmediateDetails
			mutate, ok := procMutation(p.cfg.Rules, a.Set, nil)
			switch {
			case !ok:
				endCode, msg = codes.Internal, "header mutation cannot be applied"
			case endCode == codes.OK:
				// The RPC ends OK at once, as from the request headers: a
				// client that expects a message gets an empty one.
				mutate(s.direct)
				msg = ""
			default:
				mutate(s.direct)
			}
		default:
			if mutate, ok := procMutation(p.cfg.Rules, a.Set, a.Remove); ok {
				mutate(hdr)
			} else {
				end, endCode, msg = ended, codes.Internal, "header mutation cannot be applied"
			}
		}
		switch end {
		case hung:
			c, _ := s.hang(false)
			s.out.Code, s.out.Message, s.out.Ended = c, "", true
			return
		case ended:
			// Nothing more goes through the filters; the headers so far
			// are dropped (Envoy's direct local reply).
			s.out.Code, s.out.Message = endCode, msg
			return
		}
	}
	s.out.Header = Observe(hdr)

	// The trailers: the response's so far (a refusal's, an
	// immediate_response's), which the calls see and may change.
	tr := s.direct
	s.direct = map[string][]string{}
	msg := s.out.Message
	reported := code // the status the events carry
	for i := len(s.calls) - 1; i >= 0; i-- {
		p := s.calls[i].p
		if p == nil || p.st != procOpen {
			continue
		}
		ev := ProcEvent{Filter: p.f.Name, Event: EventResponseTrailers}
		if _, _, trailers := p.cfg.Mode.sends(); p.trailersOnly {
			ev.Event, ev.EndOfStream = EventResponseHeaders, true
		} else if !trailers {
			continue
		}
		n := int(reported)
		ev.Status = &n
		s.out.Proc = append(s.out.Proc, ev)
		a := p.script.Answer(ev.Event)
		switch a.Kind {
		case "hang":
			c, _ := s.hang(false)
			s.out.Code, s.out.Message, s.out.Ended = c, "", true
			return
		case "close":
			p.st = procDone
		case "fail", "wrong":
			if c, failed := failedCode(p, a); failed {
				code, msg = c, "ext_proc"
				reported = code
				p.st = procDone
			}
		case "immediate":
			if p.cfg.DisableImmediateResponse {
				if c, failed := failedCode(p, &ProcAnswer{Kind: "wrong"}); failed {
					code, msg = c, "ext_proc"
					reported = code
					p.st = procDone
				}
				break
			}
			p.st = procDone
			if mutate, ok := procMutation(p.cfg.Rules, a.Set, nil); ok {
				mutate(tr)
				code, msg = codes.Code(a.Code), ImmediateDetails
				if code == codes.OK {
					msg = ""
				}
			} else {
				code, msg = codes.Internal, "header mutation cannot be applied"
			}
			reported = code
		default:
			if mutate, ok := procMutation(p.cfg.Rules, a.Set, a.Remove); ok {
				mutate(tr)
			} else {
				code, msg = codes.Internal, "header mutation cannot be applied"
				reported = code
			}
		}
	}
	s.out.Code, s.out.Message = code, msg
	for k, vs := range tr {
		s.direct[k] = append(s.direct[k], vs...)
	}
}
