// Package matcher compiles the string, header and CIDR matchers of xDS
// resources into immutable values that match without failing and, on the
// common paths, without allocating. Routing (gRFC A28) uses them now, RBAC
// (gRFC A41) later.
//
// Every matcher is built once by a constructor that validates its proto and
// returns an error naming the offending field, relative to the message it was
// given (for example `safe_regex.regex: ...`), so that callers can prefix the
// path of that message. Compiled matchers are safe for concurrent use.
package matcher

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"

	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
)

// Compiler compiles matchers, sharing one compiled regex between identical
// regexes: a resource often repeats them (a route per virtual host), and
// compiling a regex costs far more than the rest of a matcher. A nil
// *Compiler compiles without sharing. A Compiler is not safe for concurrent
// use; make one per decode. The matchers it returns are.
type Compiler struct {
	regexes map[string]*regexp.Regexp // by source; *regexp.Regexp is safe for concurrent use
}

// stringKind is the kind of a StringMatcher.
type stringKind uint8

const (
	kindExact stringKind = iota
	kindPrefix
	kindSuffix
	kindContains
	kindRegex
)

// StringMatcher is a compiled envoy.type.matcher.v3.StringMatcher. The zero
// value matches only the empty string. It is immutable.
type StringMatcher struct {
	kind       stringKind
	ignoreCase bool
	pattern    string         // lower-cased (ASCII) when ignoreCase
	re         *regexp.Regexp // kindRegex only
}

// NewStringMatcher compiles m; see Compiler.StringMatcher.
func NewStringMatcher(m *matcherpb.StringMatcher) (StringMatcher, error) {
	return (*Compiler)(nil).StringMatcher(m)
}

// StringMatcher compiles m. It follows Envoy's validation rules: one
// match_pattern must be set; prefix, suffix and contains must not be empty
// (exact may be); safe_regex must hold a non-empty RE2 regex that compiles.
// ignore_case applies to every kind but safe_regex, as in Envoy. The custom
// extension matcher is not supported.
func (c *Compiler) StringMatcher(m *matcherpb.StringMatcher) (StringMatcher, error) {
	if m == nil {
		return StringMatcher{}, fieldpath.Errorf("match_pattern", "unset, want one of exact, prefix, suffix, contains, safe_regex")
	}
	sm := StringMatcher{ignoreCase: m.GetIgnoreCase()}
	switch p := m.GetMatchPattern().(type) {
	case *matcherpb.StringMatcher_Exact:
		sm.kind, sm.pattern = kindExact, p.Exact
	case *matcherpb.StringMatcher_Prefix:
		sm.kind, sm.pattern = kindPrefix, p.Prefix
	case *matcherpb.StringMatcher_Suffix:
		sm.kind, sm.pattern = kindSuffix, p.Suffix
	case *matcherpb.StringMatcher_Contains:
		sm.kind, sm.pattern = kindContains, p.Contains
	case *matcherpb.StringMatcher_SafeRegex:
		re, err := c.Regex(p.SafeRegex)
		if err != nil {
			return StringMatcher{}, fieldpath.In("safe_regex", err)
		}
		return StringMatcher{kind: kindRegex, re: re}, nil
	case *matcherpb.StringMatcher_Custom:
		return StringMatcher{}, fieldpath.Errorf("custom", "extension matcher %q is not supported", p.Custom.GetName())
	default:
		return StringMatcher{}, fieldpath.Errorf("match_pattern", "unset, want one of exact, prefix, suffix, contains, safe_regex")
	}
	if sm.kind != kindExact && sm.pattern == "" {
		return StringMatcher{}, fieldpath.Errorf(fmt.Sprintf("%s", sm.kind), "empty, want at least 1 character")
	}
	if sm.ignoreCase {
		sm.pattern = lowerASCII(sm.pattern)
	}
	return sm, nil
}

// String returns the proto field name of the kind.
func (k stringKind) String() string {
	switch k {
	case kindExact:
		return "exact"
	case kindPrefix:
		return "prefix"
	case kindSuffix:
		return "suffix"
	case kindContains:
		return "contains"
	default:
		return "safe_regex"
	}
}

// CompileRegex compiles an Envoy RegexMatcher; see Compiler.Regex.
func CompileRegex(m *matcherpb.RegexMatcher) (*regexp.Regexp, error) {
	return (*Compiler)(nil).Regex(m)
}

