// Package certprovider runs the certificate providers of the xDS bootstrap's
// certificate_providers (gRFC A29). This library's own file_watcher reads an
// identity certificate chain, its private key and either a root bundle from
// PEM files or a SPIFFE trust bundle map (gRFC A87), and re-reads them every
// refresh_interval, so that rotated files reach new TLS handshakes without a
// restart. Any other plugin is one registered with grpc-go's certprovider
// registry: its providers are built from the config the bootstrap parsed,
// and their key material is read when a handshake needs it.
//
// A Store shares one running provider among every user of the same
// configuration (reference counted): the first Get or GetPlugin starts it,
// the last Release stops it (a file_watcher's goroutine is waited for, a
// plugin's provider is closed). Both kinds are used through one Handle.
package certprovider

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
)

// Identity is the certificate chain and private key a provider serves
// with: a file_watcher's from certificate_file and private_key_file, a
// plugin's from its key material. Immutable.
type Identity struct {
	// Certs holds the chains and keys, each Leaf parsed: one for a
	// file_watcher, those of the key material for a plugin.
	Certs []tls.Certificate
	// NotAfter is when the leaf certificate expires (for a plugin's, the
	// earliest of the leaves).
	NotAfter time.Time
}

// Trust is what a provider verifies peers with: the roots of
// ca_certificate_file (or of a plugin's key material), or, when
// spiffe_trust_bundle_map_file is set (or the key material has a bundle
// map), the SPIFFE bundle map (gRFC A87), never both. Immutable.
type Trust struct {
	// Roots are the trusted roots; nil when SPIFFE is set.
	Roots *x509.CertPool
	// SPIFFE is the trust bundle map; nil when the provider has none.
	SPIFFE *BundleMap
	// NotAfter is when the earliest-expiring root (of Roots, or of any
	// bundle of SPIFFE) expires; zero when there is none (an empty map) or
	// it is not known (a plugin's Roots: an x509.CertPool does not list its
	// certificates).
	NotAfter time.Time
}

// Store hands out shared, reference-counted providers. Its methods are safe
// for concurrent use. The zero value is not usable; call NewStore.
type Store struct {
	warnf func(format string, args ...any) // immutable

	mu        sync.Mutex
	providers map[bootstrap.FileWatcherConfig]*provider // guarded by mu; running file_watchers
	plugins   map[pluginKey]*plugin                     // guarded by mu; running plugin providers
}

// NewStore returns an empty Store. warnf, if not nil, is told when a
// running provider fails to re-read its files (it keeps the last good key
// material).
func NewStore(warnf func(format string, args ...any)) *Store {
	if warnf == nil {
		warnf = func(string, ...any) {}
	}
	return &Store{warnf: warnf, providers: make(map[bootstrap.FileWatcherConfig]*provider), plugins: make(map[pluginKey]*plugin)}
}

// Get returns a handle on the provider for cfg. If none is running, it
// starts one: the files are read before Get returns (a failure is reported by
// Handle.Identity and Handle.Trust, not here) and re-read every cfg.RefreshInterval
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
	return &Handle{s: s, r: p}
}

// Running returns how many providers (file_watchers and plugins) are
// running; for tests.
func (s *Store) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.providers) + len(s.plugins)
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

// release drops one reference on r and stops it when it was the last.
func (s *Store) release(r running) {
	s.mu.Lock()
	var last bool
	switch r := r.(type) {
	case *provider:
		r.refs--
		if last = r.refs == 0; last {
			delete(s.providers, r.cfg)
		}
	case *plugin:
		r.refs--
		if last = r.refs == 0; last && s.plugins[r.key] == r {
			delete(s.plugins, r.key)
		}
	}
	s.mu.Unlock()
	if last {
		r.stop() // outside the lock: it waits for a goroutine, or calls the plugin
	}
}

// running is a provider a Store runs: a file_watcher (*provider) or a
// plugin's (*plugin).
type running interface {
	identity(ctx context.Context) (*Identity, error)
	trust(ctx context.Context) (*Trust, error)
	// stop ends the provider; called once, by the last release.
	stop()
}

