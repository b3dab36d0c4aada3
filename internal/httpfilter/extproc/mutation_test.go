package extproc

import (
	"reflect"
	"strings"
	"testing"

	mutationpb "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvcpb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	appendOrAdd    = corepb.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
	addIfAbsent    = corepb.HeaderValueOption_ADD_IF_ABSENT
	overwriteOrAdd = corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
	overwriteIf    = corepb.HeaderValueOption_OVERWRITE_IF_EXISTS
)

func setRaw(key, value string, action corepb.HeaderValueOption_HeaderAppendAction) *corepb.HeaderValueOption {
	return &corepb.HeaderValueOption{Header: &corepb.HeaderValue{Key: key, RawValue: []byte(value)}, AppendAction: action}
}

func setValue(key, value string, action corepb.HeaderValueOption_HeaderAppendAction) *corepb.HeaderValueOption {
	return &corepb.HeaderValueOption{Header: &corepb.HeaderValue{Key: key, Value: value}, AppendAction: action}
}

func keepEmpty(h *corepb.HeaderValueOption) *corepb.HeaderValueOption {
	h.KeepEmptyValue = true
	return h
}

func mustRules(t *testing.T, r *mutationpb.HeaderMutationRules) *MutationRules {
	t.Helper()
	out, err := parseRules(r)
	if err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestApplyMutation: set_headers and remove_headers as gRFC A93's "Header
// rewriting" says, with the filter's decisions: value accepted when
// raw_value is empty, gRPC's own headers ignored, binary values decoded.
func TestApplyMutation(t *testing.T) {
	base := func() metadata.MD {
		return metadata.MD{"x-a": {"1"}, "x-b": {"2", "3"}, "x-blob-bin": {"\x00\x01"}, "content-type": {"application/grpc"}, ":authority": {"h"}}
	}
	long := strings.Repeat("v", maxHeaderBytes)
	for _, tc := range []struct {
		desc        string
		m           *extprocsvcpb.HeaderMutation
		rules       *mutationpb.HeaderMutationRules
		want        metadata.MD // nil: base()
		wantChanged bool
		wantErr     string
	}{
		{desc: "empty", m: &extprocsvcpb.HeaderMutation{}},
		{desc: "nil", m: nil},
		{
			desc:        "APPEND_IF_EXISTS_OR_ADD (the default)",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "n", appendOrAdd), setRaw("x-new", "n", appendOrAdd)}},
			want:        metadata.MD{"x-a": {"1", "n"}, "x-new": {"n"}},
			wantChanged: true,
		},
		{
			desc:        "ADD_IF_ABSENT",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "n", addIfAbsent), setRaw("x-new", "n", addIfAbsent)}},
			want:        metadata.MD{"x-new": {"n"}},
			wantChanged: true,
		},
		{
			desc: "ADD_IF_ABSENT of a present header only: no change",
			m:    &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "n", addIfAbsent)}},
		},
		{
			desc:        "OVERWRITE_IF_EXISTS_OR_ADD",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-b", "n", overwriteOrAdd), setRaw("x-new", "n", overwriteOrAdd)}},
			want:        metadata.MD{"x-b": {"n"}, "x-new": {"n"}},
			wantChanged: true,
		},
		{
			desc:        "OVERWRITE_IF_EXISTS",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-b", "n", overwriteIf), setRaw("x-new", "n", overwriteIf)}},
			want:        metadata.MD{"x-b": {"n"}},
			wantChanged: true,
		},
		{
			desc:    "unknown append_action",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "n", 9)}},
			wantErr: "set_headers[0].append_action: unknown value 9",
		},
		{
			desc: "the deprecated append is ignored (gRFC A93)",
			m: &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{
				{Header: &corepb.HeaderValue{Key: "x-a", RawValue: []byte("n")}, Append: wrapperspb.Bool(false), AppendAction: appendOrAdd},
			}},
			want:        metadata.MD{"x-a": {"1", "n"}},
			wantChanged: true,
		},
		{
			desc:        "value used when raw_value is empty",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setValue("x-a", "v", overwriteOrAdd)}},
			want:        metadata.MD{"x-a": {"v"}},
			wantChanged: true,
		},
		{
			desc: "raw_value wins over value",
			m: &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{
				{Header: &corepb.HeaderValue{Key: "x-a", Value: "v", RawValue: []byte("r")}, AppendAction: overwriteOrAdd},
			}},
			want:        metadata.MD{"x-a": {"r"}},
			wantChanged: true,
		},
		{
			desc:        "empty value removes the header",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-b", "", overwriteOrAdd), setRaw("x-a", "", appendOrAdd)}},
			want:        metadata.MD{"x-a": nil, "x-b": nil},
			wantChanged: true,
		},
		{
			desc: "empty value of an absent header, or one the action does not write: no change",
			m: &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{
				setRaw("x-new", "", overwriteOrAdd), setRaw("x-a", "", addIfAbsent), setRaw("x-new", "", overwriteIf),
			}},
		},
		{
			desc: "empty value kept with keep_empty_value",
			m: &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{
				keepEmpty(setRaw("x-a", "", overwriteOrAdd)), keepEmpty(setRaw("x-new", "", appendOrAdd)),
			}},
			want:        metadata.MD{"x-a": {""}, "x-new": {""}},
			wantChanged: true,
		},
		{
			desc:        "binary value decoded, padded or not",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-blob-bin", "AAE=", overwriteOrAdd), setValue("x-new-bin", "AAEC", overwriteOrAdd)}},
			want:        metadata.MD{"x-blob-bin": {"\x00\x01"}, "x-new-bin": {"\x00\x01\x02"}},
			wantChanged: true,
		},
		{
			desc:    "binary value not base64",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-blob-bin", "!!", overwriteOrAdd)}},
			wantErr: `set_headers[0].header.raw_value: binary header "x-blob-bin": not base64`,
		},
		{
			desc: "reserved headers ignored: host, pseudo-headers, te, content-type, grpc-*",
			m: &extprocsvcpb.HeaderMutation{
				SetHeaders: []*corepb.HeaderValueOption{
					setRaw("host", "h", overwriteOrAdd), setRaw(":authority", "evil", overwriteOrAdd), setRaw(":path", "/x", overwriteOrAdd),
					setRaw("te", "x", overwriteOrAdd), setRaw("content-type", "text/plain", overwriteOrAdd),
					setRaw("grpc-status", "0", overwriteOrAdd), setRaw("grpc-timeout", "1S", overwriteOrAdd),
					// Ignored before the value is looked at.
					setRaw(":method", "\n", overwriteOrAdd),
				},
				RemoveHeaders: []string{"host", ":authority", "te", "content-type", "grpc-encoding", "Content-Type"},
			},
		},
		{
			desc:    "missing header",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "n", overwriteOrAdd), {}}},
			wantErr: "set_headers[1].header: missing",
		},
		{
			desc:    "empty key",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("", "n", overwriteOrAdd)}},
			wantErr: "set_headers[0].header.key: empty",
		},
		{
			desc:    "upper-case key",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("X-A", "n", overwriteOrAdd)}},
			wantErr: "set_headers[0].header.key: ",
		},
		{
			desc:    "key with a character gRPC does not allow",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x a", "n", overwriteOrAdd)}},
			wantErr: "set_headers[0].header.key: ",
		},
		{
			desc:        "key of 16384 bytes: allowed",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw(long, "n", overwriteOrAdd)}},
			want:        metadata.MD{long: {"n"}},
			wantChanged: true,
		},
		{
			desc:    "key over 16384 bytes",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw(long+"v", "n", overwriteOrAdd)}},
			wantErr: "set_headers[0].header.key: of 16385 bytes, want at most 16384",
		},
		{
			desc:        "raw_value of 16384 bytes: allowed",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", long, overwriteOrAdd)}},
			want:        metadata.MD{"x-a": {long}},
			wantChanged: true,
		},
		{
			desc:    "raw_value over 16384 bytes",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", long+"v", overwriteOrAdd)}},
			wantErr: "set_headers[0].header.raw_value: of 16385 bytes, want at most 16384",
		},
		{
			desc:    "value over 16384 bytes",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setValue("x-a", long+"v", overwriteOrAdd)}},
			wantErr: "set_headers[0].header.value: of 16385 bytes",
		},
		{
			desc:    "value not printable",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "a\nb", overwriteOrAdd)}},
			wantErr: `set_headers[0].header.raw_value: header "x-a": value has byte 0xa at 1`,
		},
		{
			desc:    "an invalid entry leaves the headers unchanged",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "n", overwriteOrAdd), setRaw("x-c", "\x00", overwriteOrAdd)}, RemoveHeaders: []string{"x-b"}},
			wantErr: "set_headers[1].header.raw_value",
		},
		{
			desc:        "remove_headers, lower-cased; names that cannot be headers ignored",
			m:           &extprocsvcpb.HeaderMutation{RemoveHeaders: []string{"x-a", "X-B", "x-absent", "", "x a", long + "v"}},
			want:        metadata.MD{"x-a": nil, "x-b": nil},
			wantChanged: true,
		},
		{
			desc:        "remove_headers apply before set_headers (Envoy's order)",
			m:           &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "n", appendOrAdd)}, RemoveHeaders: []string{"x-a"}},
			want:        metadata.MD{"x-a": {"n"}},
			wantChanged: true,
		},
		{
			desc: "rules: disallowed mutations ignored",
			m: &extprocsvcpb.HeaderMutation{
				SetHeaders:    []*corepb.HeaderValueOption{setRaw("x-user-id", "u", overwriteOrAdd), setRaw("x-a", "n", overwriteOrAdd), setRaw("x-user-admin", "y", overwriteOrAdd)},
				RemoveHeaders: []string{"x-b", "x-user-gone"},
			},
			rules:       &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true), AllowExpression: regex("x-user-.*"), DisallowExpression: regex("x-user-admin")},
			want:        metadata.MD{"x-user-id": {"u"}},
			wantChanged: true,
		},
		{
			desc:    "rules: disallow_is_error on set_headers",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "n", overwriteOrAdd), setRaw("x-secret", "n", overwriteOrAdd)}},
			rules:   &mutationpb.HeaderMutationRules{DisallowExpression: regex("x-secret"), DisallowIsError: wrapperspb.Bool(true)},
			wantErr: `set_headers[1]: mutation_rules disallow changing "x-secret" (disallow_is_error)`,
		},
		{
			desc:    "rules: disallow_is_error on remove_headers",
			m:       &extprocsvcpb.HeaderMutation{RemoveHeaders: []string{"x-a"}},
			rules:   &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true), DisallowIsError: wrapperspb.Bool(true)},
			wantErr: `remove_headers[0]: mutation_rules disallow changing "x-a" (disallow_is_error)`,
		},
		{
			desc:  "rules: reserved headers are ignored before the rules judge them",
			m:     &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("grpc-status", "0", overwriteOrAdd)}, RemoveHeaders: []string{"host"}},
			rules: &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true), DisallowIsError: wrapperspb.Bool(true)},
		},
		{
			desc:    "rules: an invalid entry is an error even where the rules would ignore it",
			m:       &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "\x01", overwriteOrAdd)}},
			rules:   &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true)},
			wantErr: "set_headers[0].header.raw_value",
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			md := base()
			var rules *MutationRules
			if tc.rules != nil {
				rules = mustRules(t, tc.rules)
			}
			changed, err := ApplyMutation(md, tc.m, rules)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ApplyMutation: %v, want an error containing %q", err, tc.wantErr)
				}
				if changed || !reflect.DeepEqual(md, base()) {
					t.Errorf("after an error: changed %v, headers %v; want nothing changed", changed, md)
				}
				return
			}
			if err != nil {
				t.Fatalf("ApplyMutation: %v", err)
			}
			want := base()
			for k, v := range tc.want {
				if v == nil {
					delete(want, k)
				} else {
					want[k] = v
				}
			}
			if changed != tc.wantChanged || !reflect.DeepEqual(md, want) {
				t.Errorf("ApplyMutation: changed %v, headers %v; want %v, %v", changed, md, tc.wantChanged, want)
			}
		})
	}
}

