package e2e_test

// Helpers of the mesh identity end-to-end tests (issue 14): SPIFFE trust
// bundle maps (gRFC A87) written at test time for several trust domains,
// filter chains whose client certificates are verified with them, and a
// management server that requires a JWT on every ADS stream (gRFC A97),
// reached over TLS channel credentials (gRFC A65).

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// Certificate provider instances of the SPIFFE tests, besides instServer
// (the server's identity).
const (
	// instSPIFFE has spiffe_trust_bundle_map_file and also a
	// ca_certificate_file (the decoy) that trusts every client CA of the
	// tests: a client it lets in that the map refuses would show that the
	// CA file was used.
	instSPIFFE = "spiffe-bundles"
	// instSPIFFEOnly has only spiffe_trust_bundle_map_file, the bootstrap
	// the issue says was refused.
	instSPIFFEOnly = "spiffe-only"
)

// spiffePKI is the PKI of a SPIFFE test: a CA for the server's certificate
// (which clients trust), a CA per trust domain, the bundle map file and the
// decoy CA file.
type spiffePKI struct {
	serverCA *testcerts.CA
	server   *testcerts.Leaf
	// domains are the CAs of a.test and b.test (in the map at first) and
	// c.test (never in the map, but in the decoy CA file).
	domains     map[string]*testcerts.CA
	serverFiles testcerts.Files
	mapFile     string
	decoyCA     string
}

func newSPIFFEPKI(t *testing.T) *spiffePKI {
	t.Helper()
	dir := t.TempDir()
	p := &spiffePKI{
		serverCA: testcerts.NewCA(t, "server-ca"),
		domains: map[string]*testcerts.CA{
			"a.test": testcerts.NewCAUntil(t, "a.test root", time.Now().Add(3*time.Hour)),
			"b.test": testcerts.NewCAUntil(t, "b.test root", time.Now().Add(2*time.Hour)),
			"c.test": testcerts.NewCA(t, "c.test root"),
		},
		mapFile: filepath.Join(dir, "bundles.json"),
		decoyCA: filepath.Join(dir, "decoy-ca.pem"),
	}
	p.server = p.serverCA.Issue(t, testcerts.LeafOptions{CommonName: "server", DNSNames: []string{"server.test"},
		URIs: []string{"spiffe://a.test/server"}, NotAfter: time.Now().Add(90 * time.Minute)})
	p.serverFiles = testcerts.WriteFiles(t, dir, p.server, nil)
	var decoy []byte
	for _, td := range []string{"a.test", "b.test", "c.test"} {
		decoy = append(decoy, p.domains[td].PEM...)
	}
	testcerts.WriteFile(t, p.decoyCA, decoy)
	p.writeMap(t, "a.test", "b.test")
	return p
}

// writeMap replaces the bundle map with one holding the bundles of the
// named trust domains.
func (p *spiffePKI) writeMap(t *testing.T, domains ...string) {
	t.Helper()
	m := make(map[string][]*testcerts.CA)
	for _, td := range domains {
		m[td] = []*testcerts.CA{p.domains[td]}
	}
	testcerts.WriteFile(t, p.mapFile, testcerts.SPIFFEBundleMap(t, m))
}

// client issues a client certificate signed by the CA of trust domain
// signer with the URI SANs uris.
func (p *spiffePKI) client(t *testing.T, signer string, uris ...string) *testcerts.Leaf {
	t.Helper()
	return p.domains[signer].Issue(t, testcerts.LeafOptions{CommonName: "client", URIs: uris})
}

// providers returns the bootstrap's certificate_providers: the server's
// identity, instSPIFFE and instSPIFFEOnly, refreshed every refresh.
func (p *spiffePKI) providers(refresh time.Duration) map[string]json.RawMessage {
	return map[string]json.RawMessage{
		instServer:     fileWatcher(map[string]string{"certificate_file": p.serverFiles.Cert, "private_key_file": p.serverFiles.Key}, refresh),
		instSPIFFE:     fileWatcher(map[string]string{"spiffe_trust_bundle_map_file": p.mapFile, "ca_certificate_file": p.decoyCA}, refresh),
		instSPIFFEOnly: fileWatcher(map[string]string{"spiffe_trust_bundle_map_file": p.mapFile}, refresh),
	}
}

// creds returns client TLS credentials that trust the server's CA and
// present leaf (none if nil).
func (p *spiffePKI) creds(leaf *testcerts.Leaf) grpc.DialOption {
	return tlsClientCreds(p.serverCA.Pool, leaf)
}

