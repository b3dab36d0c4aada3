// Package ratelimitdesc compiles Envoy's rate limit actions
// (envoy.config.route.v3.RateLimit, the rate_limits of a virtual host, of
// the global rate limit filter and of its RateLimitPerRoute) and evaluates
// them for a gRPC request, into the descriptors a Rate Limit Service is
// asked about.
//
// Each action reads what Envoy's reads. What a gRPC request on a server has
// nothing for (a query string, a destination cluster, dynamic metadata) is
// read as absent, and the action then does what
// Envoy's does for an absent value: its descriptor is left out, or, with
// skip_if_absent, only its entry. Only a config Envoy itself rejects (its
// proto's validation rules, an unknown extension) is an error, plus the
// fields this server cannot honour (apply_on_stream_done, substitution
// formats), each named.
//
// The package is pure: no gRPC, no I/O; a Policy is immutable.
package ratelimitdesc

import (
	"errors"
	"fmt"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/httpfilter"
	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/matcher"
)

// MaxStage is the largest stage Envoy accepts.
const MaxStage = 10

// Entry is one entry of a descriptor.
type Entry struct{ Key, Value string }

// Descriptor is one descriptor of a ShouldRateLimit request.
type Descriptor struct {
	Entries []Entry
	// HitsAddend is RateLimit.hits_addend.number; 0 when unset (the
	// service then counts the request's hits_addend, 1).
	HitsAddend uint64
}

// Policy is a compiled list of RateLimit. The zero value and nil are empty.
// Immutable.
type Policy struct {
	entries     []policyEntry
	unsupported error // the first rate limit that cannot be evaluated; see CompileVirtualHost
}

type policyEntry struct {
	stage      uint32
	actions    []action
	hitsAddend uint64
}

// Len returns the number of RateLimits of p.
func (p *Policy) Len() int {
	if p == nil {
		return 0
	}
	return len(p.entries)
}

// HasStage reports whether a RateLimit of p applies at stage.
func (p *Policy) HasStage(stage uint32) bool {
	if p == nil {
		return false
	}
	for i := range p.entries {
		if p.entries[i].stage == stage {
			return true
		}
	}
	return false
}

// Compile validates rls and returns their Policy; nil for an empty list.
// Errors name the field from the list down ("[2].actions[0].generic_key").
// A config Envoy accepts but this package cannot evaluate (a descriptor
// extension, apply_on_stream_done, a substitution format) is an error too:
// a filter's own rate limits are NACKed for it.
func Compile(rls []*routepb.RateLimit) (*Policy, error) {
	p, err := CompileVirtualHost(rls)
	if err == nil && p.Unsupported() != nil {
		return nil, p.Unsupported()
	}
	return p, err
}

// CompileVirtualHost is Compile for a virtual host's rate_limits, which
// Envoy validates whether or not a filter reads them: only what Envoy
// rejects is an error. What Envoy accepts and this package cannot evaluate
// is kept in the Policy (Unsupported), for the filter that would use it to
// refuse the route's RPCs rather than limit fewer of them than asked.
func CompileVirtualHost(rls []*routepb.RateLimit) (*Policy, error) {
	if len(rls) == 0 {
		return nil, nil
	}
	p := &Policy{entries: make([]policyEntry, 0, len(rls))}
	for i, rl := range rls {
		e, err := compileEntry(rl)
		if err != nil {
			err = fieldpath.In(fmt.Sprintf("[%d]", i), err)
			if !isUnsupported(err) {
				return nil, err
			}
			if p.unsupported == nil {
				p.unsupported = err
			}
			continue
		}
		p.entries = append(p.entries, e)
	}
	return p, nil
}

// Unsupported returns why some of p's rate limits cannot be evaluated
// (see CompileVirtualHost); nil when all can.
func (p *Policy) Unsupported() error {
	if p == nil {
		return nil
	}
	return p.unsupported
}

// errUnsupported marks the errors of a config Envoy accepts and this
// package cannot evaluate.
var errUnsupported = errors.New("unsupported")

// unsupportedError is a field error marked as unsupported.
type unsupportedError struct{ error }

func (e unsupportedError) Is(target error) bool { return target == errUnsupported }
func (e unsupportedError) Unwrap() error        { return e.error }

func unsupported(e *fieldpath.Error) *fieldpath.Error {
	return &fieldpath.Error{Path: e.Path, Err: unsupportedError{e.Err}}
}

func isUnsupported(err error) bool { return errors.Is(err, errUnsupported) }

