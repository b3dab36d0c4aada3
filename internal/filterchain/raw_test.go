package filterchain_test

import (
	"errors"
	"strings"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds/internal/filterchain"
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
