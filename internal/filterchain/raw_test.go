package filterchain_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// compileRaw splits and compiles l's bytes, reusing prev's chains.
func compileRaw(t *testing.T, l *listenerpb.Listener, prev *filterchain.Table) (*filterchain.Table, error) {
	t.Helper()
	b, err := proto.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	r, err := filterchain.Split(b)
	if err != nil {
		t.Fatalf("Split: %v", err)
	}
	return filterchain.CompileRaw(r, filterchain.Options{Previous: prev, CertProviderInstances: tlsInstances})
}

// TestCompileRawReuse: a new version of a Listener reuses the compiled
// chains whose bytes did not change (the same *FilterChain, so the same
// HttpConnectionManager and Security), compiles the others, and gives the
// table Compile would.
func TestCompileRawReuse(t *testing.T) {
	a := chain("a", &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}})
	b := chain("b", &listenerpb.FilterChainMatch{SourcePorts: []uint32{2}})
	b.TransportSocket = withTLS(mtlsContext()).FilterChains[0].TransportSocket
	c := chain("c", &listenerpb.FilterChainMatch{SourcePorts: []uint32{3}})
	v1 := newListener(a, b, c)
	t1, err := compileRaw(t, v1, nil)
	if err != nil {
		t.Fatalf("CompileRaw(v1): %v", err)
	}

	// v2: b unchanged but moved, c changed, a new chain d with a's config.
	c2 := proto.Clone(c).(*listenerpb.FilterChain)
	c2.FilterChainMatch.SourcePorts = []uint32{30}
	d := proto.Clone(a).(*listenerpb.FilterChain)
	d.Name, d.FilterChainMatch.SourcePorts = "d", []uint32{4}
	v2 := newListener(b, a, c2, d)
	t2, err := compileRaw(t, v2, t1)
	if err != nil {
		t.Fatalf("CompileRaw(v2): %v", err)
	}
	want, err := filterchain.Compile(v2, filterchain.Options{CertProviderInstances: tlsInstances})
	if err != nil {
		t.Fatal(err)
	}
	if !t2.Equal(want) {
		t.Fatal("CompileRaw with a previous table differs from Compile")
	}
	old, cur := t1.Chains(), t2.Chains()
	if cur[0] != old[1] || cur[1] != old[0] {
		t.Error("unchanged chains a and b were compiled again, want them reused")
	}
	if cur[2] == old[2] || cur[2].ID == old[2].ID {
		t.Error("the changed chain c was reused")
	}
	if cur[3].HCM != cur[1].HCM {
		t.Error("new chain d does not share the HttpConnectionManager of the reused chain a, whose config it has")
	}
}

// TestCompileRawErrors: a chain reused from a previous version still counts
// in the checks of the whole Listener: a new chain duplicating its matcher
// is NACKed, naming the chains' places in the new Listener.
func TestCompileRawErrors(t *testing.T) {
	a := chain("a", &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}})
	t1, err := compileRaw(t, newListener(a), nil)
	if err != nil {
		t.Fatal(err)
	}
	dup := proto.Clone(a).(*listenerpb.FilterChain)
	dup.Name = "dup"
	_, err = compileRaw(t, newListener(chain("x", &listenerpb.FilterChainMatch{SourcePorts: []uint32{9}}), a, dup), t1)
	var ve *filterchain.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), `filter_chains[2] "dup"`) || !strings.Contains(err.Error(), `filter_chains[1] "a"`) {
		t.Fatalf("CompileRaw with a duplicate of a reused chain: %v, want a duplicate matcher error naming filter_chains[1] and [2]", err)
	}
}

// TestCompileRawIgnoredNotes: the notes of a reused chain are listed again,
// under its new place.
func TestCompileRawIgnoredNotes(t *testing.T) {
	d := mtlsContext()
	d.CommonTlsContext.AlpnProtocols = []string{"h2"}
	a := withTLS(d).FilterChains[0]
	t1, err := compileRaw(t, newListener(a), nil)
	if err != nil {
		t.Fatal(err)
	}
	t2, err := compileRaw(t, newListener(chain("x", &listenerpb.FilterChainMatch{SourcePorts: []uint32{9}}), a), t1)
	if err != nil {
		t.Fatal(err)
	}
	if got := t2.Ignored(); len(got) != 1 || !strings.HasPrefix(got[0], `filter_chains[1] "a": transport_socket.typed_config.common_tls_context.alpn_protocols`) {
		t.Errorf("Ignored() = %q, want the reused chain's note under filter_chains[1]", got)
	}
}

