package filterchain

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"strings"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// listenerFilterChainsField is Listener.filter_chains' field number.
const listenerFilterChainsField = 3

// RawListener is a serialized Listener split by Split: every field decoded
// but filter_chains, whose entries are kept serialized so that CompileRaw
// can reuse what an earlier version of the Listener compiled them to.
type RawListener struct {
	// Listener holds every field of the Listener except filter_chains.
	Listener *listenerpb.Listener
	// FilterChains are the serialized filter_chains entries, in order; they
	// share the memory of the bytes given to Split.
	FilterChains [][]byte
}

// Split decodes a serialized Listener, leaving its filter chains
// serialized. It fails only when b is not a valid Listener encoding.
func Split(b []byte) (*RawListener, error) {
	r := &RawListener{Listener: &listenerpb.Listener{}}
	var rest []byte
	for in := b; len(in) > 0; {
		num, typ, n := protowire.ConsumeTag(in)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, in[n:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		if num == listenerFilterChainsField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(in[n : n+m])
			r.FilterChains = append(r.FilterChains, v)
		} else {
			rest = append(rest, in[:n+m]...)
		}
		in = in[n+m:]
	}
	if err := proto.Unmarshal(rest, r.Listener); err != nil {
		return nil, err
	}
	return r, nil
}

// chainSeed seeds the hash that finds a serialized filter chain among the
// compiled ones of a previous table; a hit is confirmed by comparing bytes.
var chainSeed = maphash.MakeSeed()

// compiledChain is what CompileRaw keeps of a filter chain, so that the next
// version of the Listener reuses it when the chain's bytes are the same: the
// bytes, the compiled chain and its normalized matchers, the configs it took
// from the compiler's memo, and the notes about the fields it ignored
// (without its place in the Listener). Immutable.
type compiledChain struct {
	raw     []byte // in the Listener this table was compiled from
	spec    chainSpec
	configs chainConfigs
	ignored []string
}

// CompileRaw is Compile for a Listener split by Split, with the same result.
// When opts.Previous is the table of an earlier version of the Listener, a
// filter chain whose bytes are the same as one of it is neither decoded nor
// validated again: its compiled form (ID, HttpConnectionManager, security)
// is reused, so that a push that changes a few chains of a large Listener
// costs what those chains cost. A chain whose HTTP filters depend on the
// environment is reused only from a table compiled under the same
// Filters.EnvKey: the same bytes from a management server of another trust
// are checked again (gRFC A102).
func CompileRaw(r *RawListener, opts Options) (*Table, error) {
	compiled := make(map[uint64][]*compiledChain, len(r.FilterChains))
	t, err := compile(r.Listener, len(r.FilterChains), opts, func(c *chainCompiler, i int) (chainSpec, error) {
		raw := r.FilterChains[i]
		key := maphash.Bytes(chainSeed, raw)
		if prev := opts.Previous.reusable(key, raw, c.parser.EnvKey()); prev != nil {
			// Kept with this Listener's bytes, so that the earlier one's
			// can be freed.
			kept := *prev
			kept.raw = raw
			compiled[key] = append(compiled[key], &kept)
			return c.reuse(prev, i)
		}
		fc := &listenerpb.FilterChain{}
		if err := proto.Unmarshal(raw, fc); err != nil {
			return chainSpec{}, &ValidationError{Chain: chainRef{index: i}.String(), Field: "", Err: fmt.Errorf("malformed FilterChain: %v", err)}
		}
		ref := chainRef{index: i, name: fc.GetName()}
		before := len(c.ignored)
		_, spec, cfgs, err := c.compileChain(ref, fc)
		if err != nil {
			return chainSpec{}, err
		}
		kept := &compiledChain{raw: raw, spec: spec, configs: cfgs}
		for _, note := range c.ignored[before:] {
			kept.ignored = append(kept.ignored, strings.TrimPrefix(note, ref.String()+": "))
		}
		compiled[key] = append(compiled[key], kept)
		return spec, nil
	})
	if err != nil {
		return nil, err
	}
	t.compiled = compiled
	return t, nil
}

// reusable returns the compiled chain of t whose bytes are raw (hashing to
// key) and that holds under envKey, or nil. A chain that depends on the
// parser's env holds only under the EnvKey t was compiled under: its
// filters' configs, and the HttpConnectionManager config that reuse hands
// to the new compile's memo, were checked against that env alone.
func (t *Table) reusable(key uint64, raw []byte, envKey string) *compiledChain {
	if t == nil {
		return nil
	}
	for _, cc := range t.compiled[key] {
		if bytes.Equal(cc.raw, raw) {
			if envKey != t.envKey && cc.configs.hcm.usesEnv() {
				return nil
			}
			return cc
		}
	}
	return nil
}

// reuse takes a chain compiled for an earlier version of the Listener, now
// at position i: its matchers count against the budget again, its ignored
// fields are listed again, and its configs (its access log too) join the
// memo, so that new chains with the same configs share them.
func (c *chainCompiler) reuse(prev *compiledChain, i int) (chainSpec, error) {
	spec := prev.spec
	spec.ref = chainRef{index: i, name: spec.chain.Name}
	if c.budget -= len(spec.matchers); c.budget < 0 {
		return chainSpec{}, &ValidationError{Chain: spec.ref.String(), Field: "filter_chain_match",
			Err: fmt.Errorf("expands to more than %d normalized matchers in the Listener", maxMatchers)}
	}
	for _, note := range prev.ignored {
		c.ignored = append(c.ignored, fmt.Sprintf("%v: %s", spec.ref, note))
	}
	for _, e := range []*configEntry{prev.configs.hcm, prev.configs.tls} {
		if e != nil {
			if _, ok := c.configs[e.key]; !ok {
				c.configs[e.key] = e
			}
		}
	}
	if al := spec.chain.HCM.AccessLog; al != nil {
		if _, ok := c.accessLogs[al.Key()]; !ok {
			c.accessLogs[al.Key()] = al
		}
	}
	return spec, nil
}
