package certprovider_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/certprovider"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const refresh = 20 * time.Millisecond

// ctxOf returns a context for a call to Handle.Identity or Trust (a
// file_watcher ignores it): testutils.Context, under this package's name.
func ctxOf(t *testing.T) context.Context {
	t.Helper()
	return testutils.Context(t)
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
	testutils.CheckGoroutines(t)
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
	testutils.CheckGoroutines(t)
	ca := testcerts.NewCA(t, "ca")
	dir := t.TempDir()
	first := ca.Issue(t, testcerts.LeafOptions{CommonName: "first"})
	f := testcerts.WriteFiles(t, dir, first, ca.PEM)
	var warnings atomic.Int32
	s := certprovider.NewStore(func(string, ...any) { warnings.Add(1) })
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
	// The provider warns when a re-read fails: then it has read the new
	// certificate, and must have kept the previous pair.
	testutils.WaitFor(ctxOf(t), t, "a warning about the mismatched certificate", func() error {
		if warnings.Load() == 0 {
			return errors.New("no warning yet")
		}
		return nil
	})
	if got, want := serialOf(t, h), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("after a mismatched certificate, serial = %s, want the previous %s", got, want)
	}
	testcerts.WriteFiles(t, dir, second, nil)
	testutils.WaitFor(ctxOf(t), t, "the rotated certificate", func() error {
		if got, want := serialOf(t, h), second.Cert.SerialNumber.String(); got != want {
			return fmt.Errorf("serial %s, want %s", got, want)
		}
		return nil
	})
}

func TestMissingFiles(t *testing.T) {
	testutils.CheckGoroutines(t)
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
	testutils.WaitFor(ctxOf(t), t, "the files to be read", func() error { _, err := h.Identity(ctxOf(t)); return err })
	if got, want := serialOf(t, h), leaf.Cert.SerialNumber.String(); got != want {
		t.Errorf("serial = %s, want %s", got, want)
	}
}