// Regex compiles an Envoy RegexMatcher for full-string matching: the
// regex must match the whole input, as RE2's FullMatch does in Envoy. The
// deprecated google_re2.max_program_size is ignored (gRFC A28). Errors name
// the field relative to the RegexMatcher (`regex: ...`).
func (c *Compiler) Regex(m *matcherpb.RegexMatcher) (*regexp.Regexp, error) {
	if m == nil {
		return nil, fieldpath.Errorf("regex", "unset, want a non-empty RE2 regex")
	}
	expr := m.GetRegex()
	if c != nil {
		if re, ok := c.regexes[expr]; ok {
			return re, nil
		}
	}
	re, err := compileFull(expr)
	if err != nil {
		return nil, err
	}
	if c != nil {
		if c.regexes == nil {
			c.regexes = map[string]*regexp.Regexp{}
		}
		c.regexes[expr] = re
	}
	return re, nil
}

func compileFull(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, fieldpath.Errorf("regex", "empty, want a non-empty RE2 regex")
	}
	// Parse the regex alone first: wrapped, an unbalanced one such as
	// "a)|(b" would compile into something else.
	if _, err := syntax.Parse(expr, syntax.Perl); err != nil {
		return nil, fieldpath.Errorf("regex", "invalid RE2 regex %q: %w", expr, err)
	}
	// The group keeps alternations inside the anchors; the outer ^ and $ are
	// text anchors because no flag outside the group turns on multi-line mode.
	re, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		return nil, fieldpath.Errorf("regex", "invalid RE2 regex %q: %w", expr, err)
	}
	return re, nil
}

// Match reports whether s matches. It does not allocate, except that a
// safe_regex may allocate inside package regexp for complex programs.
func (m *StringMatcher) Match(s string) bool {
	switch m.kind {
	case kindExact:
		if m.ignoreCase {
			return equalFoldASCII(s, m.pattern)
		}
		return s == m.pattern
	case kindPrefix:
		if m.ignoreCase {
			return len(s) >= len(m.pattern) && equalFoldASCII(s[:len(m.pattern)], m.pattern)
		}
		return strings.HasPrefix(s, m.pattern)
	case kindSuffix:
		if m.ignoreCase {
			return len(s) >= len(m.pattern) && equalFoldASCII(s[len(s)-len(m.pattern):], m.pattern)
		}
		return strings.HasSuffix(s, m.pattern)
	case kindContains:
		if m.ignoreCase {
			return containsFoldASCII(s, m.pattern)
		}
		return strings.Contains(s, m.pattern)
	default:
		return m.re.MatchString(s)
	}
}

// lowerASCII lower-cases the ASCII letters of s, returning s itself when it
// has none.
func lowerASCII(s string) string {
	if !hasUpperASCII(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// hasUpperASCII reports whether s has an ASCII upper-case letter.
func hasUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

// equalFoldASCII reports whether s equals lower, which is already
// lower-case, ignoring ASCII case only (as Envoy does; Unicode folding such as
// the Kelvin sign does not apply).
func equalFoldASCII(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// containsFoldASCII reports whether s contains lower, which is already
// lower-case, ignoring ASCII case.
func containsFoldASCII(s, lower string) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		if equalFoldASCII(s[i:i+len(lower)], lower) {
			return true
		}
	}
	return false
}

// NewExactMatcher returns a matcher of the whole string s, ignoring ASCII
// case if ignoreCase is set. Unlike a StringMatcher proto, s may be empty.
func NewExactMatcher(s string, ignoreCase bool) StringMatcher {
	if ignoreCase {
		s = lowerASCII(s)
	}
	return StringMatcher{kind: kindExact, pattern: s, ignoreCase: ignoreCase}
}

// NewPrefixMatcher returns a matcher of strings starting with prefix,
// ignoring ASCII case if ignoreCase is set. Unlike a StringMatcher proto,
// prefix may be empty; it then matches every string.
func NewPrefixMatcher(prefix string, ignoreCase bool) StringMatcher {
	if ignoreCase {
		prefix = lowerASCII(prefix)
	}
	return StringMatcher{kind: kindPrefix, pattern: prefix, ignoreCase: ignoreCase}
}

// NewRegexMatcher compiles a RegexMatcher into a full-match StringMatcher;
// see Compiler.RegexMatcher.
func NewRegexMatcher(m *matcherpb.RegexMatcher) (StringMatcher, error) {
	return (*Compiler)(nil).RegexMatcher(m)
}

// RegexMatcher compiles a RegexMatcher into a full-match StringMatcher; see
// Regex.
func (c *Compiler) RegexMatcher(m *matcherpb.RegexMatcher) (StringMatcher, error) {
	re, err := c.Regex(m)
	if err != nil {
		return StringMatcher{}, err
	}
	return StringMatcher{kind: kindRegex, re: re}, nil
}

// MatchAny reports whether one of ms matches s.
func MatchAny(ms []StringMatcher, s string) bool {
	for i := range ms {
		if ms[i].Match(s) {
			return true
		}
	}
	return false
}