// Handle is one reference on a running provider, of either kind.
type Handle struct {
	s       *Store  // immutable
	r       running // immutable
	release sync.Once
}

// Identity returns the provider's current certificate and key, or why it
// has none. A file_watcher returns what it read last time it succeeded, or
// why it has none (no certificate_file, or no read of it ever succeeded),
// without I/O, lock or wait. A plugin's provider is asked for its key
// material, which may wait (until ctx is done) for its first material.
func (h *Handle) Identity(ctx context.Context) (*Identity, error) { return h.r.identity(ctx) }

// Trust returns the roots or SPIFFE bundle map peers are verified with, or
// why there are none; see Identity. A file_watcher's come from
// spiffe_trust_bundle_map_file or ca_certificate_file.
func (h *Handle) Trust(ctx context.Context) (*Trust, error) { return h.r.trust(ctx) }

// Release drops the reference; the provider stops with its last reference.
// Later calls do nothing.
func (h *Handle) Release() { h.release.Do(func() { h.s.release(h.r) }) }

// provider is one running file_watcher: a goroutine that re-reads the files
// every refresh interval. The identity (certificate and key) and the trust
// (roots or SPIFFE bundle map) are read and kept apart: a broken bundle map
// does not take the identity away from a chain that uses only the identity,
// and each keeps its last good value when a re-read fails.
type provider struct {
	cfg   bootstrap.FileWatcherConfig // immutable
	warnf func(format string, args ...any)
	refs  int // guarded by Store.mu

	curIdentity atomic.Pointer[state[Identity]] // never nil once started is closed
	curTrust    atomic.Pointer[state[Trust]]    // never nil once started is closed

	// Only touched by start and then by the provider's goroutine.
	lastCert, lastKey, lastTrust []byte    // the contents of the last good reads
	lastErr                      [2]string // the last read error logged, identity then trust, to log each once

	started chan struct{} // closed by start once the first read is done
	quit    chan struct{} // closed by stop
	done    chan struct{} // closed when the goroutine has exited
}

// state is the result of the latest good read of a part, or of the first
// failed one. Immutable.
type state[T any] struct {
	v   *T
	err error
}

// defaultRefresh is the refresh interval when none is given, the
// bootstrap's default.
const defaultRefresh = 10 * time.Minute

// ErrNotConfigured is the cause of the error of Handle.Identity or
// Handle.Trust when the configuration has no file for that part.
var ErrNotConfigured = errors.New("not configured")

func newProvider(cfg bootstrap.FileWatcherConfig, warnf func(string, ...any)) *provider {
	return &provider{cfg: cfg, warnf: warnf, started: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
}

// start reads the files once and starts the goroutine that re-reads them.
// Called once, by the Get that created p, without the Store's lock.
func (p *provider) start() {
	p.refresh()
	go p.run()
	close(p.started)
}

// stop stops the goroutine and waits for it. The last reference is
// released after the Get that created p returned, so p has started.
func (p *provider) stop() {
	close(p.quit)
	<-p.done
}

// identity returns the last good identity, or why there is none.
func (p *provider) identity(context.Context) (*Identity, error) {
	st := p.curIdentity.Load()
	return st.v, st.err
}

// trust returns the last good trust, or why there is none.
func (p *provider) trust(context.Context) (*Trust, error) {
	st := p.curTrust.Load()
	return st.v, st.err
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
		p.refresh()
	}
}

// refresh reads both parts and publishes what changed. A part without a
// file is read (to record why it is missing) only the first time.
func (p *provider) refresh() {
	if p.cfg.CertificateFile != "" || p.curIdentity.Load() == nil {
		id, err := p.readIdentity()
		update(&p.curIdentity, id, err, "identity", &p.lastErr[0], p.warnf)
	}
	if p.cfg.CACertificateFile != "" || p.cfg.SPIFFETrustBundleMapFile != "" || p.curTrust.Load() == nil {
		tr, err := p.readTrust()
		update(&p.curTrust, tr, err, "trust", &p.lastErr[1], p.warnf)
	}
}