// trustFilter is an httpfilter.EnvFilter whose config (a StringValue)
// holds only under the env "trusted", as gRFC A102's side channels without
// an allowed_grpc_services entry do; parses counts its parses.
type trustFilter struct{ parses *int }

func (trustFilter) ConfigTypeURLs() []string {
	return []string{"type.googleapis.com/google.protobuf.StringValue"}
}
func (trustFilter) OverrideTypeURLs() []string { return nil }
func (trustFilter) IsTerminal() bool           { return false }
func (f trustFilter) ParseConfig(raw httpfilter.RawConfig) (httpfilter.Config, error) {
	return f.ParseConfigEnv(nil, raw)
}
func (trustFilter) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) {
	return nil, errors.New("no overrides")
}
func (trustFilter) BuildStep(string, httpfilter.Config, httpfilter.Config) (httpfilter.Step, error) {
	return nil, nil
}

func (f trustFilter) ParseConfigEnv(env any, raw httpfilter.RawConfig) (httpfilter.Config, error) {
	*f.parses++
	if env != "trusted" {
		return nil, fmt.Errorf("env %v is not trusted", env)
	}
	v := &wrapperspb.StringValue{}
	return v, raw.UnmarshalTo(v)
}

// TestCompileRawEnvKey: a chain whose filters depend on the parser's env
// is reused from a previous table only under the same EnvKey: the same
// bytes under another key are parsed again (and may fail), and the chain's
// ID then differs. A chain whose filters do not depend on it is reused
// under any key.
func TestCompileRawEnvKey(t *testing.T) {
	parses := 0
	reg := httpfilter.NewRegistry(httpfilter.Router{}, trustFilter{&parses})
	hcm := rdsHCM("routes")
	hcm.HttpFilters = append([]*hcmpb.HttpFilter{{Name: "trust", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(wrapperspb.String("x"))}}}, hcm.HttpFilters...)
	envChain := &listenerpb.FilterChain{Name: "env", Filters: []*listenerpb.Filter{hcmFilter(hcm)}}
	plain := chain("plain", &listenerpb.FilterChainMatch{SourcePorts: []uint32{1}})
	b, err := proto.Marshal(newListener(envChain, plain))
	if err != nil {
		t.Fatal(err)
	}
	compile := func(env string, prev *filterchain.Table) (*filterchain.Table, error) {
		t.Helper()
		r, err := filterchain.Split(b)
		if err != nil {
			t.Fatal(err)
		}
		return filterchain.CompileRaw(r, filterchain.Options{Filters: httpfilter.NewParser(reg).WithEnv(env, env), Previous: prev})
	}

	t1, err := compile("trusted", nil)
	if err != nil || parses != 1 {
		t.Fatalf("CompileRaw under trusted: %v, %d parses; want success after 1", err, parses)
	}
	t2, err := compile("trusted", t1)
	if err != nil || parses != 1 || t2.Chains()[0] != t1.Chains()[0] || t2.Chains()[1] != t1.Chains()[1] {
		t.Errorf("the same bytes under the same key: %v, %d parses; want every chain reused, no parse", err, parses)
	}
	if _, err := compile("untrusted", t1); err == nil || !strings.Contains(err.Error(), "not trusted") || parses != 2 {
		t.Errorf("the same bytes under another key: %v after %d parses; want the config parsed again and refused", err, parses)
	}

	// An env under which the config holds, with another key: parsed
	// again, another ID; the chain without the filter is reused.
	parses = 0
	r, err := filterchain.Split(b)
	if err != nil {
		t.Fatal(err)
	}
	t3, err := filterchain.CompileRaw(r, filterchain.Options{Filters: httpfilter.NewParser(reg).WithEnv("trusted", "other"), Previous: t1})
	if err != nil || parses != 1 {
		t.Fatalf("under another key whose env accepts the config: %v, %d parses; want success after 1", err, parses)
	}
	c1, c3 := t1.Chains(), t3.Chains()
	if c3[0] == c1[0] || c3[0].ID == c1[0].ID || t3.Equal(t1) {
		t.Error("the chain depending on the env kept its compiled form or ID under another key")
	}
	if c3[1] != c1[1] {
		t.Error("the chain without env-dependent filters was compiled again under another key; want it reused")
	}
}
