package certprovider_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	gcp "google.golang.org/grpc/credentials/tls/certprovider"

	"github.com/proxyless-grpc/xds/internal/certprovider"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// testPluginName names a real certificate provider plugin registered with
// grpc-go's registry. Its config, {"source": "<name>"}, names a testSource
// the test made; its providers serve that source's key material through a
// grpc-go Distributor.
const testPluginName = "certprovider-test-plugin"

func init() { gcp.Register(testBuilder{}) }

// sources are the testSources by name; each test uses names of its own.
var sources sync.Map

// testSource is the key material of the providers built from one config,
// set by the test, and what happened to them.
type testSource struct {
	dist     *gcp.Distributor
	failNext bool         // the next build returns no provider
	builds   atomic.Int32 // providers built
	closes   atomic.Int32 // providers closed
	opts     chan gcp.BuildOptions
}

// newSource registers a source under a name of t's and returns it with the
// plugin's config naming it, parsed as the bootstrap parses it.
func newSource(t *testing.T, suffix string) (*testSource, *gcp.BuildableConfig) {
	t.Helper()
	name := t.Name() + "/" + suffix
	src := &testSource{dist: gcp.NewDistributor(), opts: make(chan gcp.BuildOptions, 10)}
	sources.Store(name, src)
	t.Cleanup(func() { sources.Delete(name) })
	return src, parse(t, name)
}

func parse(t *testing.T, source string) *gcp.BuildableConfig {
	t.Helper()
	cfg, _ := json.Marshal(map[string]string{"source": source})
	bc, err := gcp.ParseConfig(testPluginName, json.RawMessage(cfg))
	if err != nil {
		t.Fatalf("ParseConfig() failed: %v", err)
	}
	return bc
}

type testBuilder struct{}

func (testBuilder) Name() string { return testPluginName }

func (testBuilder) ParseConfig(c any) (*gcp.BuildableConfig, error) {
	var cfg struct {
		Source string `json:"source"`
	}
	if err := json.Unmarshal(c.(json.RawMessage), &cfg); err != nil {
		return nil, err
	}
	v, ok := sources.Load(cfg.Source)
	if !ok {
		return nil, fmt.Errorf("no source %q", cfg.Source)
	}
	src := v.(*testSource)
	return gcp.NewBuildableConfig(testPluginName, []byte(cfg.Source), func(opts gcp.BuildOptions) gcp.Provider {
		if src.failNext {
			src.failNext = false
			return nil
		}
		src.builds.Add(1)
		src.opts <- opts
		return &testProvider{src: src}
	}), nil
}

// testProvider is one provider of a testSource.
type testProvider struct {
	src    *testSource
	closed atomic.Bool
}

func (p *testProvider) KeyMaterial(ctx context.Context) (*gcp.KeyMaterial, error) {
	return p.src.dist.KeyMaterial(ctx)
}

func (p *testProvider) Close() {
	if p.closed.Swap(true) {
		panic("testProvider closed twice")
	}
	p.src.closes.Add(1)
}

var (
	wantIdentity = gcp.BuildOptions{CertName: "default", WantIdentity: true}
	wantRoots    = gcp.BuildOptions{CertName: "ROOTCA", WantRoot: true}
)

// TestPluginShareAndRelease: one provider per config and options, shared
// by every GetPlugin of them (also from another parse of the same config),
// built with the options asked for and closed exactly once, with the last
// release.
func TestPluginShareAndRelease(t *testing.T) {
	testutils.CheckGoroutines(t)
	src, bc := newSource(t, "a")
	s := certprovider.NewStore(nil)
	h1, err := s.GetPlugin(bc, wantIdentity)
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	if got := <-src.opts; got != wantIdentity {
		t.Errorf("built with %+v, want %+v", got, wantIdentity)
	}
	h2, err := s.GetPlugin(parse(t, t.Name()+"/a"), wantIdentity) // another parse, same config
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	roots, err := s.GetPlugin(bc, wantRoots)
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	if got := <-src.opts; got != wantRoots {
		t.Errorf("built with %+v, want %+v", got, wantRoots)
	}
	if got := src.builds.Load(); got != 2 {
		t.Errorf("%d providers built, want 2 (one per options)", got)
	}
	if got := s.PluginRefs(bc, wantIdentity); got != 2 {
		t.Errorf("PluginRefs() = %d, want 2", got)
	}
	if got := s.Running(); got != 2 {
		t.Errorf("Running() = %d, want 2", got)
	}
	h1.Release()
	h1.Release() // no effect
	if got := src.closes.Load(); got != 0 {
		t.Errorf("after one of two releases, %d providers closed, want 0", got)
	}
	h2.Release()
	if got := src.closes.Load(); got != 1 {
		t.Errorf("after the last release of the identity, %d providers closed, want 1", got)
	}
	h2.Release()
	roots.Release()
	if got := src.closes.Load(); got != 2 {
		t.Errorf("after every release, %d providers closed, want 2", got)
	}
	if got := s.Running(); got != 0 {
		t.Errorf("after every release, Running() = %d, want 0", got)
	}

	// Used again: built again.
	h, err := s.GetPlugin(bc, wantIdentity)
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	<-src.opts
	h.Release()
	if b, c := src.builds.Load(), src.closes.Load(); b != 3 || c != 3 {
		t.Errorf("after a second use: %d built, %d closed; want 3, 3", b, c)
	}
}

