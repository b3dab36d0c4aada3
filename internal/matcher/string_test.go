package matcher_test

import (
	"strings"
	"testing"

	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/matcher"
)

func exact(s string, ic bool) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: s}, IgnoreCase: ic}
}

func prefix(s string, ic bool) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: s}, IgnoreCase: ic}
}

func suffix(s string, ic bool) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Suffix{Suffix: s}, IgnoreCase: ic}
}

func contains(s string, ic bool) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Contains{Contains: s}, IgnoreCase: ic}
}

func regex(re string) *matcherpb.StringMatcher {
	return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: re}}}
}

func TestStringMatcher(t *testing.T) {
	tests := []struct {
		desc  string
		m     *matcherpb.StringMatcher
		input string
		want  bool
	}{
		{desc: "exact", m: exact("abc", false), input: "abc", want: true},
		{desc: "exact differs", m: exact("abc", false), input: "abcd"},
		{desc: "exact case differs", m: exact("abc", false), input: "ABC"},
		{desc: "exact ignore case", m: exact("aBc", true), input: "AbC", want: true},
		{desc: "exact ignore case is ASCII only", m: exact("k", true), input: "\u212a"},
		{desc: "exact empty", m: exact("", false), input: "", want: true},
		{desc: "exact empty vs non-empty", m: exact("", false), input: "a"},
		{desc: "prefix", m: prefix("ab", false), input: "abc", want: true},
		{desc: "prefix longer than input", m: prefix("abcd", false), input: "abc"},
		{desc: "prefix case differs", m: prefix("ab", false), input: "ABc"},
		{desc: "prefix ignore case", m: prefix("aB", true), input: "Abc", want: true},
		{desc: "suffix", m: suffix("bc", false), input: "abc", want: true},
		{desc: "suffix no", m: suffix("bc", false), input: "abd"},
		{desc: "suffix ignore case", m: suffix("BC", true), input: "abc", want: true},
		{desc: "suffix ignore case too long", m: suffix("xabc", true), input: "abc"},
		{desc: "contains", m: contains("b", false), input: "abc", want: true},
		{desc: "contains no", m: contains("d", false), input: "abc"},
		{desc: "contains ignore case", m: contains("Bc", true), input: "aBCd", want: true},
		{desc: "contains ignore case no", m: contains("Bd", true), input: "aBCd"},
		{desc: "regex full match", m: regex("a+b"), input: "aab", want: true},
		{desc: "regex partial is no match", m: regex("a+b"), input: "aabc"},
		{desc: "regex alternation stays anchored", m: regex("a|bc"), input: "abc"},
		{desc: "regex alternation", m: regex("a|bc"), input: "bc", want: true},
		{desc: "regex ignores ignore_case", m: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: "a"}}, IgnoreCase: true}, input: "A"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			m, err := matcher.NewStringMatcher(tc.m)
			if err != nil {
				t.Fatalf("NewStringMatcher(%v) failed: %v", tc.m, err)
			}
			if got := m.Match(tc.input); got != tc.want {
				t.Errorf("Match(%q) = %v, want %v", tc.input, got, tc.want)
			}
		})
	}
}

func TestNewStringMatcherErrors(t *testing.T) {
	tests := []struct {
		desc      string
		m         *matcherpb.StringMatcher
		wantField string
	}{
		{desc: "nil", m: nil, wantField: "match_pattern"},
		{desc: "unset", m: &matcherpb.StringMatcher{}, wantField: "match_pattern"},
		{desc: "empty prefix", m: prefix("", false), wantField: "prefix"},
		{desc: "empty suffix", m: suffix("", false), wantField: "suffix"},
		{desc: "empty contains", m: contains("", false), wantField: "contains"},
		{desc: "regex unset", m: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{}}, wantField: "safe_regex.regex"},
		{desc: "regex empty", m: regex(""), wantField: "safe_regex.regex"},
		{desc: "regex invalid", m: regex("a("), wantField: `safe_regex.regex: invalid RE2 regex "a("`},
		{desc: "regex unbalanced so that anchoring would hide it", m: regex("a)|(b"), wantField: `safe_regex.regex: invalid RE2 regex "a)|(b"`},
		{desc: "custom", m: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Custom{}}, wantField: "custom"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := matcher.NewStringMatcher(tc.m)
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantField) {
				t.Errorf("NewStringMatcher(%v) = %v, want an error starting with %q", tc.m, err, tc.wantField)
			}
		})
	}
}

func TestNewStringMatcherMaxProgramSizeIgnored(t *testing.T) {
	m := &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{
		Regex:      "a{1,100}",
		EngineType: &matcherpb.RegexMatcher_GoogleRe2{GoogleRe2: &matcherpb.RegexMatcher_GoogleRE2{MaxProgramSize: wrapperspb.UInt32(1)}},
	}}}
	if _, err := matcher.NewStringMatcher(m); err != nil {
		t.Errorf("NewStringMatcher(%v) = %v, want no error (max_program_size is ignored, gRFC A28)", m, err)
	}
}

func TestPathMatchers(t *testing.T) {
	tests := []struct {
		desc  string
		m     matcher.StringMatcher
		input string
		want  bool
	}{
		{desc: "empty prefix matches all", m: matcher.NewPrefixMatcher("", false), input: "/x", want: true},
		{desc: "prefix ignore case", m: matcher.NewPrefixMatcher("/Svc/", true), input: "/sVC/m", want: true},
		{desc: "exact ignore case", m: matcher.NewExactMatcher("/Svc/M", true), input: "/svc/m", want: true},
		{desc: "exact case sensitive", m: matcher.NewExactMatcher("/Svc/M", false), input: "/svc/m"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.m.Match(tc.input); got != tc.want {
				t.Errorf("Match(%q) = %v, want %v", tc.input, got, tc.want)
			}
		})
	}
}

func TestStringMatcherNoAllocs(t *testing.T) {
	ms := []*matcherpb.StringMatcher{exact("abc", true), prefix("a", true), suffix("C", true), contains("b", true), regex("a.c")}
	for _, pb := range ms {
		m, err := matcher.NewStringMatcher(pb)
		if err != nil {
			t.Fatal(err)
		}
		m.Match("aBc")
		if n := testing.AllocsPerRun(100, func() { m.Match("aBc") }); n != 0 {
			t.Errorf("%v: Match allocates %v times, want 0", pb, n)
		}
	}
}

func TestCompilerSharesRegexes(t *testing.T) {
	c := &matcher.Compiler{}
	a, err := c.Regex(&matcherpb.RegexMatcher{Regex: "a+"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Regex(&matcherpb.RegexMatcher{Regex: "a+"})
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("Compiler.Regex compiled the same regex twice, want one shared *regexp.Regexp")
	}
	if _, err := c.Regex(&matcherpb.RegexMatcher{Regex: "("}); err == nil {
		t.Errorf("Compiler.Regex(%q) succeeded, want an error", "(")
	}
}
