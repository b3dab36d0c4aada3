package certprovider_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/certprovider"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

func TestParseBundleMap(t *testing.T) {
	testutils.CheckGoroutines(t)
	a := testcerts.NewCAUntil(t, "a", time.Now().Add(3*time.Hour).Truncate(time.Second))
	a2 := testcerts.NewCAUntil(t, "a2", time.Now().Add(2*time.Hour).Truncate(time.Second))
	b := testcerts.NewCAUntil(t, "b", time.Now().Add(5*time.Hour).Truncate(time.Second))
	good := testcerts.SPIFFEBundleMap(t, map[string][]*testcerts.CA{"a.test": {a, a2}, "b.test": {b}})

	m, err := certprovider.ParseBundleMap(good)
	if err != nil {
		t.Fatalf("ParseBundleMap() failed: %v", err)
	}
	tdA, tdB := spiffeid.RequireTrustDomainFromString("a.test"), spiffeid.RequireTrustDomainFromString("b.test")
	if diff := cmp.Diff(m.TrustDomains(), []spiffeid.TrustDomain{tdA, tdB}, cmp.Comparer(func(x, y spiffeid.TrustDomain) bool { return x == y })); diff != "" {
		t.Errorf("TrustDomains() diff (-got, +want):\n%s", diff)
	}
	if got := len(m.Bundle(tdA).X509Authorities()); got != 2 {
		t.Errorf("bundle of a.test has %d authorities, want 2", got)
	}
	if m.Roots(tdA) == nil || m.Roots(tdB) == nil {
		t.Error("Roots() of a listed trust domain is nil")
	}
	if r := m.Roots(spiffeid.RequireTrustDomainFromString("c.test")); r != nil {
		t.Error("Roots() of an unlisted trust domain is not nil")
	}
	if got, want := m.NotAfter(), a2.Cert.NotAfter; !got.Equal(want) {
		t.Errorf("NotAfter() = %v, want the earliest authority's %v", got, want)
	}

	empty, err := certprovider.ParseBundleMap([]byte(`{"trust_domains": {}}`))
	if err != nil {
		t.Fatalf("ParseBundleMap(empty map) failed: %v; gRFC A87 makes an empty map valid", err)
	}
	if len(empty.TrustDomains()) != 0 || !empty.NotAfter().IsZero() {
		t.Errorf("empty map: domains %v, NotAfter %v; want none, zero", empty.TrustDomains(), empty.NotAfter())
	}

	bad := []struct {
		desc string
		in   string
	}{
		{"not JSON", `{"trust_domains": {"a.test": `},
		{"half written", string(good[:len(good)/2])},
		{"no trust_domains", `{"domains": {}}`},
		{"trust_domains a list", `{"trust_domains": []}`},
		{"invalid trust domain", `{"trust_domains": {"A Test": {"keys": []}}}`},
		{"trust domain as a SPIFFE ID", `{"trust_domains": {"spiffe://a.test": {"keys": []}}}`},
		{"bundle without keys", `{"trust_domains": {"a.test": {"spiffe_sequence": 1}}}`},
		{"x509-svid key without key or certificate", `{"trust_domains": {"a.test": {"keys": [{"use": "x509-svid", "kty": "EC"}]}}}`},
		{"x5c not base64", `{"trust_domains": {"a.test": {"keys": [{"use": "x509-svid", "kty": "EC", "x5c": ["%%%"]}]}}}`},
	}
	for _, tc := range bad {
		if m, err := certprovider.ParseBundleMap([]byte(tc.in)); err == nil {
			t.Errorf("%s: ParseBundleMap() = %v, want an error", tc.desc, m.TrustDomains())
		}
	}
}

// TestSPIFFEProvider: a provider with spiffe_trust_bundle_map_file returns
// the map and never the CA file's roots; a map that does not parse at start
// leaves the provider without trust (its identity is unaffected) until a
// good one is written; a later broken write keeps the previous map.
func TestSPIFFEProvider(t *testing.T) {
	testutils.CheckGoroutines(t)
	ca := testcerts.NewCA(t, "ca")
	a := testcerts.NewCA(t, "a")
	b := testcerts.NewCA(t, "b")
	dir := t.TempDir()
	f := testcerts.WriteFiles(t, dir, ca.Issue(t, testcerts.LeafOptions{CommonName: "server"}), ca.PEM)
	mapFile := filepath.Join(dir, "bundles.json")
	testcerts.WriteFile(t, mapFile, []byte(`{"trust_domains": {"a.test": {"keys": [`)) // half written
	var warnings atomic.Int32
	s := certprovider.NewStore(func(string, ...any) { warnings.Add(1) })
	h := s.Get(bootstrap.FileWatcherConfig{
		CertificateFile: f.Cert, PrivateKeyFile: f.Key, CACertificateFile: f.CA,
		SPIFFETrustBundleMapFile: mapFile, RefreshInterval: refresh,
	})
	defer h.Release()

	if tr, err := h.Trust(ctxOf(t)); err == nil {
		t.Fatalf("Trust() with an invalid map = %+v, want an error (never the CA file)", tr)
	}
	if _, err := h.Identity(ctxOf(t)); err != nil {
		t.Errorf("Identity() with an invalid map failed: %v; want the identity unaffected", err)
	}

	testcerts.WriteFile(t, mapFile, testcerts.SPIFFEBundleMap(t, map[string][]*testcerts.CA{"a.test": {a}}))
	testutils.WaitFor(ctxOf(t), t, "the valid map", func() error { _, err := h.Trust(ctxOf(t)); return err })
	tr, _ := h.Trust(ctxOf(t))
	if tr.Roots != nil || tr.SPIFFE == nil {
		t.Fatalf("Trust() = roots %v, SPIFFE %v; want only the map (the CA file is ignored)", tr.Roots, tr.SPIFFE)
	}
	if !tr.NotAfter.Equal(a.Cert.NotAfter) {
		t.Errorf("Trust().NotAfter = %v, want %v", tr.NotAfter, a.Cert.NotAfter)
	}

	// A half-written update keeps the previous map; a complete one
	// replaces it.
	next := testcerts.SPIFFEBundleMap(t, map[string][]*testcerts.CA{"a.test": {a}, "b.test": {b}})
	// The provider warns when a re-read fails: then it has read the
	// half-written map, and must have kept the previous one.
	seen := warnings.Load()
	testcerts.WriteFile(t, mapFile, next[:len(next)-10])
	testutils.WaitFor(ctxOf(t), t, "a warning about the half-written map", func() error {
		if warnings.Load() == seen {
			return errors.New("no new warning")
		}
		return nil
	})
	if got, _ := h.Trust(ctxOf(t)); got != tr {
		t.Fatalf("after a half-written map, Trust() changed to %v, want the previous map kept", got.SPIFFE.TrustDomains())
	}
	testcerts.WriteFile(t, mapFile, next)
	testutils.WaitFor(ctxOf(t), t, "the new map", func() error {
		got, _ := h.Trust(ctxOf(t))
		if n := len(got.SPIFFE.TrustDomains()); n != 2 {
			return fmt.Errorf("%d trust domains", n)
		}
		return nil
	})
}
