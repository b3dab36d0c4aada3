package metrics

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// TLS metric names.
const (
	// TLSHandshakes counts the TLS handshakes of filter chains with a
	// DownstreamTlsContext, by outcome: gRFC A118's server handshake count,
	// with A118's result in AttrTLSResult, plus the listener, the filter
	// chain and this library's outcome (AttrTLSOutcome).
	TLSHandshakes = "grpc.server.tls.handshakes"
	// TLSCertificateTimeToExpiry is a gauge: the seconds until the identity
	// certificate a filter chain serves with expires (negative once it
	// has). Reported for the chains whose certificate provider is running,
	// i.e. once the chain has had a handshake.
	TLSCertificateTimeToExpiry = "grpc.xds_server.tls.certificate.time_to_expiry"
	// TLSRootTimeToExpiry is a gauge: the seconds until the earliest-expiring
	// root that verifies a filter chain's clients expires (a CA of
	// ca_certificate_file, or an authority of any bundle of a SPIFFE bundle
	// map). Reported for mutual TLS chains, as TLSCertificateTimeToExpiry,
	// except when the roots are a certificate provider plugin's
	// x509.CertPool, which does not list its certificates.
	TLSRootTimeToExpiry = "grpc.xds_server.tls.root.time_to_expiry"
)

// TLS attribute keys.
const (
	// AttrFilterChain is the name of the filter chain in the Listener ("" for
	// an unnamed one).
	AttrFilterChain = "grpc.xds_server.filter_chain"
	// AttrTLSResult is gRFC A118's handshake result: "SUCCESS",
	// "CERTIFICATE_EXPIRED", "CERTIFICATE_AUTHORITY_INVALID", ... (see
	// TLSResult).
	AttrTLSResult = "grpc.tls.handshake.result"
	// AttrTLSOutcome is this library's outcome of a handshake, coarser than
	// AttrTLSResult and with SPIFFE in view: "ok", "no_client_certificate",
	// "unknown_ca", "spiffe_mismatch", "expired" or "other".
	AttrTLSOutcome = "grpc.xds_server.tls.outcome"
)

// TLSResult is the result of one server TLS handshake: an outcome and its
// gRFC A118 result.
type TLSResult int

// The results a handshake is counted under. Each names its AttrTLSOutcome
// and AttrTLSResult values.
const (
	// TLSOK: ok, SUCCESS.
	TLSOK TLSResult = iota
	// TLSNoClientCert: no_client_certificate, CERTIFICATE_VERIFICATION_FAILED
	// (a chain that requires a client certificate got none).
	TLSNoClientCert
	// TLSUnknownCA: unknown_ca, CERTIFICATE_AUTHORITY_INVALID (the client's
	// certificate does not chain to a trusted root).
	TLSUnknownCA
	// TLSSPIFFEMismatch: spiffe_mismatch, CERTIFICATE_VERIFICATION_FAILED
	// (SPIFFE verification, gRFC A87: not exactly one spiffe:// URI SAN, a
	// trust domain the bundle map lacks, or a certificate signed by the root
	// of another trust domain).
	TLSSPIFFEMismatch
	// TLSExpired: expired, CERTIFICATE_EXPIRED.
	TLSExpired
	// TLSNotYetValid: expired, CERTIFICATE_NOT_YET_VALID (outside its
	// validity period, on the other side).
	TLSNotYetValid
	// TLSBadCertificate: other, CERTIFICATE_VERIFICATION_FAILED (any other
	// reason the client's certificate was refused).
	TLSBadCertificate
	// TLSPeerClosed: other, PEER_CONNECTION_CLOSED.
	TLSPeerClosed
	// TLSTimeout: other, HANDSHAKE_TIMEOUT.
	TLSTimeout
	// TLSUnknownFailure: other, UNKNOWN_FAILURE (including a chain whose
	// certificate provider has nothing to serve with).
	TLSUnknownFailure

	numTLSResults
)