// TestPluginConcurrentGets: GetPlugins of one config racing build one
// provider, and it is closed once.
func TestPluginConcurrentGets(t *testing.T) {
	testutils.CheckGoroutines(t)
	src, bc := newSource(t, "a")
	s := certprovider.NewStore(nil)
	var wg sync.WaitGroup
	handles := make(chan *certprovider.Handle, 8)
	for range 8 {
		wg.Go(func() {
			h, err := s.GetPlugin(bc, wantIdentity)
			if err != nil {
				t.Errorf("GetPlugin() failed: %v", err)
				return
			}
			handles <- h
		})
	}
	wg.Wait()
	close(handles)
	for h := range handles {
		wg.Go(h.Release)
	}
	wg.Wait()
	if b, c := src.builds.Load(), src.closes.Load(); b != 1 || c != 1 {
		t.Errorf("%d built, %d closed; want 1, 1", b, c)
	}
}

// TestPluginBuildFails: a build without a provider fails GetPlugin and
// leaves nothing running; the next GetPlugin builds again.
func TestPluginBuildFails(t *testing.T) {
	testutils.CheckGoroutines(t)
	src, bc := newSource(t, "a")
	src.failNext = true
	s := certprovider.NewStore(nil)
	if h, err := s.GetPlugin(bc, wantIdentity); err == nil {
		h.Release()
		t.Fatal("GetPlugin() of a provider that fails to build succeeded")
	} else if !strings.Contains(err.Error(), testPluginName) {
		t.Errorf("GetPlugin() error = %q, want it to name the plugin", err)
	}
	if got := s.Running(); got != 0 {
		t.Errorf("after a failed build, Running() = %d, want 0", got)
	}
	h, err := s.GetPlugin(bc, wantIdentity)
	if err != nil {
		t.Fatalf("GetPlugin() after a failed build failed: %v", err)
	}
	h.Release()
	if b, c := src.builds.Load(), src.closes.Load(); b != 1 || c != 1 {
		t.Errorf("%d built, %d closed; want 1, 1", b, c)
	}
}

// TestPluginRotation: the key material is converted once per KeyMaterial
// the provider returns; new material is seen by the next call.
func TestPluginRotation(t *testing.T) {
	testutils.CheckGoroutines(t)
	ca := testcerts.NewCA(t, "ca")
	first := ca.Issue(t, testcerts.LeafOptions{CommonName: "first", NotAfter: time.Now().Add(time.Hour)})
	src, bc := newSource(t, "a")
	src.dist.Set(&gcp.KeyMaterial{Certs: []tls.Certificate{first.TLS}, Roots: ca.Pool}, nil)
	s := certprovider.NewStore(nil)
	h, err := s.GetPlugin(bc, wantIdentity)
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	defer h.Release()
	id, err := h.Identity(ctxOf(t))
	if err != nil {
		t.Fatalf("Identity() failed: %v", err)
	}
	if got, want := serialOf(t, h), first.Cert.SerialNumber.String(); got != want {
		t.Errorf("serial = %s, want %s", got, want)
	}
	if !id.NotAfter.Equal(first.Cert.NotAfter) {
		t.Errorf("NotAfter = %v, want %v", id.NotAfter, first.Cert.NotAfter)
	}
	if again, _ := h.Identity(ctxOf(t)); again != id {
		t.Error("the same KeyMaterial was converted again, want one conversion per KeyMaterial")
	}
	tr, err := h.Trust(ctxOf(t))
	if err != nil || tr.Roots != ca.Pool || tr.SPIFFE != nil {
		t.Errorf("Trust() = %+v, %v; want the provider's roots", tr, err)
	}

	second := ca.Issue(t, testcerts.LeafOptions{CommonName: "second"})
	src.dist.Set(&gcp.KeyMaterial{Certs: []tls.Certificate{second.TLS}, Roots: ca.Pool}, nil)
	if got, want := serialOf(t, h), second.Cert.SerialNumber.String(); got != want {
		t.Errorf("after a rotation, serial = %s, want %s", got, want)
	}
}

