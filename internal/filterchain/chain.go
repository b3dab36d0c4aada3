package filterchain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

// Type names (type URLs without their prefix) this file recognizes.
const (
	hcmTypeName           = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	downstreamTLSTypeName = "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
	tlsTransportSocket    = "envoy.transport_sockets.tls"
)

// fieldError is an error in one field (fieldpath.Error): callers prefix
// the path as the error travels up (inField).
type fieldError = fieldpath.Error

var (
	fieldErrorf = fieldpath.Errorf
	inField     = fieldpath.In
)

// chainCompiler validates filter chains of one Listener. It memoizes each
// distinct config (type URL and serialized bytes) of network filters and
// transport sockets, with its digest and, for HttpConnectionManager and TLS
// configs, its decoded result, so that chains sharing a config share the
// result and pay for it once.
type chainCompiler struct {
	parser  *httpfilter.Parser
	configs map[configKey]*configEntry
	// accessLogs are the access logs compiled, by accesslog.Key: chains
	// whose HttpConnectionManagers differ but log alike share one.
	accessLogs map[string]*accesslog.Config
	// instances are the bootstrap's certificate provider instances (see
	// Options.CertProviderInstances); nil skips the existence check.
	instances map[string]bool
	budget    int // normalized matchers the Listener may still have
	// ignored are the fields accepted without effect (see Table.Ignored).
	ignored []string
	idBuf   []byte // scratch for chainID
	sumBuf  []byte // scratch for config
}

// configKey is a config's type URL and bytes. A lookup with
// configKey{url, string(bytes)} does not copy the bytes; only a new entry
// stores a copy, so a config shared by every chain of a large Listener costs
// one hash of its bytes per chain and nothing else.
type configKey struct{ typeURL, value string }

// configEntry is what a compile knows of one distinct config.
type configEntry struct {
	key configKey // where the entry is in chainCompiler.configs
	// sum is the SHA-256 of the type URL (length-prefixed) and bytes: the
	// config's part of a chain ID.
	sum [sha256.Size]byte
	hcm *hcmResult // once decoded as a network filter
	tls *tlsResult // once decoded as a transport socket
}

// tlsResult is a decoded and validated DownstreamTlsContext.
type tlsResult struct {
	d   *tlspb.DownstreamTlsContext
	sec *Security
	err error // a fieldError relative to the transport socket
	// ignored are the fields accepted without effect, relative to the
	// transport socket ("typed_config.common_tls_context.alpn_protocols:
	// why").
	ignored []string
}

type hcmResult struct {
	hcm *HTTPConnectionManager
	err error // a fieldError relative to the filter's typed_config
	// usesEnv is set when some HTTP filter's config was parsed with the
	// parser's env (httpfilter.DependOnEnv): the result holds only under
	// the parser's EnvKey.
	usesEnv bool
}

// usesEnv reports whether the chain whose HttpConnectionManager config is
// hcm depends on the parser's env.
func (e *configEntry) usesEnv() bool { return e != nil && e.hcm != nil && e.hcm.usesEnv }

func newChainCompiler(p *httpfilter.Parser) *chainCompiler {
	return &chainCompiler{parser: p, configs: map[configKey]*configEntry{}, accessLogs: map[string]*accesslog.Config{}, budget: maxMatchers}
}

// config returns the entry of a's config (nil: the empty config), adding it
// if it is new.
func (c *chainCompiler) config(a *anypb.Any) *configEntry {
	if e, ok := c.configs[configKey{a.GetTypeUrl(), string(a.GetValue())}]; ok {
		return e
	}
	e := &configEntry{key: configKey{a.GetTypeUrl(), string(a.GetValue())}}
	c.sumBuf = append(appendString(c.sumBuf[:0], a.GetTypeUrl()), a.GetValue()...)
	e.sum = sha256.Sum256(c.sumBuf)
	c.configs[e.key] = e
	return e
}

// chainConfigs are the configs a compiled chain took from the compiler's
// memo (tls is nil when the chain has no transport socket), so that a later
// compile reusing the chain can share them too.
type chainConfigs struct {
	hcm, tls *configEntry
}