func compileEntry(rl *routepb.RateLimit) (policyEntry, error) {
	var e policyEntry
	if s := rl.GetStage(); s != nil {
		if s.GetValue() > MaxStage {
			return e, fieldpath.Errorf("stage", "%d, want at most %d", s.GetValue(), MaxStage)
		}
		e.stage = s.GetValue()
	}
	if rl.GetApplyOnStreamDone() {
		return e, unsupported(fieldpath.Errorf("apply_on_stream_done", "not supported: the server asks the rate limit service once, before the handler"))
	}
	if h := rl.GetHitsAddend(); h != nil {
		if h.GetFormat() != "" {
			return e, unsupported(fieldpath.Errorf("hits_addend.format", "not supported (substitution formats), want number"))
		}
		if h.GetIsNegativeHits() {
			return e, unsupported(fieldpath.Errorf("hits_addend.is_negative_hits", "not supported"))
		}
		if n := h.GetNumber(); n != nil {
			// Envoy's bound.
			if n.GetValue() > 1_000_000_000 {
				return e, fieldpath.Errorf("hits_addend.number", "%d, want at most 1000000000", n.GetValue())
			}
			e.hitsAddend = n.GetValue()
		}
	}
	if l := rl.GetLimit(); l != nil && l.GetDynamicMetadata() == nil {
		return e, fieldpath.Errorf("limit.override_specifier", "unset, want dynamic_metadata")
	}
	// limit.dynamic_metadata reads the request's dynamic metadata, which a
	// gRPC server has none of: the override never applies, as in Envoy when
	// the metadata is absent.
	if len(rl.GetActions()) == 0 {
		return e, fieldpath.Errorf("actions", "empty, want at least one action")
	}
	e.actions = make([]action, len(rl.GetActions()))
	for j, a := range rl.GetActions() {
		act, err := compileAction(a)
		if err != nil {
			return e, fieldpath.In(fmt.Sprintf("actions[%d]", j), err)
		}
		e.actions[j] = act
	}
	return e, nil
}

// Request is what the actions read of one RPC.
type Request struct {
	// The RPC's request, a copy: given by pointer to the actions (an
	// interface), the RPC would be moved to the heap, for every RPC.
	httpfilter.Request
	// RouteMetadata is the matched route's metadata; nil without.
	RouteMetadata *corepb.Metadata
	// LocalCluster is the server's service cluster (the bootstrap node's
	// cluster); "" when unknown.
	LocalCluster string
}

// Descriptors appends to out the descriptors of the RateLimits of p that
// apply at stage (all of them when anyStage), in order, and returns it. A
// RateLimit one of whose actions has nothing to read produces none, and
// neither does one with no entry.
func (p *Policy) Descriptors(out []Descriptor, stage uint32, anyStage bool, r Request) []Descriptor {
	if p == nil {
		return out
	}
	for i := range p.entries {
		e := &p.entries[i]
		if !anyStage && e.stage != stage {
			continue
		}
		// The entries are passed along, not a *Descriptor: a pointer given
		// to the actions (an interface) would put each descriptor on the
		// heap, for every RPC.
		var es []Entry
		ok := true
		for _, a := range e.actions {
			if es, ok = a.populate(es, r); !ok {
				break
			}
		}
		if !ok || len(es) == 0 {
			continue
		}
		out = append(out, Descriptor{Entries: es, HitsAddend: e.hitsAddend})
	}
	return out
}

// action appends its entry to a descriptor's entries and returns them;
// false leaves the whole descriptor out (Envoy's "do not call the rate
// limit service for this descriptor").
type action interface {
	populate(es []Entry, r Request) ([]Entry, bool)
}

