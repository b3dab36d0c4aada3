package certprovider

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// BundleMap is a SPIFFE trust bundle map (gRFC A87): for each trust domain,
// the X.509 authorities that sign its SVIDs. Immutable.
type BundleMap struct {
	bundles  map[spiffeid.TrustDomain]*spiffebundle.Bundle
	pools    map[spiffeid.TrustDomain]*x509.CertPool
	domains  []spiffeid.TrustDomain // sorted by name
	notAfter time.Time              // earliest NotAfter of every authority; zero without any
}

// ParseBundleMap parses the JSON of a spiffe_trust_bundle_map_file:
//
//	{"trust_domains": {"example.org": <a SPIFFE bundle: a JWK set>, ...}}
//
// Each bundle is parsed by go-spiffe (keys with use "x509-svid" carry one
// certificate in x5c; other uses are accepted and play no part in X.509
// verification). A map whose trust_domains member is missing, a trust domain
// name that is not valid, or a bundle that does not parse makes the whole
// map invalid (gRFC A87 ignores a bundle with a bad entry as a whole; this
// library refuses the map, so that a half-written file is never used). An
// empty map is valid and trusts nobody.
func ParseBundleMap(data []byte) (*BundleMap, error) {
	var doc struct {
		TrustDomains map[string]json.RawMessage `json:"trust_domains"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("SPIFFE bundle map: %w", err)
	}
	if doc.TrustDomains == nil {
		return nil, errNoTrustDomains
	}
	m := newBundleMap(len(doc.TrustDomains))
	for name, raw := range doc.TrustDomains {
		td, err := trustDomain(name)
		if err != nil {
			return nil, err
		}
		b, err := spiffebundle.Parse(td, raw)
		if err != nil {
			return nil, fmt.Errorf("SPIFFE bundle map: trust domain %q: %w", name, err)
		}
		m.add(td, b)
	}
	m.sort()
	return m, nil
}

// NewBundleMap returns the map of the bundles of a certificate provider
// plugin (grpc-go's KeyMaterial.SPIFFEBundleMap), keyed by trust domain
// name, checked as ParseBundleMap checks a file: a name that is not a valid
// bare trust domain, a nil bundle or a bundle of another trust domain makes
// the whole map invalid. An empty map is valid and trusts nobody. The
// bundles are the plugin's: the map keeps them and does not modify them.
func NewBundleMap(bundles map[string]*spiffebundle.Bundle) (*BundleMap, error) {
	m := newBundleMap(len(bundles))
	for name, b := range bundles {
		td, err := trustDomain(name)
		if err != nil {
			return nil, err
		}
		switch {
		case b == nil:
			return nil, fmt.Errorf("SPIFFE bundle map: trust domain %q: no bundle", name)
		case b.TrustDomain() != td:
			return nil, fmt.Errorf("SPIFFE bundle map: trust domain %q: the bundle is of trust domain %q", name, b.TrustDomain().Name())
		}
		m.add(td, b)
	}
	m.sort()
	return m, nil
}

var errNoTrustDomains = errors.New(`SPIFFE bundle map: no "trust_domains" member`)

// trustDomain parses the name of a trust domain of a map.
func trustDomain(name string) (spiffeid.TrustDomain, error) {
	td, err := spiffeid.TrustDomainFromString(name)
	if err != nil {
		return td, fmt.Errorf("SPIFFE bundle map: trust domain %q: %w", name, err)
	}
	if td.Name() != name {
		// A spiffe:// form or other spelling: the map names domains.
		return td, fmt.Errorf("SPIFFE bundle map: trust domain %q: want a bare trust domain name such as %q", name, td.Name())
	}
	return td, nil
}

func newBundleMap(n int) *BundleMap {
	return &BundleMap{
		bundles: make(map[spiffeid.TrustDomain]*spiffebundle.Bundle, n),
		pools:   make(map[spiffeid.TrustDomain]*x509.CertPool, n),
	}
}

// add adds the bundle b of td; only while the map is being made.
func (m *BundleMap) add(td spiffeid.TrustDomain, b *spiffebundle.Bundle) {
	pool := x509.NewCertPool()
	for _, c := range b.X509Authorities() {
		pool.AddCert(c)
		m.notAfter = earliest(m.notAfter, c.NotAfter)
	}
	m.bundles[td], m.pools[td] = b, pool
	m.domains = append(m.domains, td)
}

// sort sorts the trust domains; once the map is made.
func (m *BundleMap) sort() {
	slices.SortFunc(m.domains, func(a, b spiffeid.TrustDomain) int { return a.Compare(b) })
}

// Bundle returns the bundle of td; nil when the map has none.
func (m *BundleMap) Bundle(td spiffeid.TrustDomain) *spiffebundle.Bundle { return m.bundles[td] }

// Roots returns the X.509 authorities of td as a pool; nil when the map has
// no bundle for td. The pool must not be modified.
func (m *BundleMap) Roots(td spiffeid.TrustDomain) *x509.CertPool { return m.pools[td] }

// TrustDomains returns the trust domains of the map, sorted by name.
func (m *BundleMap) TrustDomains() []spiffeid.TrustDomain { return slices.Clone(m.domains) }

// NotAfter returns when the earliest-expiring authority of any bundle
// expires; zero when the map has no X.509 authority.
func (m *BundleMap) NotAfter() time.Time { return m.notAfter }