// compile validates one filter chain. For a chain of filter_chains it also
// normalizes its filter_chain_match; the default chain's match is ignored.
func (c *chainCompiler) compile(ref chainRef, fc *listenerpb.FilterChain) (*FilterChain, chainSpec, error) {
	chain, spec, _, err := c.compileChain(ref, fc)
	return chain, spec, err
}

// compileChain is compile, also returning the configs the chain uses.
func (c *chainCompiler) compileChain(ref chainRef, fc *listenerpb.FilterChain) (*FilterChain, chainSpec, chainConfigs, error) {
	isDefault := ref.index < 0
	fail := func(err error) (*FilterChain, chainSpec, chainConfigs, error) {
		fe := inField("", err)
		return nil, chainSpec{}, chainConfigs{}, &ValidationError{Chain: ref.String(), Field: fe.Path, Err: fe.Err}
	}
	spec := chainSpec{ref: ref}
	if !isDefault {
		ms, canMatch, err := normalize(fc.GetFilterChainMatch(), &c.budget)
		if err != nil {
			return fail(inField("filter_chain_match", err))
		}
		spec.matchers, spec.canMatch = ms, canMatch
	}
	hcm, hcmConfig, err := c.networkFilters(fc.GetFilters())
	if err != nil {
		return fail(err)
	}
	tls, sec, tlsConfig, err := c.transportSocket(ref, fc.GetTransportSocket())
	if err != nil {
		return fail(inField("transport_socket", err))
	}
	id := c.chainID(fc, spec.matchers, isDefault, hcmConfig, tlsConfig)
	spec.chain = &FilterChain{ID: id, Name: fc.GetName(), IsDefault: isDefault, HCM: hcm, TLS: tls, Security: sec}
	return spec.chain, spec, chainConfigs{hcm: hcmConfig, tls: tlsConfig}, nil
}

// chainID hashes the content of a valid chain: whether it is the default
// chain, its normalized matchers (so that matches that differ only in
// masked-off bits or clamped lengths get the same ID), and the names, types
// and config bytes of its network filter (valid means exactly one, the
// HttpConnectionManager, whose config is hcm) and of its transport socket
// (config tls, nil if it has none); when the HttpConnectionManager depends
// on the parser's env, the parser's EnvKey too.
func (c *chainCompiler) chainID(fc *listenerpb.FilterChain, matchers []matcher, isDefault bool, hcm, tls *configEntry) string {
	b := append(c.idBuf[:0], byte(boolInt(isDefault)))
	b = binary.AppendUvarint(b, uint64(len(matchers)))
	for i := range matchers {
		b = matchers[i].appendBinary(b)
	}
	b = binary.AppendUvarint(b, 1)
	b = appendString(b, fc.GetFilters()[0].GetName())
	b = append(b, hcm.sum[:]...)
	b = appendString(b, fc.GetTransportSocket().GetName())
	if tls == nil {
		tls = c.config(nil)
	}
	b = append(b, tls.sum[:]...)
	if hcm.usesEnv() {
		b = appendString(b, c.parser.EnvKey())
	}
	c.idBuf = b
	id := sha256.Sum256(b)
	return hex.EncodeToString(id[:16])
}

// appendString appends s, length-prefixed.
func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// networkFilters validates a chain's network filters (gRFC A36, "xDS
// Protocol"): exactly one, an HttpConnectionManager, which is therefore
// last, with unique names. Any other filter type is unsupported.
func (c *chainCompiler) networkFilters(filters []*listenerpb.Filter) (*HTTPConnectionManager, *configEntry, error) {
	if len(filters) == 0 {
		return nil, nil, fieldErrorf("filters", "empty, want exactly one HttpConnectionManager")
	}
	var hcm *HTTPConnectionManager
	var config *configEntry
	for i, f := range filters {
		for _, prev := range filters[:i] {
			if prev.GetName() == f.GetName() {
				return nil, nil, fieldErrorf(fmt.Sprintf("filters[%d].name", i), "duplicate network filter name %q", f.GetName())
			}
		}
		h, e, err := c.networkFilter(f, hcm != nil)
		if err != nil {
			return nil, nil, inField(fmt.Sprintf("filters[%d]", i), err)
		}
		hcm, config = h, e
	}
	return hcm, config, nil
}

