package certprovider_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/certprovider"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const refresh = 20 * time.Millisecond

// ctxOf returns a context for a call to Handle.Identity or Trust, bounded
// by 10 s (a file_watcher ignores it).
func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func serialOf(t *testing.T, h *certprovider.Handle) string {
	t.Helper()
	id, err := h.Identity(ctxOf(t))
	if err != nil {
		t.Fatalf("Identity() failed: %v", err)
	}
	if len(id.Certs) != 1 || id.Certs[0].Leaf == nil {
		t.Fatalf("Identity() has %d certificates, want 1 with its leaf", len(id.Certs))
	}
	return id.Certs[0].Leaf.SerialNumber.String()
}

// TestShareAndRelease: one provider per configuration, stopped with the last
// reference.
func TestShareAndRelease(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	f := testcerts.WriteFiles(t, t.TempDir(), ca.Issue(t, testcerts.LeafOptions{CommonName: "a"}), ca.PEM)
	s := certprovider.NewStore(nil)
	cfg := bootstrap.FileWatcherConfig{CertificateFile: f.Cert, PrivateKeyFile: f.Key, CACertificateFile: f.CA, RefreshInterval: time.Hour}
	h1 := s.Get(cfg)
	h2 := s.Get(cfg)
	other := s.Get(bootstrap.FileWatcherConfig{CACertificateFile: f.CA, RefreshInterval: time.Hour})
	if got := s.Running(); got != 2 {
		t.Errorf("Running() = %d, want 2", got)
	}
	if got := s.Refs(cfg); got != 2 {
		t.Errorf("Refs() = %d, want 2", got)
	}
	id, err := h1.Identity(ctxOf(t))
	if err != nil || len(id.Certs) != 1 {
		t.Fatalf("Identity() = %+v, %v; want a certificate", id, err)
	}
	if tr, err := h1.Trust(ctxOf(t)); err != nil || tr.Roots == nil || tr.SPIFFE != nil {
		t.Fatalf("Trust() = %+v, %v; want roots", tr, err)
	}
	if id2, _ := h2.Identity(ctxOf(t)); id2 != id {
		t.Error("two handles of one configuration see different key material, want one shared provider")
	}
	if id, err := other.Identity(ctxOf(t)); id != nil || !errors.Is(err, certprovider.ErrNotConfigured) {
		t.Errorf("roots-only provider: Identity() = %+v, %v; want none, ErrNotConfigured", id, err)
	}
	if tr, err := other.Trust(ctxOf(t)); err != nil || tr.Roots == nil {
		t.Errorf("roots-only provider: Trust() = %+v, %v; want roots", tr, err)
	}
	h1.Release()
	h1.Release() // no effect
	if got := s.Running(); got != 2 {
		t.Errorf("after one of two releases, Running() = %d, want 2", got)
	}
	h2.Release()
	other.Release()
	if got := s.Running(); got != 0 {
		t.Errorf("after every release, Running() = %d, want 0", got)
	}
}

// TestRotation: new files are picked up within the refresh interval; a
// half-done rotation (cert and key that do not match) keeps the previous
// pair; missing files at start are an error until they appear.
func TestRotation(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	dir := t.TempDir()
	first := ca.Issue(t, testcerts.LeafOptions{CommonName: "first"})
	f := testcerts.WriteFiles(t, dir, first, ca.PEM)
	s := certprovider.NewStore(func(string, ...any) {})
	h := s.Get(bootstrap.FileWatcherConfig{CertificateFile: f.Cert, PrivateKeyFile: f.Key, CACertificateFile: f.CA, RefreshInterval: refresh})
	defer h.Release()
	if got, want := serialOf(t, h), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("serial = %s, want %s", got, want)
	}

	// Only the certificate changes: it does not match the key.
	second := ca.Issue(t, testcerts.LeafOptions{CommonName: "second"})
	if err := os.WriteFile(f.Cert, second.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * refresh)
	if got, want := serialOf(t, h), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("after a mismatched certificate, serial = %s, want the previous %s", got, want)
	}
	testcerts.WriteFiles(t, dir, second, nil)
	waitFor(t, "the rotated certificate", func() bool { return serialOf(t, h) == second.Cert.SerialNumber.String() })
}

func TestMissingFiles(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	dir := t.TempDir()
	s := certprovider.NewStore(nil)
	h := s.Get(bootstrap.FileWatcherConfig{CertificateFile: filepath.Join(dir, "cert.pem"), PrivateKeyFile: filepath.Join(dir, "key.pem"), RefreshInterval: refresh})
	defer h.Release()
	if _, err := h.Identity(ctxOf(t)); err == nil || errors.Is(err, certprovider.ErrNotConfigured) {
		t.Fatalf("Identity() with missing files = %v, want a read error", err)
	}
	leaf := ca.Issue(t, testcerts.LeafOptions{CommonName: "late"})
	testcerts.WriteFiles(t, dir, leaf, nil)
	waitFor(t, "the files to be read", func() bool { _, err := h.Identity(ctxOf(t)); return err == nil })
	if got, want := serialOf(t, h), leaf.Cert.SerialNumber.String(); got != want {
		t.Errorf("serial = %s, want %s", got, want)
	}
}
