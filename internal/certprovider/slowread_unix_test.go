//go:build unix

package certprovider_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/certprovider"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// TestGetDoesNotHoldTheStoreDuringIO: a provider whose first read blocks
// (its ca_certificate_file is a FIFO nobody writes yet: a real slow read)
// holds up neither a Get of another configuration nor the Store, and a
// second Get of the same configuration returns once the first read is done.
func TestGetDoesNotHoldTheStoreDuringIO(t *testing.T) {
	testutils.CheckGoroutines(t)
	ca := testcerts.NewCA(t, "ca")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ca.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	f := testcerts.WriteFiles(t, dir, ca.Issue(t, testcerts.LeafOptions{CommonName: "a"}), ca.PEM)
	s := certprovider.NewStore(nil)
	slow := bootstrap.FileWatcherConfig{CACertificateFile: fifo, RefreshInterval: time.Hour}

	got := make(chan *certprovider.Handle, 2)
	go func() { got <- s.Get(slow) }()
	go func() { got <- s.Get(slow) }()
	fastCh := make(chan *certprovider.Handle, 1)
	go func() {
		fastCh <- s.Get(bootstrap.FileWatcherConfig{CACertificateFile: f.CA, RefreshInterval: time.Hour})
	}()
	var fast *certprovider.Handle
	select {
	case fast = <-fastCh:
	case <-time.After(5 * time.Second):
		// Unblock the slow read so that the test can end.
		os.WriteFile(fifo, ca.PEM, 0o600)
		t.Fatal("Get of another configuration waited for a provider's first read")
	}
	if tr, err := fast.Trust(ctxOf(t)); err != nil || tr.Roots == nil {
		t.Errorf("Trust() of the other configuration = %+v, %v; want roots", tr, err)
	}
	fast.Release()
	if n := s.Running(); n != 1 {
		t.Errorf("Running() while the slow read blocks = %d, want 1", n)
	}
	select {
	case <-got:
		t.Fatal("Get returned before the provider's first read finished")
	case <-time.After(50 * time.Millisecond):
	}

	if err := os.WriteFile(fifo, ca.PEM, 0o600); err != nil { // unblocks the read
		t.Fatalf("writing the FIFO: %v", err)
	}
	for range 2 {
		select {
		case h := <-got:
			if tr, err := h.Trust(ctxOf(t)); err != nil || tr.Roots == nil {
				t.Errorf("Trust() after the slow read = %+v, %v; want roots", tr, err)
			}
			defer h.Release()
		case <-time.After(10 * time.Second):
			t.Fatal("Get did not return after the first read finished")
		}
	}
}
