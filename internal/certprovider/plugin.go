package certprovider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials/tls/certprovider"
)

// pluginKey identifies a plugin provider: the config in the form the
// plugin's ParseConfig keeps it (BuildableConfig.String: the plugin's name
// and its canonical config, the key grpc-go shares its own providers by) and
// what is wanted of it (certificate name, identity, roots). Two instances of
// the bootstrap with the same plugin and config share one provider.
type pluginKey struct {
	config string
	opts   certprovider.BuildOptions
}

// GetPlugin returns a handle on the provider that bc builds with opts. If
// none is running, it builds one (bc.Build), without holding the Store's
// lock; a concurrent GetPlugin of the same key waits for that build and
// shares its result. A build that fails is reported to every GetPlugin that
// waited for it, and the next GetPlugin builds again. The caller must
// Release the handle; the provider is closed with the last release.
func (s *Store) GetPlugin(bc *certprovider.BuildableConfig, opts certprovider.BuildOptions) (*Handle, error) {
	k := pluginKey{config: bc.String(), opts: opts}
	s.mu.Lock()
	p := s.plugins[k]
	created := p == nil
	if created {
		name, _, _ := strings.Cut(k.config, ":")
		p = &plugin{key: k, name: name, started: make(chan struct{})}
		s.plugins[k] = p
	}
	p.refs++
	s.mu.Unlock()
	if created {
		p.build(bc)
	}
	<-p.started
	if p.err != nil {
		s.release(p)
		return nil, p.err
	}
	return &Handle{s: s, r: p}, nil
}

// PluginRefs returns how many handles on the provider that bc builds with
// opts are held; 0 means it is not running. For tests.
func (s *Store) PluginRefs(bc *certprovider.BuildableConfig, opts certprovider.BuildOptions) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.plugins[pluginKey{config: bc.String(), opts: opts}]; p != nil {
		return p.refs
	}
	return 0
}

// plugin is one provider of a plugin registered with grpc-go. Its key
// material is converted once per KeyMaterial the provider returns: a
// rotation is a new KeyMaterial, which new handshakes see.
type plugin struct {
	key  pluginKey // immutable
	name string    // immutable; the plugin's name, for errors
	refs int       // guarded by Store.mu

	// Written once by build, before started is closed; immutable after.
	prov certprovider.Provider
	err  error

	started chan struct{} // closed by build

	// last is the conversion of the KeyMaterial the provider returned last;
	// nil before the first.
	last atomic.Pointer[material]
}

// material is one KeyMaterial of a provider, converted. Immutable.
type material struct {
	km       *certprovider.KeyMaterial
	identity *Identity
	idErr    error
	trust    *Trust
	trustErr error
}

// build builds the provider. Called once, by the GetPlugin that created p,
// without the Store's lock.
func (p *plugin) build(bc *certprovider.BuildableConfig) {
	defer close(p.started)
	prov, err := bc.Build(p.key.opts)
	switch {
	case err != nil:
		p.err = fmt.Errorf("certprovider: plugin %q: building a provider: %w", p.name, err)
	case prov == nil:
		p.err = fmt.Errorf("certprovider: plugin %q: building a provider gave none", p.name)
	default:
		p.prov = prov
	}
}

// stop closes the provider. Called once, with the last reference; a build
// that failed left nothing to close.
func (p *plugin) stop() {
	if p.prov != nil {
		p.prov.Close()
	}
}

func (p *plugin) identity(ctx context.Context) (*Identity, error) {
	m, err := p.material(ctx)
	if err != nil {
		return nil, err
	}
	return m.identity, m.idErr
}

func (p *plugin) trust(ctx context.Context) (*Trust, error) {
	m, err := p.material(ctx)
	if err != nil {
		return nil, err
	}
	return m.trust, m.trustErr
}

// material asks the provider for its key material, waiting until ctx is
// done for the first, and returns it converted.
func (p *plugin) material(ctx context.Context) (*material, error) {
	km, err := p.prov.KeyMaterial(ctx)
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil, fmt.Errorf("certprovider: plugin %q: no key material before the handshake's deadline: %w", p.name, err)
	case err != nil:
		return nil, fmt.Errorf("certprovider: plugin %q: %w", p.name, err)
	case km == nil:
		return nil, fmt.Errorf("certprovider: plugin %q: the provider returned no key material", p.name)
	}
	if m := p.last.Load(); m != nil && m.km == km {
		return m, nil
	}
	m := convert(km)
	m.idErr = wrapPart(p.name, m.idErr)
	m.trustErr = wrapPart(p.name, m.trustErr)
	p.last.Store(m)
	return m, nil
}

// wrapPart names the plugin in the error of a part of its key material.
func wrapPart(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("certprovider: plugin %q: %w", name, err)
}

// convert converts a plugin's key material into an Identity and a Trust,
// each or why it is missing. km is the provider's and is not modified.
func convert(km *certprovider.KeyMaterial) *material {
	m := &material{km: km}
	m.identity, m.idErr = identityOf(km.Certs)
	m.trust, m.trustErr = trustOf(km)
	return m
}

var (
	errNoIdentity = errors.New("the key material has no identity certificate")
	errNoRoots    = errors.New("the key material has neither roots nor a SPIFFE bundle map")
)

// identityOf returns the identity of a plugin's certificates, with each
// leaf parsed (in a copy), so that handshakes do not parse it again.
// NotAfter is when the first of the leaves expires.
func identityOf(certs []tls.Certificate) (*Identity, error) {
	if len(certs) == 0 {
		return nil, errNoIdentity
	}
	id := &Identity{Certs: make([]tls.Certificate, len(certs))}
	for i, c := range certs {
		if len(c.Certificate) == 0 || c.PrivateKey == nil {
			return nil, fmt.Errorf("identity certificate %d of the key material has no certificate or no private key", i)
		}
		if c.Leaf == nil {
			leaf, err := x509.ParseCertificate(c.Certificate[0])
			if err != nil {
				return nil, fmt.Errorf("identity certificate %d of the key material: %w", i, err)
			}
			c.Leaf = leaf
		}
		id.Certs[i] = c
		id.NotAfter = earliest(id.NotAfter, c.Leaf.NotAfter)
	}
	return id, nil
}

// trustOf returns the trust of a plugin's key material: its SPIFFE bundle
// map when it has one (the roots are then not used, as grpc-go does and as
// gRFC A87 says of file_watcher), else its roots. NotAfter is known for a
// bundle map only: an x509.CertPool does not list its certificates.
func trustOf(km *certprovider.KeyMaterial) (*Trust, error) {
	if km.SPIFFEBundleMap != nil {
		m, err := NewBundleMap(km.SPIFFEBundleMap)
		if err != nil {
			return nil, err
		}
		return &Trust{SPIFFE: m, NotAfter: m.NotAfter()}, nil
	}
	if km.Roots == nil {
		return nil, errNoRoots
	}
	return &Trust{Roots: km.Roots, NotAfter: time.Time{}}, nil
}
