package ratelimitdesc_test

import (
	"net/netip"
	"strings"
	"testing"

	xdscorepb "github.com/cncf/xds/go/xds/core/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	metadatapb "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/httpfilter"
	rld "github.com/proxyless-grpc/xds/internal/ratelimitdesc"
)

func rl(actions ...*routepb.RateLimit_Action) *routepb.RateLimit {
	return &routepb.RateLimit{Actions: actions}
}

func header(name, key string, skip bool) *routepb.RateLimit_Action {
	return &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_RequestHeaders_{RequestHeaders: &routepb.RateLimit_Action_RequestHeaders{HeaderName: name, DescriptorKey: key, SkipIfAbsent: skip}}}
}

func generic(key, value string) *routepb.RateLimit_Action {
	return &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_GenericKey_{GenericKey: &routepb.RateLimit_Action_GenericKey{DescriptorKey: key, DescriptorValue: value}}}
}

var (
	remote = &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_RemoteAddress_{RemoteAddress: &routepb.RateLimit_Action_RemoteAddress{}}}
	masked = &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_MaskedRemoteAddress_{MaskedRemoteAddress: &routepb.RateLimit_Action_MaskedRemoteAddress{V4PrefixMaskLen: wrapperspb.UInt32(24)}}}
	dest   = &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_DestinationCluster_{DestinationCluster: &routepb.RateLimit_Action_DestinationCluster{}}}
	source = &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_SourceCluster_{SourceCluster: &routepb.RateLimit_Action_SourceCluster{}}}
	query  = &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_QueryParameters_{QueryParameters: &routepb.RateLimit_Action_QueryParameters{QueryParameterName: "q", DescriptorKey: "q"}}}
	queryS = &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_QueryParameters_{QueryParameters: &routepb.RateLimit_Action_QueryParameters{QueryParameterName: "q", DescriptorKey: "q", SkipIfAbsent: true}}}
)

func hvm(expect *wrapperspb.BoolValue, hm ...*routepb.HeaderMatcher) *routepb.RateLimit_Action {
	return &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_HeaderValueMatch_{HeaderValueMatch: &routepb.RateLimit_Action_HeaderValueMatch{DescriptorValue: "gold", ExpectMatch: expect, Headers: hm}}}
}

func qvm(expect *wrapperspb.BoolValue) *routepb.RateLimit_Action {
	return &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_QueryParameterValueMatch_{QueryParameterValueMatch: &routepb.RateLimit_Action_QueryParameterValueMatch{DescriptorValue: "qv", ExpectMatch: expect, QueryParameters: []*routepb.QueryParameterMatcher{{Name: "x"}}}}}
}

func meta(src routepb.RateLimit_Action_MetaData_Source, def string, skip bool) *routepb.RateLimit_Action {
	return &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_Metadata{Metadata: &routepb.RateLimit_Action_MetaData{
		DescriptorKey: "plan", DefaultValue: def, Source: src, SkipIfAbsent: skip,
		MetadataKey: &metadatapb.MetadataKey{Key: "acme", Path: []*metadatapb.MetadataKey_PathSegment{{Segment: &metadatapb.MetadataKey_PathSegment_Key{Key: "tier"}}, {Segment: &metadatapb.MetadataKey_PathSegment_Key{Key: "name"}}}},
	}}}
}

func exact(name, v string) *routepb.HeaderMatcher {
	return &routepb.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: v}}}}
}

type entries [][]rld.Entry