// TestPluginKeyMaterialErrors: a provider with no key material by the
// deadline, one that reports an error, and key material without the part
// asked for each give an error that says so and names the plugin.
func TestPluginKeyMaterialErrors(t *testing.T) {
	testutils.CheckGoroutines(t)
	s := certprovider.NewStore(nil)

	_, bc := newSource(t, "never")
	h, err := s.GetPlugin(bc, wantIdentity)
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	defer h.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = h.Identity(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "deadline") || !strings.Contains(err.Error(), testPluginName) {
		t.Errorf("Identity() of a provider without key material = %v, want the deadline's error naming the plugin", err)
	}

	errBroken := errors.New("broken")
	src, bc := newSource(t, "failing")
	src.dist.Set(nil, errBroken)
	h2, err := s.GetPlugin(bc, wantRoots)
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	defer h2.Release()
	if _, err := h2.Trust(ctxOf(t)); !errors.Is(err, errBroken) {
		t.Errorf("Trust() of a failing provider = %v, want its error", err)
	}

	ca := testcerts.NewCA(t, "ca")
	src, bc = newSource(t, "roots-only")
	src.dist.Set(&gcp.KeyMaterial{Roots: ca.Pool}, nil)
	h3, err := s.GetPlugin(bc, wantIdentity)
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	defer h3.Release()
	if id, err := h3.Identity(ctxOf(t)); err == nil {
		t.Errorf("Identity() of key material without certificates = %+v, want an error", id)
	}
	src, bc = newSource(t, "identity-only")
	src.dist.Set(&gcp.KeyMaterial{Certs: []tls.Certificate{ca.Issue(t, testcerts.LeafOptions{CommonName: "x"}).TLS}}, nil)
	h4, err := s.GetPlugin(bc, wantRoots)
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	defer h4.Release()
	if tr, err := h4.Trust(ctxOf(t)); err == nil {
		t.Errorf("Trust() of key material without roots = %+v, want an error", tr)
	}
}

// TestPluginSPIFFE: a bundle map in the key material replaces its roots
// (gRFC A87), with the trust domains of the map.
func TestPluginSPIFFE(t *testing.T) {
	testutils.CheckGoroutines(t)
	a := testcerts.NewCAUntil(t, "a", time.Now().Add(2*time.Hour))
	b := testcerts.NewCAUntil(t, "b", time.Now().Add(time.Hour))
	other := testcerts.NewCA(t, "other")
	src, bc := newSource(t, "a")
	src.dist.Set(&gcp.KeyMaterial{Roots: other.Pool, SPIFFEBundleMap: map[string]*spiffebundle.Bundle{
		"a.test": bundleOf(t, "a.test", a),
		"b.test": bundleOf(t, "b.test", b),
	}}, nil)
	s := certprovider.NewStore(nil)
	h, err := s.GetPlugin(bc, wantRoots)
	if err != nil {
		t.Fatalf("GetPlugin() failed: %v", err)
	}
	defer h.Release()
	tr, err := h.Trust(ctxOf(t))
	if err != nil {
		t.Fatalf("Trust() failed: %v", err)
	}
	if tr.Roots != nil || tr.SPIFFE == nil {
		t.Fatalf("Trust() = roots %v, SPIFFE %v; want only the map", tr.Roots, tr.SPIFFE)
	}
	if got := fmt.Sprint(tr.SPIFFE.TrustDomains()); got != "[a.test b.test]" {
		t.Errorf("TrustDomains() = %s, want [a.test b.test]", got)
	}
	if tr.SPIFFE.Roots(spiffeid.RequireTrustDomainFromString("a.test")) == nil {
		t.Error("no roots for a.test")
	}
	if !tr.NotAfter.Equal(b.Cert.NotAfter) {
		t.Errorf("NotAfter = %v, want the earliest authority's %v", tr.NotAfter, b.Cert.NotAfter)
	}
}

// TestNewBundleMap: a plugin's map is checked as a file's is.
func TestNewBundleMap(t *testing.T) {
	testutils.CheckGoroutines(t)
	ca := testcerts.NewCA(t, "ca")
	tests := []struct {
		desc    string
		bundles map[string]*spiffebundle.Bundle
		wantErr bool
	}{
		{desc: "empty map trusts nobody", bundles: map[string]*spiffebundle.Bundle{}},
		{desc: "one domain", bundles: map[string]*spiffebundle.Bundle{"a.test": bundleOf(t, "a.test", ca)}},
		{desc: "not a bare trust domain name", bundles: map[string]*spiffebundle.Bundle{"spiffe://a.test": bundleOf(t, "a.test", ca)}, wantErr: true},
		{desc: "invalid trust domain name", bundles: map[string]*spiffebundle.Bundle{"A Test": bundleOf(t, "a.test", ca)}, wantErr: true},
		{desc: "nil bundle", bundles: map[string]*spiffebundle.Bundle{"a.test": nil}, wantErr: true},
		{desc: "bundle of another domain", bundles: map[string]*spiffebundle.Bundle{"a.test": bundleOf(t, "b.test", ca)}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			m, err := certprovider.NewBundleMap(tc.bundles)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("NewBundleMap() = %v, %v; want error %v", m, err, tc.wantErr)
			}
			if err == nil && len(m.TrustDomains()) != len(tc.bundles) {
				t.Errorf("TrustDomains() = %v, want %d", m.TrustDomains(), len(tc.bundles))
			}
		})
	}
}

func bundleOf(t *testing.T, td string, cas ...*testcerts.CA) *spiffebundle.Bundle {
	t.Helper()
	var certs []*x509.Certificate
	for _, ca := range cas {
		certs = append(certs, ca.Cert)
	}
	return spiffebundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString(td), certs)
}