// TestApplyMutationNilMetadata: a mutation that sets nothing needs no
// headers; one that sets a header fails without them instead of
// panicking.
func TestApplyMutationNilMetadata(t *testing.T) {
	if changed, err := ApplyMutation(nil, &extprocsvcpb.HeaderMutation{RemoveHeaders: []string{"x-a"}}, nil); changed || err != nil {
		t.Errorf("removal from nil headers: %v, %v; want false, nil", changed, err)
	}
	if _, err := ApplyMutation(nil, &extprocsvcpb.HeaderMutation{SetHeaders: []*corepb.HeaderValueOption{setRaw("x-a", "1", appendOrAdd)}}, nil); err == nil {
		t.Errorf("a set on nil headers: no error, want one")
	}
}

// TestMutationRulesOrder: Envoy's order, rule by rule.
func TestMutationRulesOrder(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		rules *mutationpb.HeaderMutationRules
		key   string
		want  bool
	}{
		{desc: "none", rules: nil, key: "x", want: true},
		{desc: "disallow_all", rules: &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true)}, key: "x", want: false},
		{desc: "allow_expression beats disallow_all", rules: &mutationpb.HeaderMutationRules{DisallowAll: wrapperspb.Bool(true), AllowExpression: regex("x")}, key: "x", want: true},
		{desc: "disallow_expression beats allow_expression", rules: &mutationpb.HeaderMutationRules{AllowExpression: regex("x.*"), DisallowExpression: regex("xy")}, key: "xy", want: false},
		{desc: "disallow_expression alone", rules: &mutationpb.HeaderMutationRules{DisallowExpression: regex("x")}, key: "y", want: true},
		{desc: "expressions match the whole name", rules: &mutationpb.HeaderMutationRules{DisallowExpression: regex("x")}, key: "xx", want: true},
		{desc: "ignored fields", rules: &mutationpb.HeaderMutationRules{AllowAllRouting: wrapperspb.Bool(false), DisallowSystem: wrapperspb.Bool(true), AllowEnvoy: wrapperspb.Bool(false)}, key: "x-envoy-a", want: true},
	} {
		r := mustRules(t, tc.rules)
		if got := r.Allows(tc.key); got != tc.want {
			t.Errorf("%s: Allows(%q) = %v, want %v", tc.desc, tc.key, got, tc.want)
		}
	}
}