// networkFilter validates one network filter, which must be an
// HttpConnectionManager and, if seenHCM, is one too many.
func (c *chainCompiler) networkFilter(f *listenerpb.Filter, seenHCM bool) (*HTTPConnectionManager, *configEntry, error) {
	if f.GetConfigDiscovery() != nil {
		return nil, nil, fieldErrorf("config_discovery", "is not supported, want typed_config")
	}
	a := f.GetTypedConfig()
	if a == nil {
		return nil, nil, fieldErrorf("typed_config", "is missing")
	}
	// Identical configs are decoded once.
	e := c.config(a)
	if e.hcm == nil {
		// gRFC A36, "xDS Protocol": the type of a TypedStruct is its type_url.
		raw, err := typedconfig.Unwrap(a)
		if err != nil {
			return nil, nil, inField("typed_config", err)
		}
		if !typedconfig.Is(raw.TypeURL, hcmTypeName) {
			return nil, nil, fieldErrorf("typed_config", "unsupported network filter type %q, want only an HttpConnectionManager", typedconfig.Name(raw.TypeURL))
		}
		r := &hcmResult{}
		r.hcm, r.err = c.decodeHCM(raw)
		r.usesEnv = r.hcm != nil && httpfilter.DependOnEnv(r.hcm.Filters)
		e.hcm = r
	}
	r := e.hcm
	if seenHCM {
		return nil, nil, errors.New("second HttpConnectionManager, want exactly one")
	}
	if r.err != nil {
		return nil, nil, inField("typed_config", r.err)
	}
	return r.hcm, e, nil
}

// decodeHCM decodes and validates an HttpConnectionManager config.
func (c *chainCompiler) decodeHCM(raw httpfilter.RawConfig) (*HTTPConnectionManager, error) {
	m := &hcmpb.HttpConnectionManager{}
	if err := raw.UnmarshalTo(m); err != nil {
		return nil, err
	}
	return c.validateHCM(m)
}

// maxRequestHeadersKB is the largest max_request_headers_kb Envoy accepts.
const maxRequestHeadersKB = 8192

// validateHCM checks the HttpConnectionManager fields that gRFC A36, A39 and
// A41 constrain, and compiles its HTTP filters, access log and inline
// routes.
func (c *chainCompiler) validateHCM(m *hcmpb.HttpConnectionManager) (*HTTPConnectionManager, error) {
	// gRFC A41: RBAC treats the peer address as the client address, which
	// holds only if no hop is trusted to rewrite it.
	if n := m.GetXffNumTrustedHops(); n != 0 {
		return nil, fieldErrorf("xff_num_trusted_hops", "is %d, want 0", n)
	}
	if n := len(m.GetOriginalIpDetectionExtensions()); n != 0 {
		return nil, fieldErrorf("original_ip_detection_extensions", "has %d entries, want none", n)
	}
	filters, err := c.parser.HTTPFilters(m.GetHttpFilters())
	if err != nil {
		return nil, err // the parser's message names http_filters[i]
	}
	out := &HTTPConnectionManager{Filters: filters}
	if kb := m.GetMaxRequestHeadersKb(); kb != nil {
		// Envoy's bounds (its validation rules for the field): a value it
		// refuses is a bound nobody meant, refused here too rather than
		// changed into another.
		if v := kb.GetValue(); v == 0 || v > maxRequestHeadersKB {
			return nil, fieldErrorf("max_request_headers_kb", "is %d, want 1 to %d (Envoy's range)", v, maxRequestHeadersKB)
		}
		out.MaxRequestHeaderBytes = int(kb.GetValue()) << 10
	}
	if n := m.GetCommonHttpProtocolOptions().GetMaxHeadersCount(); n != nil {
		if n.GetValue() == 0 {
			return nil, fieldErrorf("common_http_protocol_options.max_headers_count", "is 0, want at least 1 (Envoy's range)")
		}
		out.MaxRequestHeaders = int(min(n.GetValue(), math.MaxInt32))
	}
	if out.AccessLog, err = c.accessLog(m.GetAccessLog()); err != nil {
		return nil, inField("access_log", err)
	}
	switch rs := m.GetRouteSpecifier().(type) {
	case *hcmpb.HttpConnectionManager_Rds:
		if out.RDSName, err = rdsName(rs.Rds); err != nil {
			return nil, inField("rds", err)
		}
	case *hcmpb.HttpConnectionManager_RouteConfig:
		rc := rs.RouteConfig
		if rc == nil {
			rc = &routepb.RouteConfiguration{}
		}
		if out.Routes, err = routing.Compile(rc, c.parser); err != nil {
			return nil, inField("route_config", err)
		}
	case *hcmpb.HttpConnectionManager_ScopedRoutes:
		return nil, fieldErrorf("scoped_routes", "is not supported, want route_config or rds")
	case nil:
		return nil, fieldErrorf("route_specifier", "is missing, want route_config or rds")
	default:
		return nil, fieldErrorf("route_specifier", "unsupported %T, want route_config or rds", rs)
	}
	return out, nil
}

