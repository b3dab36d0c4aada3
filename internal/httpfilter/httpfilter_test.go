package httpfilter

import (
	"errors"
	"strings"
	"testing"

	udpatypepb "github.com/cncf/xds/go/udpa/type/v1"
	xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	luapb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// testFilter is a non-terminal filter whose config is a StringValue and whose
// override is a UInt32Value; it counts parses so memoization is observable.
type testFilter struct{ parses *int }

const (
	testConfigURL   = "type.googleapis.com/google.protobuf.StringValue"
	testOverrideURL = "type.googleapis.com/google.protobuf.UInt32Value"
)

func (testFilter) ConfigTypeURLs() []string   { return []string{testConfigURL} }
func (testFilter) OverrideTypeURLs() []string { return []string{testOverrideURL} }
func (f testFilter) ParseConfig(raw RawConfig) (Config, error) {
	*f.parses++
	v := &wrapperspb.StringValue{}
	if err := raw.UnmarshalTo(v); err != nil {
		return nil, err
	}
	if v.GetValue() == "bad" {
		return nil, errors.New(`value "bad" is not allowed`)
	}
	return v.GetValue(), nil
}
func (f testFilter) ParseOverride(raw RawConfig) (Config, error) {
	*f.parses++
	v := &wrapperspb.UInt32Value{}
	if err := raw.UnmarshalTo(v); err != nil {
		return nil, err
	}
	return v.GetValue(), nil
}
func (testFilter) IsTerminal() bool                               { return false }
func (testFilter) BuildStep(string, Config, Config) (Step, error) { return nil, nil }

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func router(t testing.TB) *hcmpb.HttpFilter {
	return &hcmpb.HttpFilter{Name: "router", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerpb.Router{})}}
}

func filter(name string, cfg *anypb.Any, optional bool) *hcmpb.HttpFilter {
	return &hcmpb.HttpFilter{Name: name, IsOptional: optional, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: cfg}}
}

func newTestParser() (*Parser, *int) {
	n := 0
	return NewParser(NewRegistry(Router{}, testFilter{parses: &n})), &n
}

func TestHTTPFilters(t *testing.T) {
	unknown := mustAny(t, &luapb.Lua{})
	tests := []struct {
		desc      string
		filters   func(t *testing.T) []*hcmpb.HttpFilter
		wantNames []string
		wantErr   string // substring naming the field; "" = valid
	}{
		{
			desc:      "router only",
			filters:   func(t *testing.T) []*hcmpb.HttpFilter { return []*hcmpb.HttpFilter{router(t)} },
			wantNames: []string{"router"},
		},
		{
			desc: "filter then router",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{filter("a", mustAny(t, wrapperspb.String("x")), false), router(t)}
			},
			wantNames: []string{"a", "router"},
		},
		{
			desc: "unknown optional filter is skipped",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{filter("lua", unknown, true), router(t)}
			},
			wantNames: []string{"router"},
		},
		{
			desc: "config in udpa TypedStruct",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				ts := &udpatypepb.TypedStruct{TypeUrl: RouterTypeURL, Value: &structpb.Struct{}}
				return []*hcmpb.HttpFilter{filter("r", mustAny(t, ts), false)}
			},
			wantNames: []string{"r"},
		},
		{
			desc: "config in xds TypedStruct",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				ts := &xdstypepb.TypedStruct{TypeUrl: RouterTypeURL}
				return []*hcmpb.HttpFilter{filter("r", mustAny(t, ts), false)}
			},
			wantNames: []string{"r"},
		},
		{
			desc:    "empty list",
			filters: func(*testing.T) []*hcmpb.HttpFilter { return nil },
			wantErr: "http_filters: empty",
		},
		{
			desc: "duplicate names",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{filter("router", mustAny(t, wrapperspb.String("x")), false), router(t)}
			},
			wantErr: `http_filters[1]: duplicate filter name "router"`,
		},
		{
			desc: "empty name",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{filter("", mustAny(t, &routerpb.Router{}), false)}
			},
			wantErr: "http_filters[0]: empty name",
		},
		{
			desc: "unknown required filter",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{filter("lua", unknown, false), router(t)}
			},
			wantErr: `http_filters[0] ("lua"): unsupported filter config type "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"`,
		},
		{
			desc: "router not last",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{router(t), filter("a", mustAny(t, wrapperspb.String("x")), false)}
			},
			wantErr: `terminal filter "router" is not last`,
		},
		{
			desc: "no router",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{filter("a", mustAny(t, wrapperspb.String("x")), false)}
			},
			wantErr: `last filter "a" is not a terminal filter`,
		},
		{
			desc: "router after a skipped optional filter is still last",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{router(t), filter("lua", unknown, true)}
			},
			wantNames: []string{"router"},
		},
		{
			desc: "filter rejects its config",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{filter("a", mustAny(t, wrapperspb.String("bad")), false), router(t)}
			},
			wantErr: `http_filters[0] ("a"): value "bad" is not allowed`,
		},
		{
			desc:    "missing typed_config",
			filters: func(t *testing.T) []*hcmpb.HttpFilter { return []*hcmpb.HttpFilter{{Name: "x"}, router(t)} },
			wantErr: `http_filters[0] ("x"): typed_config is missing`,
		},
		{
			desc: "TypedStruct with a value that does not fit the type",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				s, _ := structpb.NewStruct(map[string]any{"no_such_field": 1})
				ts := &udpatypepb.TypedStruct{TypeUrl: RouterTypeURL, Value: s}
				return []*hcmpb.HttpFilter{filter("r", mustAny(t, ts), false)}
			},
			wantErr: `http_filters[0] ("r"): TypedStruct value is not a valid envoy.extensions.filters.http.router.v3.Router`,
		},
		{
			desc: "malformed config bytes",
			filters: func(t *testing.T) []*hcmpb.HttpFilter {
				return []*hcmpb.HttpFilter{filter("r", &anypb.Any{TypeUrl: RouterTypeURL, Value: []byte{0xff}}, false)}
			},
			wantErr: `http_filters[0] ("r"): malformed envoy.extensions.filters.http.router.v3.Router`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			p, _ := newTestParser()
			got, err := p.HTTPFilters(tc.filters(t))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("HTTPFilters() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("HTTPFilters() error = %v, want nil", err)
			}
			var names []string
			for _, in := range got {
				names = append(names, in.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.wantNames, ",") {
				t.Fatalf("HTTPFilters() names = %v, want %v", names, tc.wantNames)
			}
		})
	}
}