// newProvidersEnv is newTestEnv with certificate providers in the bootstrap.
func newProvidersEnv(t *testing.T, providers map[string]json.RawMessage) *testEnv {
	t.Helper()
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	nodeID := "node-" + testutils.RunName(t)
	return &testEnv{ms: ms, nodeID: nodeID, bootstrap: e2e.Bootstrap(t, e2e.BootstrapOptions{
		ServerURIs:                         []string{ms.Address},
		NodeID:                             nodeID,
		ServerListenerResourceNameTemplate: e2e.ServerListenerNameTemplate,
		CertificateProviders:               providers,
	})}
}

// mtlsWith returns a DownstreamTlsContext with the server's identity and
// client certificates verified by the provider instance roots.
func mtlsWith(roots string, require bool) *tlspb.DownstreamTlsContext {
	return &tlspb.DownstreamTlsContext{
		CommonTlsContext: &tlspb.CommonTlsContext{
			TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: instServer},
			ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
				CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: roots},
			}},
		},
		RequireClientCertificate: wrapperspb.Bool(require),
	}
}

// tlsChain describes one filter chain of an identity test Listener.
type tlsChain struct {
	name string
	src  string // the source IP the chain matches (every source if empty)
	tls  *tlspb.DownstreamTlsContext
	rbac *rbacpb.RBAC // an RBAC filter before the router, if set
}

// identityListener returns the Listener for addr with chains, each with
// inline routes that let every RPC through.
func identityListener(t *testing.T, addr net.Addr, chains ...tlsChain) *listenerpb.Listener {
	t.Helper()
	l := testListener(addr, nil, nil)
	for _, c := range chains {
		filters := []*hcmpb.HttpFilter{e2e.RouterHTTPFilter()}
		if c.rbac != nil {
			filters = append([]*hcmpb.HttpFilter{{Name: rbacFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, c.rbac)}}}, filters...)
		}
		hcm := &hcmpb.HttpConnectionManager{
			StatPrefix:     "identity",
			HttpFilters:    filters,
			RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: allRoutes("routes-" + c.name)},
		}
		fc := &listenerpb.FilterChain{
			Name: c.name,
			Filters: []*listenerpb.Filter{{
				Name:       e2e.HCMFilterName,
				ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: e2e.HCMAny(hcm)},
			}},
		}
		if c.src != "" {
			fc.FilterChainMatch = &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr(c.src + "/32")}}
		}
		l.FilterChains = append(l.FilterChains, fc)
		if c.tls != nil {
			withTransportSocket(t, l, c.name, c.tls)
		}
	}
	return l
}

// --- metrics ---

// tlsAttrs are the attributes of a filter chain's TLS metrics.
func tlsAttrs(addr net.Addr, chain string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("grpc.xds_server.listener", addr.String()),
		attribute.String("grpc.xds_server.filter_chain", chain),
	}
}

// waitAtLeast waits until the metric name, summed over the points whose
// attributes include attrs, is at least min (a client may retry a refused
// handshake, so failures are counted at least once).
func waitAtLeast(ctx context.Context, t *testing.T, mr *testutils.MetricReader, name string, min int64, attrs ...attribute.KeyValue) {
	t.Helper()
	testutils.WaitFor(ctx, t, fmt.Sprintf("metric %s%v >= %d", name, attrs, min), func() error {
		if v, ok := mr.Value(t, name, attrs...); !ok || v < min {
			return fmt.Errorf("got %d (recorded: %v); points: %v", v, ok, mr.Points(t, name))
		}
		return nil
	})
}

// --- a management server that requires a JWT (gRFC A97) ---

// tokenEvent is one ADS stream the token-checking management server saw.
type tokenEvent struct {
	sub      string // the token's subject; "" if none could be read
	accepted bool
	reason   string // why it was refused
}

// tokenChecker is a gRPC stream interceptor in front of the management
// server: a stream whose "authorization" is not "Bearer <JWT>" signed with
// key, unexpired and not revoked, is refused with UNAUTHENTICATED before
// go-control-plane sees it.
type tokenChecker struct {
	key    []byte          // immutable
	events chan tokenEvent // every stream, in order

	mu      sync.Mutex
	revoked map[string]bool // guarded by mu; by subject
}

func newTokenChecker(key []byte) *tokenChecker {
	return &tokenChecker{key: key, events: make(chan tokenEvent, 1000), revoked: make(map[string]bool)}
}

// revoke makes the server refuse tokens of subject sub from now on
// (streams already open are not ended).
func (c *tokenChecker) revoke(sub string) {
	c.mu.Lock()
	c.revoked[sub] = true
	c.mu.Unlock()
}