// accessLog compiles an HttpConnectionManager's access_log; configs that
// serialize alike are compiled once per Listener, and taken from the
// chains a compile reuses.
func (c *chainCompiler) accessLog(logs []*accesslogpb.AccessLog) (*accesslog.Config, error) {
	if len(logs) == 0 {
		return nil, nil
	}
	key := accesslog.Key(logs)
	if cfg, ok := c.accessLogs[key]; ok {
		return cfg, nil
	}
	cfg, err := accesslog.Compile(logs)
	if err != nil {
		return nil, err
	}
	c.accessLogs[key] = cfg
	return cfg, nil
}

// rdsName validates an rds route specifier: the RouteConfiguration comes
// over the ADS stream (ads or self config source) and is named.
func rdsName(rds *hcmpb.Rds) (string, error) {
	cs := rds.GetConfigSource()
	if cs.GetAds() == nil && cs.GetSelf() == nil {
		return "", fieldErrorf("config_source", "must be ads or self, got %s", describeConfigSource(cs))
	}
	name := rds.GetRouteConfigName()
	if name == "" {
		return "", fieldErrorf("route_config_name", "is empty")
	}
	return name, nil
}

func describeConfigSource(cs *corepb.ConfigSource) string {
	if cs == nil {
		return "nothing"
	}
	if s := cs.GetConfigSourceSpecifier(); s != nil {
		return fmt.Sprintf("%T", s)
	}
	return "no config_source_specifier"
}

// transportSocket decodes a chain's transport socket, which must be TLS
// with a DownstreamTlsContext (gRFC A29, "LDS for Server Side Security"),
// and validates it (see validateDownstreamTLS). Identical configs are decoded
// once per Listener and share their results.
func (c *chainCompiler) transportSocket(ref chainRef, ts *corepb.TransportSocket) (*tlspb.DownstreamTlsContext, *Security, *configEntry, error) {
	if ts == nil {
		return nil, nil, nil, nil
	}
	if ts.GetName() != tlsTransportSocket {
		return nil, nil, nil, fieldErrorf("name", "is %q, want %q", ts.GetName(), tlsTransportSocket)
	}
	a := ts.GetTypedConfig()
	if a == nil {
		return nil, nil, nil, fieldErrorf("typed_config", "is missing, want a DownstreamTlsContext")
	}
	if !typedconfig.Is(a.GetTypeUrl(), downstreamTLSTypeName) {
		return nil, nil, nil, fieldErrorf("typed_config", "has type %q, want %q", a.GetTypeUrl(), downstreamTLSTypeName)
	}
	e := c.config(a)
	if e.tls == nil {
		r := &tlsResult{d: &tlspb.DownstreamTlsContext{}}
		ignore := func(field, why string) {
			r.ignored = append(r.ignored, "typed_config."+field+": "+why)
		}
		if err := proto.Unmarshal(a.GetValue(), r.d); err != nil {
			r = &tlsResult{err: &fieldError{Path: "typed_config", Err: fmt.Errorf("malformed DownstreamTlsContext: %v", err)}}
		} else if r.sec, err = validateDownstreamTLS(r.d, c.instances, ignore); err != nil {
			r = &tlsResult{err: inField("typed_config", err)}
		}
		e.tls = r
		for _, note := range r.ignored {
			// Once per distinct config, named by the first chain using it.
			c.ignored = append(c.ignored, fmt.Sprintf("%v: transport_socket.%s", ref, note))
		}
	}
	r := e.tls
	if r.err != nil {
		return nil, nil, nil, r.err
	}
	return r.d, r.sec, e, nil
}