func TestDescriptors(t *testing.T) {
	routeMD := &corepb.Metadata{FilterMetadata: map[string]*structpb.Struct{"acme": {Fields: map[string]*structpb.Value{
		"tier": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"name": structpb.NewStringValue("gold")}}),
	}}}}
	req := &httpfilter.Request{
		FullMethod: "/pkg.Svc/Do", Authority: "svc.example",
		Header: metadata.Pairs("x-tenant", "acme", "x-tenant", "second", "tok-bin", "\x01\x02", "two-bin", "\x00\x01", "two-bin", "\x01\x02"),
		Remote: netip.MustParseAddrPort("10.1.2.3:4567"),
	}
	tests := []struct {
		name string
		rls  []*routepb.RateLimit
		md   *corepb.Metadata
		want entries
	}{
		{"request header, first value", []*routepb.RateLimit{rl(header("X-Tenant", "tenant", false))}, nil, entries{{{"tenant", "acme"}}}},
		{"pseudo-headers", []*routepb.RateLimit{rl(header(":path", "p", false), header(":authority", "a", false), header(":method", "m", false))}, nil, entries{{{"p", "/pkg.Svc/Do"}, {"a", "svc.example"}, {"m", "POST"}}}},
		{"binary header in base64 as on the wire, unpadded", []*routepb.RateLimit{rl(header("tok-bin", "t", false))}, nil, entries{{{"t", "AQI"}}}},
		{"absent header skips the descriptor, not the others", []*routepb.RateLimit{rl(header("x-none", "n", false)), rl(generic("", "all"))}, nil, entries{{{"generic_key", "all"}}}},
		{"absent header with skip_if_absent drops only the entry", []*routepb.RateLimit{rl(header("x-none", "n", true), generic("k", "v"))}, nil, entries{{{"k", "v"}}}},
		{"remote and masked address", []*routepb.RateLimit{rl(remote), rl(masked)}, nil, entries{{{"remote_address", "10.1.2.3"}}, {{"masked_remote_address", "10.1.2.0/24"}}}},
		{"destination cluster and an unknown source cluster: nothing to read", []*routepb.RateLimit{rl(dest), rl(source, generic("", "x"))}, nil, nil},
		{"query parameters: absent", []*routepb.RateLimit{rl(query, generic("", "a")), rl(queryS, generic("", "b"))}, nil, entries{{{"generic_key", "b"}}}},
		{"query_parameter_value_match: never matches", []*routepb.RateLimit{rl(qvm(nil)), rl(qvm(wrapperspb.Bool(false)))}, nil, entries{{{"query_match", "qv"}}}},
		{"header_value_match", []*routepb.RateLimit{rl(hvm(nil, exact("x-tenant", "acme,second"))), rl(hvm(nil, exact("x-tenant", "other"))), rl(hvm(wrapperspb.Bool(false), exact("x-tenant", "other")))}, nil, entries{{{"header_match", "gold"}}, {{"header_match", "gold"}}}},
		// A binary header sent twice: every value, in its wire form, joined
		// (Envoy's matching); its first value alone does not match, so a
		// client cannot pick what is matched by repeating the header.
		{"header_value_match, binary header sent twice", []*routepb.RateLimit{rl(hvm(nil, exact("two-bin", "AAE,AQI"))), rl(hvm(wrapperspb.Bool(false), exact("two-bin", "AAE")))}, nil, entries{{{"header_match", "gold"}}, {{"header_match", "gold"}}}},
		{"route metadata", []*routepb.RateLimit{rl(meta(routepb.RateLimit_Action_MetaData_ROUTE_ENTRY, "", false))}, routeMD, entries{{{"plan", "gold"}}}},
		{"route metadata absent: default, skip, or none", []*routepb.RateLimit{rl(meta(routepb.RateLimit_Action_MetaData_ROUTE_ENTRY, "free", false)), rl(meta(routepb.RateLimit_Action_MetaData_ROUTE_ENTRY, "", true), generic("", "s")), rl(meta(routepb.RateLimit_Action_MetaData_ROUTE_ENTRY, "", false), generic("", "n"))}, nil, entries{{{"plan", "free"}}, {{"generic_key", "s"}}}},
		{"dynamic metadata is always absent", []*routepb.RateLimit{rl(meta(routepb.RateLimit_Action_MetaData_DYNAMIC, "", false))}, routeMD, nil},
		{"no entry, no descriptor", []*routepb.RateLimit{rl(header("x-none", "n", true))}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := rld.Compile(tc.rls)
			if err != nil {
				t.Fatal(err)
			}
			var got entries
			for _, d := range p.Descriptors(nil, 0, true, rld.Request{Request: *req, RouteMetadata: tc.md}) {
				got = append(got, d.Entries)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("descriptors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSourceCluster(t *testing.T) {
	p, err := rld.Compile([]*routepb.RateLimit{rl(source, generic("", "x"))})
	if err != nil {
		t.Fatal(err)
	}
	got := p.Descriptors(nil, 0, true, rld.Request{Request: httpfilter.Request{}, LocalCluster: "checkout"})
	if len(got) != 1 || !cmp.Equal(got[0].Entries, []rld.Entry{{Key: "source_cluster", Value: "checkout"}, {Key: "generic_key", Value: "x"}}) {
		t.Errorf("source_cluster with the node's cluster: %v", got)
	}
}

func TestStages(t *testing.T) {
	one := rl(generic("", "one"))
	one.Stage = wrapperspb.UInt32(1)
	p, err := rld.Compile([]*routepb.RateLimit{rl(generic("", "zero")), one})
	if err != nil {
		t.Fatal(err)
	}
	req := rld.Request{Request: httpfilter.Request{}}
	if got := p.Descriptors(nil, 1, false, req); len(got) != 1 || got[0].Entries[0].Value != "one" {
		t.Errorf("stage 1: %v, want the stage 1 descriptor only", got)
	}
	if !p.HasStage(0) || !p.HasStage(1) || p.HasStage(2) {
		t.Error("HasStage wrong")
	}
	if got := p.Descriptors(nil, 2, true, req); len(got) != 2 {
		t.Errorf("any stage: %v, want both", got)
	}
}

func TestRemoteAddressMatch(t *testing.T) {
	a := &routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_RemoteAddressMatch_{RemoteAddressMatch: &routepb.RateLimit_Action_RemoteAddressMatch{
		DescriptorValue: "internal", AddressMatcher: &matcherpb.AddressMatcher{Ranges: []*xdscorepb.CidrRange{{AddressPrefix: "10.0.0.0", PrefixLen: wrapperspb.UInt32(8)}}},
	}}}
	p, err := rld.Compile([]*routepb.RateLimit{rl(a)})
	if err != nil {
		t.Fatal(err)
	}
	in := p.Descriptors(nil, 0, true, rld.Request{Request: httpfilter.Request{Remote: netip.MustParseAddrPort("10.9.9.9:1")}})
	out := p.Descriptors(nil, 0, true, rld.Request{Request: httpfilter.Request{Remote: netip.MustParseAddrPort("192.0.2.1:1")}})
	if len(in) != 1 || in[0].Entries[0] != (rld.Entry{Key: "remote_address_match", Value: "internal"}) || len(out) != 0 {
		t.Errorf("in range: %v; out of range: %v", in, out)
	}
}

func TestCompileErrors(t *testing.T) {
	stage11 := rl(generic("", "x"))
	stage11.Stage = wrapperspb.UInt32(11)
	onDone := rl(generic("", "x"))
	onDone.ApplyOnStreamDone = true
	tests := []struct {
		rl   *routepb.RateLimit
		want string
	}{
		{rl(), "[0].actions: empty"},
		{stage11, "[0].stage: 11"},
		{onDone, "[0].apply_on_stream_done: not supported"},
		{rl(generic("", "")), "[0].actions[0].generic_key.descriptor_value: empty"},
		{rl(header("", "k", false)), "[0].actions[0].request_headers.header_name: empty"},
		{rl(header("h", "", false)), "[0].actions[0].request_headers.descriptor_key: empty"},
		{rl(hvm(nil)), "[0].actions[0].header_value_match.headers: empty"},
		{rl(&routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_Extension{Extension: &corepb.TypedExtensionConfig{Name: "x"}}}), "[0].actions[0].extension"},
		{rl(&routepb.RateLimit_Action{}), "[0].actions[0].action_specifier: unset"},
		{rl(&routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_MaskedRemoteAddress_{MaskedRemoteAddress: &routepb.RateLimit_Action_MaskedRemoteAddress{V4PrefixMaskLen: wrapperspb.UInt32(33)}}}), "masked_remote_address.v4_prefix_mask_len: 33"},
	}
	for _, tc := range tests {
		_, err := rld.Compile([]*routepb.RateLimit{tc.rl})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%v) = %v, want an error with %q", tc.rl, err, tc.want)
		}
	}
}

// TestCompileVirtualHost: what Envoy accepts and this package cannot
// evaluate is no error for a virtual host (Envoy would not NACK it), but is
// kept for the filter; Compile refuses it; an invalid config is an error
// for both.
func TestCompileVirtualHost(t *testing.T) {
	ext := rl(&routepb.RateLimit_Action{ActionSpecifier: &routepb.RateLimit_Action_Extension{Extension: &corepb.TypedExtensionConfig{Name: "envoy.rate_limit_descriptors.expr"}}})
	p, err := rld.CompileVirtualHost([]*routepb.RateLimit{rl(generic("", "ok")), ext})
	if err != nil || p.Unsupported() == nil || !strings.Contains(p.Unsupported().Error(), "[1].actions[0].extension") {
		t.Errorf("CompileVirtualHost with an extension: %v, unsupported %v; want no error, the extension kept as unsupported", err, p.Unsupported())
	}
	if _, err := rld.Compile([]*routepb.RateLimit{ext}); err == nil {
		t.Error("Compile accepted an extension action")
	}
	if _, err := rld.CompileVirtualHost([]*routepb.RateLimit{rl()}); err == nil {
		t.Error("CompileVirtualHost accepted a rate limit without actions")
	}
}