func compileAction(a *routepb.RateLimit_Action) (action, error) {
	switch s := a.GetActionSpecifier().(type) {
	case *routepb.RateLimit_Action_SourceCluster_:
		return sourceCluster{}, nil
	case *routepb.RateLimit_Action_DestinationCluster_:
		return destinationCluster{}, nil
	case *routepb.RateLimit_Action_RequestHeaders_:
		rh := s.RequestHeaders
		if err := checkHeaderName(rh.GetHeaderName()); err != nil {
			return nil, fieldpath.In("request_headers.header_name", err)
		}
		if rh.GetDescriptorKey() == "" {
			return nil, fieldpath.Errorf("request_headers.descriptor_key", "empty")
		}
		return requestHeaders{name: strings.ToLower(rh.GetHeaderName()), key: rh.GetDescriptorKey(), skipIfAbsent: rh.GetSkipIfAbsent()}, nil
	case *routepb.RateLimit_Action_QueryParameters_:
		q := s.QueryParameters
		if q.GetQueryParameterName() == "" {
			return nil, fieldpath.Errorf("query_parameters.query_parameter_name", "empty")
		}
		if q.GetDescriptorKey() == "" {
			return nil, fieldpath.Errorf("query_parameters.descriptor_key", "empty")
		}
		return absent{skipIfAbsent: q.GetSkipIfAbsent()}, nil
	case *routepb.RateLimit_Action_RemoteAddress_:
		return remoteAddress{}, nil
	case *routepb.RateLimit_Action_MaskedRemoteAddress_:
		m := s.MaskedRemoteAddress
		v4, v6 := uint32(32), uint32(128)
		if w := m.GetV4PrefixMaskLen(); w != nil {
			if v4 = w.GetValue(); v4 > 32 {
				return nil, fieldpath.Errorf("masked_remote_address.v4_prefix_mask_len", "%d, want at most 32", v4)
			}
		}
		if w := m.GetV6PrefixMaskLen(); w != nil {
			if v6 = w.GetValue(); v6 > 128 {
				return nil, fieldpath.Errorf("masked_remote_address.v6_prefix_mask_len", "%d, want at most 128", v6)
			}
		}
		return maskedRemoteAddress{v4: int(v4), v6: int(v6)}, nil
	case *routepb.RateLimit_Action_GenericKey_:
		g := s.GenericKey
		if g.GetDescriptorValue() == "" {
			return nil, fieldpath.Errorf("generic_key.descriptor_value", "empty")
		}
		// Envoy reads descriptor_value literally unless a runtime flag,
		// off by default, turns substitution formats on; default_value
		// only serves those.
		return constant{Key: orDefault(g.GetDescriptorKey(), "generic_key"), Value: g.GetDescriptorValue()}, nil
	case *routepb.RateLimit_Action_HeaderValueMatch_:
		h := s.HeaderValueMatch
		if h.GetDescriptorValue() == "" {
			return nil, fieldpath.Errorf("header_value_match.descriptor_value", "empty")
		}
		if len(h.GetHeaders()) == 0 {
			return nil, fieldpath.Errorf("header_value_match.headers", "empty, want at least one")
		}
		hv := headerValueMatch{
			entry:       Entry{orDefault(h.GetDescriptorKey(), "header_match"), h.GetDescriptorValue()},
			expectMatch: h.GetExpectMatch() == nil || h.GetExpectMatch().GetValue(),
		}
		for i, hm := range h.GetHeaders() {
			m, err := matcher.NewHeaderMatcher(hm)
			if err != nil {
				return nil, fieldpath.In(fmt.Sprintf("header_value_match.headers[%d]", i), err)
			}
			hv.headers = append(hv.headers, m)
		}
		return hv, nil
	case *routepb.RateLimit_Action_DynamicMetadata:
		d := s.DynamicMetadata
		if d.GetMetadataKey() == nil {
			return nil, fieldpath.Errorf("dynamic_metadata.metadata_key", "missing")
		}
		if d.GetDescriptorKey() == "" {
			return nil, fieldpath.Errorf("dynamic_metadata.descriptor_key", "empty")
		}
		return metadataAction{key: d.GetDescriptorKey(), def: d.GetDefaultValue()}, nil
	case *routepb.RateLimit_Action_Metadata:
		m := s.Metadata
		if m.GetMetadataKey() == nil {
			return nil, fieldpath.Errorf("metadata.metadata_key", "missing")
		}
		if m.GetMetadataKey().GetKey() == "" {
			return nil, fieldpath.Errorf("metadata.metadata_key.key", "empty")
		}
		if len(m.GetMetadataKey().GetPath()) == 0 {
			return nil, fieldpath.Errorf("metadata.metadata_key.path", "empty, want at least one segment")
		}
		if m.GetDescriptorKey() == "" {
			return nil, fieldpath.Errorf("metadata.descriptor_key", "empty")
		}
		ma := metadataAction{key: m.GetDescriptorKey(), def: m.GetDefaultValue(), skipIfAbsent: m.GetSkipIfAbsent()}
		switch m.GetSource() {
		case routepb.RateLimit_Action_MetaData_DYNAMIC:
			// No dynamic metadata on a gRPC server: always absent.
		case routepb.RateLimit_Action_MetaData_ROUTE_ENTRY:
			ma.filter = m.GetMetadataKey().GetKey()
			for i, seg := range m.GetMetadataKey().GetPath() {
				if seg.GetKey() == "" {
					return nil, fieldpath.Errorf(fmt.Sprintf("metadata.metadata_key.path[%d].key", i), "empty")
				}
				ma.path = append(ma.path, seg.GetKey())
			}
		default:
			return nil, fieldpath.Errorf("metadata.source", "unknown value %d", int32(m.GetSource()))
		}
		return ma, nil
	case *routepb.RateLimit_Action_QueryParameterValueMatch_:
		q := s.QueryParameterValueMatch
		if q.GetDescriptorValue() == "" {
			return nil, fieldpath.Errorf("query_parameter_value_match.descriptor_value", "empty")
		}
		if len(q.GetQueryParameters()) == 0 {
			return nil, fieldpath.Errorf("query_parameter_value_match.query_parameters", "empty, want at least one")
		}
		// A gRPC :path has no query: no parameter matches, so the entry is
		// added exactly when expect_match is false.
		if q.GetExpectMatch() != nil && !q.GetExpectMatch().GetValue() {
			return constant{Key: orDefault(q.GetDescriptorKey(), "query_match"), Value: q.GetDescriptorValue()}, nil
		}
		return absent{}, nil
	case *routepb.RateLimit_Action_RemoteAddressMatch_:
		r := s.RemoteAddressMatch
		if strings.Contains(r.GetDescriptorValue(), "%") || strings.Contains(r.GetDefaultValue(), "%") {
			return nil, unsupported(fieldpath.Errorf("remote_address_match.descriptor_value", "substitution formats are not supported, want a literal value"))
		}
		value := orDefault(r.GetDescriptorValue(), r.GetDefaultValue())
		ram := remoteAddressMatch{entry: Entry{orDefault(r.GetDescriptorKey(), "remote_address_match"), value}}
		if am := r.GetAddressMatcher(); am != nil {
			ram.invert = am.GetInvertMatch()
			for i, cr := range am.GetRanges() {
				m, err := matcher.NewCIDRMatcher(&corepb.CidrRange{AddressPrefix: cr.GetAddressPrefix(), PrefixLen: cr.GetPrefixLen()})
				if err != nil {
					return nil, fieldpath.In(fmt.Sprintf("remote_address_match.address_matcher.ranges[%d]", i), err)
				}
				ram.ranges = append(ram.ranges, m)
			}
		}
		return ram, nil
	case *routepb.RateLimit_Action_Extension:
		return nil, unsupported(fieldpath.Errorf("extension", "%q: descriptor extensions are not supported", s.Extension.GetName()))
	case nil:
		return nil, fieldpath.Errorf("action_specifier", "unset")
	default:
		return nil, fieldpath.Errorf("action_specifier", "unknown action %T", s)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkHeaderName applies Envoy's rule on a header name: not empty, no
// NUL, CR or LF.
func checkHeaderName(name string) error {
	if name == "" {
		return fieldpath.Errorf("", "empty")
	}
	if strings.ContainsAny(name, "\x00\r\n") {
		return fieldpath.Errorf("", "%q holds a NUL, CR or LF", name)
	}
	return nil
}

// sourceCluster is Envoy's local service cluster: the bootstrap node's
// cluster; nothing to read when it has none.
type sourceCluster struct{}

func (sourceCluster) populate(es []Entry, r Request) ([]Entry, bool) {
	if r.LocalCluster == "" {
		return es, false
	}
	return append(es, Entry{"source_cluster", r.LocalCluster}), true
}

// destinationCluster is the route's cluster; a server's routes have none
// (non_forwarding_action): nothing to read.
type destinationCluster struct{}

func (destinationCluster) populate(es []Entry, _ Request) ([]Entry, bool) { return es, false }

// absent is an action whose value a gRPC request never has (a query
// parameter): the descriptor is left out, or with skipIfAbsent only the
// entry.
type absent struct{ skipIfAbsent bool }

func (a absent) populate(es []Entry, _ Request) ([]Entry, bool) { return es, a.skipIfAbsent }

type constant Entry

func (c constant) populate(es []Entry, _ Request) ([]Entry, bool) {
	return append(es, Entry(c)), true
}

type requestHeaders struct {
	name, key    string
	skipIfAbsent bool
}

func (a requestHeaders) populate(es []Entry, r Request) ([]Entry, bool) {
	v, ok := headerValue(&r.Request, a.name)
	if !ok {
		return es, a.skipIfAbsent
	}
	return append(es, Entry{a.key, v}), true
}

// headerValue returns the first value of the request header name as Envoy
// sees it: the pseudo-headers of a gRPC request, binary values as they were
// on the wire (matcher.WireBinary).
func headerValue(r *httpfilter.Request, name string) (string, bool) {
	switch name {
	case ":path":
		return r.FullMethod, r.FullMethod != ""
	case ":method":
		return "POST", true
	case ":authority", "host":
		return r.Authority, r.Authority != ""
	case ":scheme":
		if r.TLS {
			return "https", true
		}
		return "http", true
	}
	if r.Header == nil {
		return "", false
	}
	vals := r.Header.Get(name)
	if len(vals) == 0 {
		return "", false
	}
	if strings.HasSuffix(name, "-bin") {
		return matcher.WireBinary(vals[0]), true
	}
	return vals[0], true
}

type remoteAddress struct{}

func (remoteAddress) populate(es []Entry, r Request) ([]Entry, bool) {
	if !r.Remote.IsValid() {
		return es, false
	}
	return append(es, Entry{"remote_address", r.Remote.Addr().String()}), true
}

type maskedRemoteAddress struct{ v4, v6 int }

func (m maskedRemoteAddress) populate(es []Entry, r Request) ([]Entry, bool) {
	if !r.Remote.IsValid() {
		return es, false
	}
	a := r.Remote.Addr().WithZone("")
	bits := m.v6
	if a.Is4() {
		bits = m.v4
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return es, false
	}
	return append(es, Entry{"masked_remote_address", p.String()}), true
}

type remoteAddressMatch struct {
	entry  Entry
	ranges []matcher.CIDRMatcher
	invert bool
}

func (m remoteAddressMatch) populate(es []Entry, r Request) ([]Entry, bool) {
	in := false
	if r.Remote.IsValid() {
		for i := range m.ranges {
			if m.ranges[i].Contains(r.Remote.Addr()) {
				in = true
				break
			}
		}
	}
	if in == m.invert || m.entry.Value == "" {
		return es, false
	}
	return append(es, m.entry), true
}

type headerValueMatch struct {
	entry       Entry
	expectMatch bool
	headers     []matcher.HeaderMatcher
}

func (h headerValueMatch) populate(es []Entry, r Request) ([]Entry, bool) {
	matched := true
	hv := envoyHeaders{&r.Request}
	for i := range h.headers {
		if !h.headers[i].Match(hv) {
			matched = false
			break
		}
	}
	if matched != h.expectMatch {
		return es, false
	}
	return append(es, h.entry), true
}

// envoyHeaders is the request's headers as Envoy's header matchers see
// them (headerValue's view), all values.
type envoyHeaders struct{ r *httpfilter.Request }

func (h envoyHeaders) Get(name string) []string {
	if strings.HasPrefix(name, ":") || name == "host" {
		if v, ok := headerValue(h.r, name); ok {
			return []string{v}
		}
		return nil
	}
	if h.r.Header == nil {
		return nil
	}
	vals := h.r.Header.Get(name)
	if !strings.HasSuffix(name, "-bin") || len(vals) == 0 {
		return vals
	}
	// Every value in its wire form: a matcher joins them with ",", as
	// Envoy matches a header that comes more than once, so a client cannot
	// pick the value matched by repeating the header.
	wire := make([]string, len(vals))
	for i, v := range vals {
		wire[i] = matcher.WireBinary(v)
	}
	return wire
}

type metadataAction struct {
	key, def     string
	skipIfAbsent bool
	filter       string   // "" for dynamic metadata: always absent
	path         []string // keys into filter_metadata[filter]
}

func (m metadataAction) populate(es []Entry, r Request) ([]Entry, bool) {
	v := ""
	if m.filter != "" {
		v = lookup(r.RouteMetadata, m.filter, m.path)
	}
	switch {
	case v != "":
		return append(es, Entry{m.key, v}), true
	case m.def != "":
		return append(es, Entry{m.key, m.def}), true
	}
	return es, m.skipIfAbsent
}

// lookup returns the string at path in md's filter_metadata[filter]; ""
// when absent or not a string.
func lookup(md *corepb.Metadata, filter string, path []string) string {
	s := md.GetFilterMetadata()[filter]
	var v *structpb.Value
	for i, k := range path {
		if s == nil {
			return ""
		}
		v = s.GetFields()[k]
		if i < len(path)-1 {
			s = v.GetStructValue()
		}
	}
	return v.GetStringValue()
}