// Outcome values of AttrTLSOutcome.
const (
	OutcomeOK                  = "ok"
	OutcomeNoClientCertificate = "no_client_certificate"
	OutcomeUnknownCA           = "unknown_ca"
	OutcomeSPIFFEMismatch      = "spiffe_mismatch"
	OutcomeExpired             = "expired"
	OutcomeOther               = "other"
)

// tlsResultAttrs are the AttrTLSOutcome and AttrTLSResult values of each
// TLSResult.
var tlsResultAttrs = [numTLSResults][2]string{
	TLSOK:             {OutcomeOK, "SUCCESS"},
	TLSNoClientCert:   {OutcomeNoClientCertificate, "CERTIFICATE_VERIFICATION_FAILED"},
	TLSUnknownCA:      {OutcomeUnknownCA, "CERTIFICATE_AUTHORITY_INVALID"},
	TLSSPIFFEMismatch: {OutcomeSPIFFEMismatch, "CERTIFICATE_VERIFICATION_FAILED"},
	TLSExpired:        {OutcomeExpired, "CERTIFICATE_EXPIRED"},
	TLSNotYetValid:    {OutcomeExpired, "CERTIFICATE_NOT_YET_VALID"},
	TLSBadCertificate: {OutcomeOther, "CERTIFICATE_VERIFICATION_FAILED"},
	TLSPeerClosed:     {OutcomeOther, "PEER_CONNECTION_CLOSED"},
	TLSTimeout:        {OutcomeOther, "HANDSHAKE_TIMEOUT"},
	TLSUnknownFailure: {OutcomeOther, "UNKNOWN_FAILURE"},
}

// Outcome returns r's AttrTLSOutcome value.
func (r TLSResult) Outcome() string { return tlsResultAttrs[r][0] }

// A118 returns r's AttrTLSResult value.
func (r TLSResult) A118() string { return tlsResultAttrs[r][1] }

// String returns "outcome/A118 result".
func (r TLSResult) String() string { return r.Outcome() + "/" + r.A118() }

// tlsInstruments are the TLS instruments of a Server and the gauges'
// observers. The gauges' callback is registered while at least one observer
// is (so that a stopped server leaves nothing registered on the provider).
type tlsInstruments struct {
	handshakes metric.Int64Counter
	cert, root metric.Int64ObservableGauge // nil when they could not be created
	meter      metric.Meter

	// regMu serializes registering and unregistering the callback. The
	// callback never takes it: the SDK holds its own lock while calling
	// the callback and while unregistering one.
	regMu sync.Mutex
	reg   metric.Registration // guarded by regMu; nil without observers
	n     int                 // guarded by regMu; observers added and not yet removed

	mu        sync.Mutex
	observers map[observerKey]*observer // guarded by mu; the latest per listener and chain
}

type observerKey struct{ listener, chain string }

// observer reports the expiry of one filter chain.
type observer struct {
	f     func() (cert, root time.Time) // immutable
	attrs metric.MeasurementOption      // immutable; the listener and the chain
}

// newTLSInstruments creates the instruments on m, appending the errors of
// those it cannot create to errs.
func newTLSInstruments(m metric.Meter, errs *[]error) *tlsInstruments {
	keep := func(err error) {
		if err != nil {
			*errs = append(*errs, err)
		}
	}
	t := &tlsInstruments{meter: m, observers: make(map[observerKey]*observer)}
	var err error
	t.handshakes, err = m.Int64Counter(TLSHandshakes, metric.WithUnit("{handshake}"),
		metric.WithDescription("EXPERIMENTAL: TLS handshakes of the server's filter chains, by result (gRFC A118)."))
	keep(err)
	cert, err := m.Int64ObservableGauge(TLSCertificateTimeToExpiry, metric.WithUnit("s"),
		metric.WithDescription("Seconds until the identity certificate of a filter chain expires."))
	keep(err)
	root, err2 := m.Int64ObservableGauge(TLSRootTimeToExpiry, metric.WithUnit("s"),
		metric.WithDescription("Seconds until the earliest-expiring root that verifies a filter chain's clients expires."))
	keep(err2)
	if err == nil && err2 == nil {
		t.cert, t.root = cert, root
	}
	return t
}