func (c *tokenChecker) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	ev := c.check(md.Get("authorization"))
	select {
	case c.events <- ev:
	default:
	}
	if !ev.accepted {
		return status.Errorf(codes.Unauthenticated, "management server: %s", ev.reason)
	}
	return handler(srv, ss)
}

func (c *tokenChecker) check(auth []string) tokenEvent {
	if len(auth) != 1 {
		return tokenEvent{reason: fmt.Sprintf("want one authorization header, got %d", len(auth))}
	}
	token, ok := strings.CutPrefix(auth[0], "Bearer ")
	if !ok {
		return tokenEvent{reason: "authorization is not a bearer token"}
	}
	claims, err := testcerts.VerifyJWT(token, c.key, time.Now())
	if err != nil {
		return tokenEvent{reason: "invalid token: " + err.Error()}
	}
	sub, _ := claims["sub"].(string)
	c.mu.Lock()
	revoked := c.revoked[sub]
	c.mu.Unlock()
	if revoked {
		return tokenEvent{sub: sub, reason: "token of " + sub + " revoked"}
	}
	return tokenEvent{sub: sub, accepted: true}
}

// next returns the next stream the server saw, failing the test if there
// is none before ctx ends.
func (c *tokenChecker) next(ctx context.Context, t *testing.T) tokenEvent {
	t.Helper()
	select {
	case ev := <-c.events:
		return ev
	case <-ctx.Done():
		t.Fatal("the management server saw no ADS stream")
	}
	return tokenEvent{}
}

// waitAccepted waits for a stream accepted with the token of sub, skipping
// others.
func (c *tokenChecker) waitAccepted(ctx context.Context, t *testing.T, sub string) {
	t.Helper()
	var last *tokenEvent
	for {
		select {
		case ev := <-c.events:
			if ev.accepted && ev.sub == sub {
				return
			}
			last = &ev
		case <-ctx.Done():
			t.Fatalf("the management server accepted no stream with the token of %q; the last stream it saw: %+v", sub, last)
		}
	}
}

// jwtEnv is a management server behind TLS and a tokenChecker, the token
// file its clients read, and the key that signs valid tokens.
type jwtEnv struct {
	*testEnv
	checker   *tokenChecker
	key       []byte
	tokenFile string
	caFile    string // the management server's CA, for the clients
}

// newJWTEnv starts the management server of a JWT test. The token file is
// not written.
func newJWTEnv(t *testing.T) *jwtEnv {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "control-plane-ca")
	cert := ca.Issue(t, testcerts.LeafOptions{CommonName: "istiod", IPs: []string{"127.0.0.1"}})
	e := &jwtEnv{
		checker:   newTokenChecker([]byte("management server key")),
		key:       []byte("management server key"),
		tokenFile: filepath.Join(dir, "istio-token"),
		caFile:    filepath.Join(dir, "root-cert.pem"),
	}
	testcerts.WriteFile(t, e.caFile, ca.PEM)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{ServerOptions: []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS12})),
		grpc.StreamInterceptor(e.checker.intercept),
	}})
	nodeID := "node-" + testutils.RunName(t)
	e.testEnv = &testEnv{ms: ms, nodeID: nodeID}
	e.bootstrap = e.bootstrapJSON(t, nodeID, true)
	return e
}

// bootstrapJSON returns the bootstrap of a server of the JWT tests: TLS
// channel credentials to the management server and, if withToken,
// jwt_token_file call credentials.
func (e *jwtEnv) bootstrapJSON(t *testing.T, nodeID string, withToken bool) []byte {
	t.Helper()
	server := map[string]any{
		"server_uri":      e.ms.Address,
		"channel_creds":   []any{map[string]any{"type": "tls", "config": map[string]any{"ca_certificate_file": e.caFile}}},
		"server_features": []any{"xds_v3"},
	}
	if withToken {
		server["call_creds"] = []any{map[string]any{"type": "jwt_token_file", "config": map[string]any{"jwt_token_file": e.tokenFile}}}
	}
	b, err := json.Marshal(map[string]any{
		"xds_servers":                            []any{server},
		"node":                                   map[string]any{"id": nodeID},
		"server_listener_resource_name_template": e2e.ServerListenerNameTemplate,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// token returns a token for sub valid for an hour, signed with key.
func (e *jwtEnv) token(t *testing.T, sub string, key []byte) string {
	t.Helper()
	return testcerts.JWT(t, key, map[string]any{"sub": sub, "iss": "test-ca", "exp": time.Now().Add(time.Hour).Unix()})
}

// writeToken replaces the token file.
func (e *jwtEnv) writeToken(t *testing.T, token string) {
	t.Helper()
	testcerts.WriteFile(t, e.tokenFile, []byte(token))
}