func TestParserMemoizesIdenticalConfigs(t *testing.T) {
	p, parses := newTestParser()
	list := func() []*hcmpb.HttpFilter {
		return []*hcmpb.HttpFilter{filter("a", mustAny(t, wrapperspb.String("same")), false), router(t)}
	}
	first, err := p.HTTPFilters(list())
	if err != nil {
		t.Fatal(err)
	}
	for range 999 {
		if _, err := p.HTTPFilters(list()); err != nil {
			t.Fatal(err)
		}
	}
	if *parses != 1 {
		t.Errorf("test filter parsed %d times for 1000 identical configs, want 1", *parses)
	}
	again, _ := p.HTTPFilters(list())
	if again[0].Config != first[0].Config {
		t.Errorf("identical configs gave different Config values: %v vs %v", again[0].Config, first[0].Config)
	}
	other, _ := p.HTTPFilters([]*hcmpb.HttpFilter{filter("a", mustAny(t, wrapperspb.String("other")), false), router(t)})
	if other[0].Config != "other" {
		t.Errorf("different config parsed to %v, want %q", other[0].Config, "other")
	}
}

// envTestFilter is testFilter as an EnvFilter: its config holds only
// under the env "trusted".
type envTestFilter struct{ testFilter }

func (f envTestFilter) ParseConfigEnv(env any, raw RawConfig) (Config, error) {
	if env != "trusted" {
		*f.parses++
		return nil, errors.New("not trusted")
	}
	return f.ParseConfig(raw)
}

// TestParserEnvKey: configs an EnvFilter parsed under one key are not
// reused from the memo under another (WithEnv starts a new memo), and
// DependOnEnv tells the filters whose configs depend on the env.
func TestParserEnvKey(t *testing.T) {
	n := 0
	p := NewParser(NewRegistry(Router{}, envTestFilter{testFilter{parses: &n}})).WithEnv("trusted", "trusted")
	list := []*hcmpb.HttpFilter{filter("a", mustAny(t, wrapperspb.String("x")), false), router(t)}
	got, err := p.HTTPFilters(list)
	if err != nil || !DependOnEnv(got) || DependOnEnv(got[1:]) {
		t.Fatalf("HTTPFilters under trusted: %v; DependOnEnv(all) = %v, of the router alone = %v; want success, true, false", err, DependOnEnv(got), DependOnEnv(got[1:]))
	}
	if _, err := p.WithEnv("trusted", "trusted").HTTPFilters(list); err != nil || n != 1 {
		t.Errorf("the same key again: %v after %d parses, want the memo's config (1 parse)", err, n)
	}
	if _, err := p.WithEnv("untrusted", "untrusted").HTTPFilters(list); err == nil || n != 2 {
		t.Errorf("another key: %v after %d parses, want the config parsed again and refused", err, n)
	}
}