// add registers o for the chain key, replacing an older one of the same
// key, and registers the callback with the first observer.
func (t *tlsInstruments) add(key observerKey, o *observer) {
	if t.cert == nil {
		return
	}
	t.regMu.Lock()
	defer t.regMu.Unlock()
	t.mu.Lock()
	t.observers[key] = o
	t.mu.Unlock()
	t.n++
	if t.n == 1 {
		reg, err := t.meter.RegisterCallback(t.observe, t.cert, t.root)
		if err != nil {
			logger.Errorf("xds: registering the TLS expiry gauges: %v", err)
		}
		t.reg = reg
	}
}

// remove unregisters o (unless a newer observer replaced it) and the
// callback with the last observer.
func (t *tlsInstruments) remove(key observerKey, o *observer) {
	if t.cert == nil {
		return
	}
	t.regMu.Lock()
	defer t.regMu.Unlock()
	t.mu.Lock()
	if t.observers[key] == o {
		delete(t.observers, key)
	}
	t.mu.Unlock()
	t.n--
	if t.n == 0 && t.reg != nil {
		if err := t.reg.Unregister(); err != nil {
			logger.Errorf("xds: unregistering the TLS expiry gauges: %v", err)
		}
		t.reg = nil
	}
}

// observe is the gauges' callback. The observers' functions are called
// without holding mu.
func (t *tlsInstruments) observe(_ context.Context, obs metric.Observer) error {
	t.mu.Lock()
	list := make([]*observer, 0, len(t.observers))
	for _, o := range t.observers {
		list = append(list, o)
	}
	t.mu.Unlock()
	now := time.Now()
	for _, o := range list {
		cert, root := o.f()
		if !cert.IsZero() {
			obs.ObserveInt64(t.cert, secondsUntil(now, cert), o.attrs)
		}
		if !root.IsZero() {
			obs.ObserveInt64(t.root, secondsUntil(now, root), o.attrs)
		}
	}
	return nil
}

// secondsUntil returns the whole seconds from now to t, negative when t is
// past.
func secondsUntil(now, t time.Time) int64 { return int64(t.Sub(now) / time.Second) }

// TLSChain returns the TLS recorder of the filter chain named chain on this
// listener. Create it once per filter chain in service (not per
// handshake).
func (l *Listener) TLSChain(chain string) *TLSChain {
	if l == nil || l.s.tls == nil {
		return nil
	}
	c := attribute.String(AttrFilterChain, chain)
	tc := &TLSChain{
		t:     l.s.tls,
		key:   observerKey{listener: l.addr.Value.AsString(), chain: chain},
		attrs: metric.WithAttributeSet(attribute.NewSet(l.addr, c)),
	}
	for r := range numTLSResults {
		tc.results[r] = addWith(l.addr, c, attribute.String(AttrTLSOutcome, r.Outcome()), attribute.String(AttrTLSResult, r.A118()))
	}
	return tc
}

// TLSChain records the TLS metrics of one filter chain. Immutable; safe for
// concurrent use. A nil *TLSChain records nothing.
type TLSChain struct {
	t       *tlsInstruments
	key     observerKey
	attrs   metric.MeasurementOption // the listener and the chain
	results [numTLSResults][]metric.AddOption
}

// Handshake counts a handshake with result r.
func (c *TLSChain) Handshake(r TLSResult) {
	if c != nil && c.t.handshakes != nil && r >= 0 && r < numTLSResults {
		c.t.handshakes.Add(context.Background(), 1, c.results[r]...)
	}
}

// ObserveExpiry makes the expiry gauges report f's times for this chain
// (a zero time is not reported) until the returned function is called. f
// is called on every collection, on the collector's goroutine: it must be
// quick and must not call back into the metrics. A later ObserveExpiry for
// a chain of the same listener and name replaces this one.
func (c *TLSChain) ObserveExpiry(f func() (cert, root time.Time)) (stop func()) {
	if c == nil {
		return func() {}
	}
	o := &observer{f: f, attrs: c.attrs}
	c.t.add(c.key, o)
	var once sync.Once
	return func() { once.Do(func() { c.t.remove(c.key, o) }) }
}
