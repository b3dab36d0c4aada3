package matcher_test

import (
	"strings"
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/proxyless-grpc/xds/internal/matcher"
)

// md is a Headers like grpc's metadata.MD.
type md map[string][]string

func (m md) Get(k string) []string { return m[k] }

func hExact(name, v string) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: v}}
}

func hPresent(name string, present bool) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: present}}
}

func hRange(name string, start, end int64) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_RangeMatch{RangeMatch: &typepb.Int64Range{Start: start, End: end}}}
}

func hString(name string, sm *matcherpb.StringMatcher) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: sm}}
}

func inverted(m *routepb.HeaderMatcher) *routepb.HeaderMatcher {
	m.InvertMatch = true
	return m
}

func TestHeaderMatcher(t *testing.T) {
	tests := []struct {
		desc string
		m    *routepb.HeaderMatcher
		h    md
		want bool
	}{
		{desc: "exact", m: hExact("k", "v"), h: md{"k": {"v"}}, want: true},
		{desc: "exact differs", m: hExact("k", "v"), h: md{"k": {"w"}}},
		{desc: "exact absent", m: hExact("k", "v"), h: md{}},
		{desc: "exact inverted", m: inverted(hExact("k", "v")), h: md{"k": {"w"}}, want: true},
		{desc: "inverted value matcher fails on absent header", m: inverted(hExact("k", "v")), h: md{}},
		{desc: "name is lower-cased", m: hExact("My-Key", "v"), h: md{"my-key": {"v"}}, want: true},
		{desc: "values joined with comma", m: hExact("k", "a,b"), h: md{"k": {"a", "b"}}, want: true},
		{desc: "deprecated prefix", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_PrefixMatch{PrefixMatch: "ab"}}, h: md{"k": {"abc"}}, want: true},
		{desc: "deprecated suffix", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_SuffixMatch{SuffixMatch: "bc"}}, h: md{"k": {"abc"}}, want: true},
		{desc: "deprecated contains", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_ContainsMatch{ContainsMatch: "b"}}, h: md{"k": {"abc"}}, want: true},
		{desc: "deprecated fields are case sensitive", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_ContainsMatch{ContainsMatch: "B"}}, h: md{"k": {"abc"}}},
		{desc: "safe_regex_match", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherpb.RegexMatcher{Regex: "[0-9]+"}}}, h: md{"k": {"123"}}, want: true},
		{desc: "safe_regex_match is a full match", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherpb.RegexMatcher{Regex: "[0-9]+"}}}, h: md{"k": {"123a"}}},
		{desc: "string_match ignore case", m: hString("k", exact("ABC", true)), h: md{"k": {"abc"}}, want: true},
		{desc: "range in", m: hRange("k", 10, 20), h: md{"k": {"10"}}, want: true},
		{desc: "range end exclusive", m: hRange("k", 10, 20), h: md{"k": {"20"}}},
		{desc: "range negative", m: hRange("k", -20, -10), h: md{"k": {"-15"}}, want: true},
		{desc: "range not a number", m: hRange("k", 10, 20), h: md{"k": {"1x"}}},
		{desc: "range not a number inverted", m: inverted(hRange("k", 10, 20)), h: md{"k": {"1x"}}, want: true},
		{desc: "present true, present", m: hPresent("k", true), h: md{"k": {""}}, want: true},
		{desc: "present true, absent", m: hPresent("k", true), h: md{}},
		{desc: "present false, absent", m: hPresent("k", false), h: md{}, want: true},
		{desc: "present false, present", m: hPresent("k", false), h: md{"k": {"v"}}},
		{desc: "present true inverted, absent", m: inverted(hPresent("k", true)), h: md{}, want: true},
		{desc: "present true inverted, present", m: inverted(hPresent("k", true)), h: md{"k": {"v"}}},
		{desc: "empty value list is absent", m: hPresent("k", true), h: md{"k": {}}},
		{desc: "missing as empty", m: &routepb.HeaderMatcher{Name: "k", TreatMissingHeaderAsEmpty: true, HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{}}, h: md{}, want: true},
		{desc: "missing as empty inverted", m: &routepb.HeaderMatcher{Name: "k", TreatMissingHeaderAsEmpty: true, InvertMatch: true, HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: "v"}}, h: md{}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			m, err := matcher.NewHeaderMatcher(tc.m)
			if err != nil {
				t.Fatalf("NewHeaderMatcher(%v) failed: %v", tc.m, err)
			}
			if got := m.Match(tc.h); got != tc.want {
				t.Errorf("Match(%v) = %v, want %v", tc.h, got, tc.want)
			}
		})
	}
}

func TestNewHeaderMatcherErrors(t *testing.T) {
	tests := []struct {
		desc      string
		m         *routepb.HeaderMatcher
		wantField string
	}{
		{desc: "empty name", m: hExact("", "v"), wantField: "name"},
		{desc: "name with newline", m: hExact("a\nb", "v"), wantField: "name"},
		{desc: "no specifier", m: &routepb.HeaderMatcher{Name: "k"}, wantField: "header_match_specifier"},
		{desc: "empty prefix_match", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_PrefixMatch{}}, wantField: "prefix_match"},
		{desc: "empty suffix_match", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_SuffixMatch{}}, wantField: "suffix_match"},
		{desc: "empty contains_match", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_ContainsMatch{}}, wantField: "contains_match"},
		{desc: "bad safe_regex_match", m: &routepb.HeaderMatcher{Name: "k", HeaderMatchSpecifier: &routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherpb.RegexMatcher{Regex: "("}}}, wantField: "safe_regex_match.regex"},
		{desc: "bad string_match", m: hString("k", prefix("", false)), wantField: "string_match.prefix"},
		{desc: "range start after end", m: hRange("k", 2, 1), wantField: "range_match"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := matcher.NewHeaderMatcher(tc.m)
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantField) {
				t.Errorf("NewHeaderMatcher(%v) = %v, want an error starting with %q", tc.m, err, tc.wantField)
			}
		})
	}
}

func TestHeaderMatcherNoAllocs(t *testing.T) {
	h := md{"k": {"12"}}
	for _, pb := range []*routepb.HeaderMatcher{hExact("k", "12"), hRange("k", 0, 100), hPresent("k", true), hString("k", regex("[0-9]+"))} {
		m, err := matcher.NewHeaderMatcher(pb)
		if err != nil {
			t.Fatal(err)
		}
		m.Match(h)
		if n := testing.AllocsPerRun(100, func() { m.Match(h) }); n != 0 {
			t.Errorf("%v: Match allocates %v times, want 0", pb, n)
		}
	}
}

func TestHeaderMatcherMatchValues(t *testing.T) {
	m, err := matcher.NewHeaderMatcher(hExact("k", "a,b"))
	if err != nil {
		t.Fatal(err)
	}
	if !m.MatchValues([]string{"a", "b"}) {
		t.Errorf("MatchValues([a b]) = false, want true")
	}
	if m.MatchValues(nil) {
		t.Errorf("MatchValues(nil) = true, want false")
	}
}