// update publishes the result of reading one part into st: a new value
// replaces the old; an error is kept only while there never was a value,
// and is logged (once per distinct error) when an older value stays in
// use. A nil v with a nil error means "unchanged".
func update[T any](st *atomic.Pointer[state[T]], v *T, err error, part string, lastErr *string, warnf func(string, ...any)) {
	cur := st.Load()
	switch {
	case err == nil && v != nil:
		*lastErr = ""
		st.Store(&state[T]{v: v})
	case err == nil:
		*lastErr = ""
	case cur != nil && cur.v != nil:
		if msg := err.Error(); msg != *lastErr {
			*lastErr = msg
			warnf("certprovider: file_watcher: re-reading the %s files failed, keeping the previous ones: %v", part, err)
		}
	default:
		st.Store(&state[T]{err: fmt.Errorf("certprovider: file_watcher: %w", err)})
	}
}

// readIdentity reads certificate_file and private_key_file. It returns nil,
// nil when they are unchanged since the last good read. A certificate and
// key that do not match (a rotation caught half way) are an error, so the
// previous pair is kept.
func (p *provider) readIdentity() (*Identity, error) {
	if p.cfg.CertificateFile == "" {
		return nil, fmt.Errorf("no certificate_file: %w", ErrNotConfigured)
	}
	cert, err := os.ReadFile(p.cfg.CertificateFile)
	if err != nil {
		return nil, fmt.Errorf("certificate_file: %w", err)
	}
	key, err := os.ReadFile(p.cfg.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("private_key_file: %w", err)
	}
	if p.curIdentity.Load() != nil && bytes.Equal(cert, p.lastCert) && bytes.Equal(key, p.lastKey) {
		return nil, nil
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("certificate_file %q, private_key_file %q: %w", p.cfg.CertificateFile, p.cfg.PrivateKeyFile, err)
	}
	p.lastCert, p.lastKey = cert, key
	return &Identity{Certs: []tls.Certificate{pair}, NotAfter: pair.Leaf.NotAfter}, nil
}

// readTrust reads spiffe_trust_bundle_map_file if it is set (gRFC A87:
// ca_certificate_file is then ignored), else ca_certificate_file. It
// returns nil, nil when the file is unchanged since the last good read. A
// file that does not parse (one caught half written, for example) is an
// error, so the previous trust is kept.
func (p *provider) readTrust() (*Trust, error) {
	field, file := "ca_certificate_file", p.cfg.CACertificateFile
	if p.cfg.SPIFFETrustBundleMapFile != "" {
		field, file = "spiffe_trust_bundle_map_file", p.cfg.SPIFFETrustBundleMapFile
	}
	if file == "" {
		return nil, fmt.Errorf("neither ca_certificate_file nor spiffe_trust_bundle_map_file: %w", ErrNotConfigured)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if p.curTrust.Load() != nil && bytes.Equal(data, p.lastTrust) {
		return nil, nil
	}
	var tr *Trust
	if p.cfg.SPIFFETrustBundleMapFile != "" {
		tr, err = spiffeTrust(data)
	} else {
		tr, err = caTrust(data)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", field, file, err)
	}
	p.lastTrust = data
	return tr, nil
}

// caTrust parses the PEM roots of a ca_certificate_file.
func caTrust(data []byte) (*Trust, error) {
	tr := &Trust{Roots: x509.NewCertPool()}
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			continue // as x509.CertPool.AppendCertsFromPEM does
		}
		tr.Roots.AddCert(cert)
		tr.NotAfter = earliest(tr.NotAfter, cert.NotAfter)
	}
	if tr.NotAfter.IsZero() {
		return nil, errNoCerts
	}
	return tr, nil
}

// spiffeTrust parses a SPIFFE trust bundle map.
func spiffeTrust(data []byte) (*Trust, error) {
	m, err := ParseBundleMap(data)
	if err != nil {
		return nil, err
	}
	return &Trust{SPIFFE: m, NotAfter: m.NotAfter()}, nil
}

// earliest returns the earlier of a and b; a zero a counts as later.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

var errNoCerts = errors.New("no PEM certificate found")
