package matcher

import (
	"fmt"
	"strconv"
	"strings"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/proxyless-grpc/xds/httpfilter"
	"github.com/proxyless-grpc/xds/internal/fieldpath"
)

// Headers is the request metadata a HeaderMatcher reads: the one Headers
// of the module, httpfilter.Headers.
type Headers = httpfilter.Headers

// headerKind is the kind of a HeaderMatcher.
type headerKind uint8

const (
	headerString  headerKind = iota // match the value with a StringMatcher
	headerRange                     // parse the value as an int64 in [start, end)
	headerPresent                   // check presence only
)

// HeaderMatcher is a compiled envoy.config.route.v3.HeaderMatcher. It is
// immutable.
type HeaderMatcher struct {
	name           string // lower-case
	kind           headerKind
	str            StringMatcher // headerString
	start, end     int64         // headerRange
	present        bool          // headerPresent: match when presence equals this
	invert         bool
	missingAsEmpty bool
}

// NewHeaderMatcher compiles m; see Compiler.HeaderMatcher.
func NewHeaderMatcher(m *routepb.HeaderMatcher) (HeaderMatcher, error) {
	return (*Compiler)(nil).HeaderMatcher(m)
}

// HeaderMatcher compiles m. The name must be non-empty and free of NUL,
// CR and LF (Envoy's rules); it is lower-cased, as header names are
// case-insensitive. Exactly one header_match_specifier must be set: the
// deprecated exact/prefix/suffix/contains/safe_regex fields, string_match,
// range_match (start <= end) or present_match. Errors name the field relative
// to the HeaderMatcher.
func (c *Compiler) HeaderMatcher(m *routepb.HeaderMatcher) (HeaderMatcher, error) {
	name := m.GetName()
	if name == "" {
		return HeaderMatcher{}, fieldpath.Errorf("name", "empty, want a header name")
	}
	if strings.ContainsAny(name, "\x00\r\n") {
		return HeaderMatcher{}, fieldpath.Errorf("name", "%q contains NUL, CR or LF", name)
	}
	hm := HeaderMatcher{
		name:           lowerASCII(name),
		invert:         m.GetInvertMatch(),
		missingAsEmpty: m.GetTreatMissingHeaderAsEmpty(),
	}
	var err error
	switch s := m.GetHeaderMatchSpecifier().(type) {
	case *routepb.HeaderMatcher_ExactMatch:
		hm.str = StringMatcher{kind: kindExact, pattern: s.ExactMatch}
	case *routepb.HeaderMatcher_PrefixMatch:
		hm.str, err = deprecatedMatcher("prefix_match", kindPrefix, s.PrefixMatch)
	case *routepb.HeaderMatcher_SuffixMatch:
		hm.str, err = deprecatedMatcher("suffix_match", kindSuffix, s.SuffixMatch)
	case *routepb.HeaderMatcher_ContainsMatch:
		hm.str, err = deprecatedMatcher("contains_match", kindContains, s.ContainsMatch)
	case *routepb.HeaderMatcher_SafeRegexMatch:
		re, rerr := c.Regex(s.SafeRegexMatch)
		if rerr != nil {
			return HeaderMatcher{}, fieldpath.In("safe_regex_match", rerr)
		}
		hm.str = StringMatcher{kind: kindRegex, re: re}
	case *routepb.HeaderMatcher_StringMatch:
		hm.str, err = c.StringMatcher(s.StringMatch)
		if err != nil {
			err = fieldpath.In("string_match", err)
		}
	case *routepb.HeaderMatcher_RangeMatch:
		hm.kind = headerRange
		hm.start, hm.end = s.RangeMatch.GetStart(), s.RangeMatch.GetEnd()
		if hm.start > hm.end {
			err = fieldpath.Errorf("range_match", "start %d is greater than end %d", hm.start, hm.end)
		}
	case *routepb.HeaderMatcher_PresentMatch:
		hm.kind, hm.present = headerPresent, s.PresentMatch
	default:
		err = fieldpath.Errorf("header_match_specifier", "unset, want one of exact_match, safe_regex_match, range_match, present_match, prefix_match, suffix_match, contains_match, string_match")
	}
	if err != nil {
		return HeaderMatcher{}, err
	}
	return hm, nil
}

// deprecatedMatcher builds the StringMatcher of a deprecated HeaderMatcher
// field, which Envoy requires to be non-empty.
func deprecatedMatcher(field string, kind stringKind, pattern string) (StringMatcher, error) {
	if pattern == "" {
		return StringMatcher{}, fieldpath.Errorf(fmt.Sprintf("%s", field), "empty, want at least 1 character")
	}
	return StringMatcher{kind: kind, pattern: pattern}, nil
}

// Name returns the header name the matcher reads, lower-cased.
func (m *HeaderMatcher) Name() string { return m.name }

// Match reports whether the headers match; it is MatchValues of the values
// of the header named by the matcher. It applies Envoy's semantics only:
// users such as routing (gRFC A28) and RBAC (gRFC A41) differ in which
// headers they let a matcher see, so they apply their own rules through
// MatchValues.
func (m *HeaderMatcher) Match(h Headers) bool { return m.MatchValues(h.Get(m.name)) }

// MatchValues reports whether the header matches, given its values; none
// means the header is absent. Several values are joined with "," first, as
// in Envoy and gRFC A28. An absent header matches only a present_match of
// false, or of true when inverted; other matchers fail on it even when
// inverted (Envoy's rule), unless treat_missing_header_as_empty is set, in
// which case it is present with the value "". MatchValues allocates only to
// join several values.
func (m *HeaderMatcher) MatchValues(vals []string) bool {
	var v string
	switch {
	case len(vals) == 1:
		v = vals[0]
	case len(vals) > 1:
		v = strings.Join(vals, ",")
	case m.missingAsEmpty:
		v = ""
	default:
		return m.kind == headerPresent && m.present == m.invert
	}
	var ok bool
	switch m.kind {
	case headerPresent:
		ok = m.present
	case headerRange:
		n, err := strconv.ParseInt(v, 10, 64)
		ok = err == nil && m.start <= n && n < m.end
	default:
		ok = m.str.Match(v)
	}
	return ok != m.invert
}