func TestOverrides(t *testing.T) {
	fault := mustAny(t, &faultpb.HTTPFault{})
	unknown := mustAny(t, &luapb.LuaPerRoute{})
	wrap := func(a *anypb.Any, optional bool) *anypb.Any {
		return mustAny(t, &routepb.FilterConfig{Config: a, IsOptional: optional})
	}
	tests := []struct {
		desc    string
		in      map[string]*anypb.Any
		want    map[string]Config
		wantErr string
	}{
		{desc: "empty", in: nil, want: nil},
		{
			desc: "override of a known filter",
			in:   map[string]*anypb.Any{"a": mustAny(t, wrapperspb.UInt32(7))},
			want: map[string]Config{"a": uint32(7)},
		},
		{
			desc: "inside FilterConfig",
			in:   map[string]*anypb.Any{"a": wrap(mustAny(t, wrapperspb.UInt32(8)), false)},
			want: map[string]Config{"a": uint32(8)},
		},
		{
			desc: "unknown optional override is skipped",
			in:   map[string]*anypb.Any{"x": wrap(unknown, true)},
			want: nil,
		},
		{
			desc:    "unknown required override",
			in:      map[string]*anypb.Any{"x": unknown},
			wantErr: `typed_per_filter_config["x"]: unsupported filter override config type`,
		},
		{
			desc:    "unknown override in FilterConfig without is_optional",
			in:      map[string]*anypb.Any{"x": wrap(unknown, false)},
			wantErr: `typed_per_filter_config["x"]: unsupported filter override config type`,
		},
		{
			// gRFC A39: a RouteConfiguration may be shared with gRPC
			// clients, whose fault injection filter (A33) a server lacks.
			desc: "override of a client-only filter is ignored",
			in:   map[string]*anypb.Any{"fault": fault, "fault2": wrap(fault, false)},
			want: nil,
		},
		{
			desc:    "top-level type given as override to a filter that takes another type",
			in:      map[string]*anypb.Any{"r": mustAny(t, &routerpb.Router{})},
			wantErr: `typed_per_filter_config["r"]: the router filter does not take per-route overrides`,
		},
		{
			desc: "FilterConfig disabled, with or without a config",
			in: map[string]*anypb.Any{
				"a": mustAny(t, &routepb.FilterConfig{Config: mustAny(t, wrapperspb.UInt32(1)), Disabled: true}),
				"b": mustAny(t, &routepb.FilterConfig{Disabled: true}),
				"c": mustAny(t, &routepb.FilterConfig{Config: unknown, Disabled: true}),
			},
			want: map[string]Config{"a": Disabled, "b": Disabled, "c": Disabled},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			p, _ := newTestParser()
			got, err := p.Overrides(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Overrides() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Overrides() error = %v, want nil", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Overrides() = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("Overrides()[%q] = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

func TestOverrideInTypedStructMustFitType(t *testing.T) {
	// google.protobuf.UInt32Value's JSON form is a bare number, so no Struct
	// can hold it: the override must be rejected with a clear reason.
	p, _ := newTestParser()
	in := map[string]*anypb.Any{"a": mustAny(t, &udpatypepb.TypedStruct{
		TypeUrl: testOverrideURL,
		Value:   &structpb.Struct{Fields: map[string]*structpb.Value{"value": structpb.NewNumberValue(9)}},
	})}
	if _, err := p.Overrides(in); err == nil || !strings.Contains(err.Error(), "TypedStruct value is not a valid google.protobuf.UInt32Value") {
		t.Fatalf("Overrides() error = %v, want a TypedStruct decoding error", err)
	}
}

// TestInstanceActive: whether a filter instance runs on a route, given the
// entry's disabled field and the route's override (Envoy's semantics of
// HttpFilter.disabled and FilterConfig.disabled).
func TestInstanceActive(t *testing.T) {
	filt := Instance{Name: "a", Filter: testFilter{}}
	off := Instance{Name: "a", Filter: testFilter{}, DisabledByDefault: true}
	term := Instance{Name: "r", Filter: Router{}, DisabledByDefault: true}
	tests := []struct {
		desc     string
		in       Instance
		override Config
		want     bool
	}{
		{desc: "enabled, no override", in: filt, want: true},
		{desc: "enabled, override", in: filt, override: uint32(1), want: true},
		{desc: "enabled, disabled here", in: filt, override: Disabled, want: false},
		{desc: "disabled by default, no override", in: off, want: false},
		{desc: "disabled by default, enabled by an override", in: off, override: uint32(1), want: true},
		{desc: "disabled by default, disabled here", in: off, override: Disabled, want: false},
		{desc: "the router cannot be disabled", in: term, override: Disabled, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.in.Active(tc.override); got != tc.want {
				t.Errorf("Active(%v) = %v, want %v", tc.override, got, tc.want)
			}
		})
	}
}

// envOverrideTestFilter is testFilter whose overrides are parsed with the
// parser's env (EnvOverrideFilter): an override holds only under the env
// "trusted", and records the env it was given.
type envOverrideTestFilter struct {
	testFilter
	envs *[]any
}

func (f envOverrideTestFilter) ParseOverrideEnv(env any, raw RawConfig) (Config, error) {
	*f.envs = append(*f.envs, env)
	if env != "trusted" {
		*f.parses++
		return nil, errors.New("not trusted")
	}
	return f.ParseOverride(raw)
}

// TestParserEnvOverride: an EnvOverrideFilter's overrides are parsed with
// the env WithEnv gave (ParseOverrideEnv, not ParseOverride), memoized
// under its key only, and the parser reports that it used its env
// (UsedEnv); its top-level configs are parsed as any filter's, and its
// instances depend on the env (DependOnEnv).
func TestParserEnvOverride(t *testing.T) {
	n := 0
	var envs []any
	f := envOverrideTestFilter{testFilter: testFilter{parses: &n}, envs: &envs}
	p := NewParser(NewRegistry(Router{}, f))
	got, err := p.HTTPFilters([]*hcmpb.HttpFilter{filter("a", mustAny(t, wrapperspb.String("x")), false), router(t)})
	if err != nil {
		t.Fatal(err)
	}
	if p.UsedEnv() {
		t.Errorf("UsedEnv after parsing a top-level config of a filter that is no EnvFilter = true, want false")
	}
	if !DependOnEnv(got) || DependOnEnv(got[1:]) {
		t.Errorf("DependOnEnv(all) = %v, of the router alone = %v; want true, false", DependOnEnv(got), DependOnEnv(got[1:]))
	}

	overrides := map[string]*anypb.Any{"a": mustAny(t, wrapperspb.UInt32(7))}
	if _, err := p.Overrides(overrides); err == nil || len(envs) != 1 || envs[0] != nil {
		t.Fatalf("Overrides without an env: %v, envs given %v; want the filter to get a nil env and refuse", err, envs)
	}
	p.WithEnv("trusted", "trusted")
	if p.UsedEnv() {
		t.Errorf("UsedEnv after WithEnv changed the key = true, want false until a filter gets the env")
	}
	out, err := p.Overrides(overrides)
	if err != nil || out["a"] != uint32(7) || len(envs) != 2 || envs[1] != "trusted" {
		t.Fatalf("Overrides under trusted: %v, %v, envs given %v; want a:7 parsed with env trusted", out, err, envs)
	}
	if !p.UsedEnv() {
		t.Errorf("UsedEnv after an EnvOverrideFilter's override = false, want true")
	}
	if _, err := p.WithEnv("trusted", "trusted").Overrides(overrides); err != nil || len(envs) != 2 {
		t.Errorf("the same key again: %v after %d calls, want the memo's override (no call)", err, len(envs))
	}
	if _, err := p.WithEnv("untrusted", "untrusted").Overrides(overrides); err == nil || len(envs) != 3 || envs[2] != "untrusted" {
		t.Errorf("another key: %v, envs given %v; want the override parsed again with env untrusted and refused", err, envs)
	}

	// A filter that is neither kind: the env is not used.
	q, _ := newTestParser()
	q.WithEnv("trusted", "trusted")
	if _, err := q.Overrides(overrides); err != nil || q.UsedEnv() {
		t.Errorf("a plain filter's override: %v, UsedEnv = %v; want success, false", err, q.UsedEnv())
	}
	// An EnvFilter's top-level config uses it.
	m := 0
	r := NewParser(NewRegistry(Router{}, envTestFilter{testFilter{parses: &m}})).WithEnv("trusted", "trusted")
	if _, err := r.HTTPFilters([]*hcmpb.HttpFilter{filter("a", mustAny(t, wrapperspb.String("x")), false), router(t)}); err != nil || !r.UsedEnv() {
		t.Errorf("an EnvFilter's config: %v, UsedEnv = %v; want success, true", err, r.UsedEnv())
	}
}
