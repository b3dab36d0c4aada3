// Package certprovider runs the certificate providers of the xDS bootstrap's
// certificate_providers (gRFC A29): file_watcher instances that read an
// identity certificate chain, its private key and a root bundle from PEM
// files and re-read them every refresh_interval, so that rotated files reach
// new TLS handshakes without a restart.
//
// A Store shares one running provider among every user of the same
// configuration (reference counted): the first Get starts it, the last
// Release stops it and waits for its goroutine.
package certprovider

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxyless-grpc/xds/bootstrap"
)

// KeyMaterial is what a provider read last time it succeeded. Immutable.
type KeyMaterial struct {
	// Certs holds the identity certificate chain and key; empty when the
	// provider has no certificate_file.
	Certs []tls.Certificate
	// Roots are the trusted roots; nil when the provider has no
	// ca_certificate_file.
	Roots *x509.CertPool
}

// Store hands out shared, reference-counted providers. Its methods are safe
// for concurrent use. The zero value is not usable; call NewStore.
type Store struct {
	warnf func(format string, args ...any) // immutable

	mu        sync.Mutex
	providers map[bootstrap.FileWatcherConfig]*provider // guarded by mu; running providers
}

// NewStore returns an empty Store. warnf, if not nil, is told when a
// running provider fails to re-read its files (it keeps the last good key
// material).
func NewStore(warnf func(format string, args ...any)) *Store {
	if warnf == nil {
		warnf = func(string, ...any) {}
	}
	return &Store{warnf: warnf, providers: make(map[bootstrap.FileWatcherConfig]*provider)}
}

// Get returns a handle on the provider for cfg. If none is running, it
// starts one: the files are read before Get returns (a failure is reported by
// Handle.KeyMaterial, not here) and re-read every cfg.RefreshInterval
// (a non-positive interval means 10 minutes). The caller must Release the
// handle.
//
// The files are read without holding the Store's lock: a Get of another
// configuration does not wait for this one's I/O, and a concurrent Get of
// the same configuration waits for the first read of the provider it
// shares.
func (s *Store) Get(cfg bootstrap.FileWatcherConfig) *Handle {
	s.mu.Lock()
	p := s.providers[cfg]
	created := p == nil
	if created {
		p = newProvider(cfg, s.warnf)
		s.providers[cfg] = p
	}
	p.refs++
	s.mu.Unlock()
	if created {
		p.start()
	}
	<-p.started
	return &Handle{s: s, p: p}
}

// Running returns how many providers are running; for tests.
func (s *Store) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.providers)
}

// Refs returns how many handles on the provider for cfg are held; 0 means
// it is not running. For tests.
func (s *Store) Refs(cfg bootstrap.FileWatcherConfig) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.providers[cfg]; p != nil {
		return p.refs
	}
	return 0
}

// release drops one reference on p and stops it when it was the last.
func (s *Store) release(p *provider) {
	s.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(s.providers, p.cfg)
	}
	s.mu.Unlock()
	if last {
		p.stop() // outside the lock: it waits for the provider's goroutine
	}
}

// Handle is one reference on a running provider.
type Handle struct {
	s       *Store    // immutable
	p       *provider // immutable
	release sync.Once
}

// KeyMaterial returns the key material the provider read last time it
// succeeded, or the error of its first read if none ever did. It does no
// I/O and takes no lock.
func (h *Handle) KeyMaterial() (*KeyMaterial, error) {
	st := h.p.state.Load()
	return st.km, st.err
}

// Release drops the reference; the provider stops with its last reference.
// Later calls do nothing.
func (h *Handle) Release() { h.release.Do(func() { h.s.release(h.p) }) }

// provider is one running file_watcher: a goroutine that re-reads the files
// every refresh interval.
type provider struct {
	cfg   bootstrap.FileWatcherConfig // immutable
	warnf func(format string, args ...any)
	refs  int // guarded by Store.mu

	state atomic.Pointer[providerState] // never nil once started is closed

	// Only touched by start and then by the provider's goroutine.
	lastCert, lastKey, lastCA []byte
	lastErr                   string // the last read error logged, to log each once

	started chan struct{} // closed by start once the first read is done
	quit    chan struct{} // closed by stop
	done    chan struct{} // closed when the goroutine has exited
}

// providerState is the result of the latest good read, or of the first
// failed one. Immutable.
type providerState struct {
	km  *KeyMaterial
	err error
}

// defaultRefresh is the refresh interval when none is given, the
// bootstrap's default.
const defaultRefresh = 10 * time.Minute

func newProvider(cfg bootstrap.FileWatcherConfig, warnf func(string, ...any)) *provider {
	return &provider{cfg: cfg, warnf: warnf, started: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
}

// start reads the files once and starts the goroutine that re-reads them.
// Called once, by the Get that created p, without the Store's lock.
func (p *provider) start() {
	km, err := p.read()
	if err != nil {
		err = fmt.Errorf("certprovider: file_watcher: %w", err)
	}
	p.state.Store(&providerState{km: km, err: err})
	go p.run()
	close(p.started)
}

// stop stops the goroutine and waits for it. The last reference is
// released after the Get that created p returned, so p has started.
func (p *provider) stop() {
	close(p.quit)
	<-p.done
}

// run re-reads the files every refresh interval until stop.
func (p *provider) run() {
	defer close(p.done)
	d := p.cfg.RefreshInterval
	if d <= 0 {
		d = defaultRefresh
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
		}
		km, err := p.read()
		if err != nil {
			if msg := err.Error(); msg != p.lastErr {
				p.lastErr = msg
				if p.state.Load().km != nil {
					p.warnf("certprovider: file_watcher: re-reading the files failed, keeping the previous certificates: %v", err)
				}
			}
			if p.state.Load().km == nil {
				p.state.Store(&providerState{err: fmt.Errorf("certprovider: file_watcher: %w", err)})
			}
			continue
		}
		p.lastErr = ""
		if km != nil {
			p.state.Store(&providerState{km: km})
		}
	}
}

// read reads the files. It returns nil, nil when they are unchanged since
// the last good read. A certificate and key that do not match (a rotation
// caught half way) are an error, so the previous pair is kept.
func (p *provider) read() (*KeyMaterial, error) {
	var cert, key, ca []byte
	var err error
	if p.cfg.CertificateFile != "" {
		if cert, err = os.ReadFile(p.cfg.CertificateFile); err != nil {
			return nil, fmt.Errorf("certificate_file: %w", err)
		}
		if key, err = os.ReadFile(p.cfg.PrivateKeyFile); err != nil {
			return nil, fmt.Errorf("private_key_file: %w", err)
		}
	}
	if p.cfg.CACertificateFile != "" {
		if ca, err = os.ReadFile(p.cfg.CACertificateFile); err != nil {
			return nil, fmt.Errorf("ca_certificate_file: %w", err)
		}
	}
	if p.state.Load() != nil && bytes.Equal(cert, p.lastCert) && bytes.Equal(key, p.lastKey) && bytes.Equal(ca, p.lastCA) {
		return nil, nil
	}
	km := &KeyMaterial{}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("certificate_file %q, private_key_file %q: %w", p.cfg.CertificateFile, p.cfg.PrivateKeyFile, err)
		}
		km.Certs = []tls.Certificate{pair}
	}
	if ca != nil {
		km.Roots = x509.NewCertPool()
		if !km.Roots.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("ca_certificate_file %q: %w", p.cfg.CACertificateFile, errNoCerts)
		}
	}
	p.lastCert, p.lastKey, p.lastCA = cert, key, ca
	return km, nil
}

var errNoCerts = errors.New("no PEM certificate found")
