// Package meshmetrics records Istio's standard metrics (istio_requests_total
// and the rest, reporter="destination") for the RPCs an xDS server handles,
// with the 25 labels Envoy's istio_stats gives them on the inbound side, so
// that Istio's dashboards and Kiali see a proxyless server as they see a
// sidecar. The server's side comes from its bootstrap's node metadata, the
// client's from the peer metadata header (Istio's or grpc-go CSM plugin's
// keys) or else its certificate; the server answers a request that carried
// the header with its own.
//
// Cost: the label sets of a connection are built once per :authority and
// peer header (a handful per connection), then once per gRPC status code;
// an RPC allocates its one per-RPC state and whatever the metrics SDK
// allocates.
package meshmetrics

import (
	"context"
	"crypto/x509"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/grpccompat"
)

// MeterName is the instrumentation scope of the mesh metrics.
const MeterName = "github.com/proxyless-grpc/xds/mesh"

// Metric names, as Prometheus shows them.
const (
	RequestsTotal         = "istio_requests_total"
	RequestDuration       = "istio_request_duration_milliseconds"
	RequestBytes          = "istio_request_bytes"
	ResponseBytes         = "istio_response_bytes"
	RequestMessagesTotal  = "istio_request_messages_total"
	ResponseMessagesTotal = "istio_response_messages_total"
)

// Buckets are Envoy's default histogram bounds, which Istio's histograms
// use (Istio sets none).
var Buckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// maxEntries bounds the label sets a connection caches; RPCs beyond them
// build theirs each time.
const maxEntries = 16

// Recorder records the mesh metrics of one xDS server. Safe for concurrent
// use; a nil *Recorder records nothing.
//
// The three counters are observable: an RPC adds to atomic counts of its
// series, which the metrics SDK reads when it collects. A synchronous
// measurement costs the OpenTelemetry SDK time in proportion to its
// attributes (v1.47 normalizes all 25 on every call), the largest part of
// the per-RPC cost; the three histograms cannot be observed, so they stay
// synchronous.
type Recorder struct {
	local    *Local
	reply    metadata.MD // nil without a reply to give
	requests metric.Int64ObservableCounter
	duration metric.Float64Histogram
	reqBytes metric.Int64Histogram
	resBytes metric.Int64Histogram
	reqMsgs  metric.Int64ObservableCounter
	resMsgs  metric.Int64ObservableCounter
	reg      metric.Registration // of the counters' callback; nil if none

	mu       sync.Mutex
	series   map[attribute.Distinct]*series // every label set recorded; guarded by mu
	all      []*series                      // series' values, appended under mu
	list     atomic.Pointer[[]*series]      // a prefix of all, for observe
	overflow *codeOpts                      // for label sets beyond MaxSeries; guarded by mu
}

// MaxSeries bounds the label sets a server records (the peer metadata
// header and :authority are the client's to choose). RPCs with a label set
// beyond it are recorded under the one set {otel.metric.overflow="true"},
// as OpenTelemetry SDKs do past their cardinality limit.
const MaxSeries = 10000

// series is the counts of one label set.
type series struct {
	obs                        []metric.ObserveOption
	requests, reqMsgs, resMsgs atomic.Int64
}

// New returns the recorder of a server whose bootstrap node has id nodeID
// and metadata md, recording into mp. A nil mp returns nil. An instrument
// that cannot be created is returned as an error with the recorder (which
// then uses a no-op one).
func New(mp metric.MeterProvider, nodeID string, md *structpb.Struct) (*Recorder, error) {
	if mp == nil {
		return nil, nil
	}
	m := mp.Meter(MeterName)
	r := &Recorder{local: NewLocal(nodeID, md), series: make(map[attribute.Distinct]*series)}
	if v := r.local.Reply(); v != "" {
		r.reply = metadata.Pairs(HeaderMetadata, v)
		if nodeID != "" {
			r.reply.Append(HeaderMetadataID, nodeID)
		}
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	var err error
	// The OpenTelemetry Prometheus exporter appends _total to counters and
	// a unit's suffix unless the name has it already: these names and
	// units come out as Istio's.
	r.requests, err = m.Int64ObservableCounter(RequestsTotal, metric.WithUnit("{request}"),
		metric.WithDescription("Requests handled (Istio standard metric, reporter=destination)."))
	keep(err)
	r.duration, err = m.Float64Histogram(RequestDuration, metric.WithUnit("ms"), metric.WithExplicitBucketBoundaries(Buckets...),
		metric.WithDescription("Request duration in milliseconds (Istio standard metric)."))
	keep(err)
	r.reqBytes, err = m.Int64Histogram(RequestBytes, metric.WithUnit("By"), metric.WithExplicitBucketBoundaries(Buckets...),
		metric.WithDescription("Request body size in bytes (Istio standard metric)."))
	keep(err)
	r.resBytes, err = m.Int64Histogram(ResponseBytes, metric.WithUnit("By"), metric.WithExplicitBucketBoundaries(Buckets...),
		metric.WithDescription("Response body size in bytes (Istio standard metric)."))
	keep(err)
	r.reqMsgs, err = m.Int64ObservableCounter(RequestMessagesTotal, metric.WithUnit("{message}"),
		metric.WithDescription("gRPC messages received (Istio standard metric)."))
	keep(err)
	r.resMsgs, err = m.Int64ObservableCounter(ResponseMessagesTotal, metric.WithUnit("{message}"),
		metric.WithDescription("gRPC messages sent (Istio standard metric)."))
	keep(err)
	var counters []metric.Observable
	for _, c := range []metric.Int64ObservableCounter{r.requests, r.reqMsgs, r.resMsgs} {
		if c != nil {
			counters = append(counters, c)
		}
	}
	if len(counters) > 0 {
		r.reg, err = m.RegisterCallback(r.observe, counters...)
		keep(err)
	}
	return r, first
}

// observe reports the counts of every series.
func (r *Recorder) observe(_ context.Context, o metric.Observer) error {
	list := r.list.Load()
	if list == nil {
		return nil
	}
	for _, s := range *list {
		if r.requests != nil {
			o.ObserveInt64(r.requests, s.requests.Load(), s.obs...)
		}
		if r.reqMsgs != nil {
			o.ObserveInt64(r.reqMsgs, s.reqMsgs.Load(), s.obs...)
		}
		if r.resMsgs != nil {
			o.ObserveInt64(r.resMsgs, s.resMsgs.Load(), s.obs...)
		}
	}
	return nil
}

// seriesOf returns the counts of the label set set, created on first use.
// Called with r.mu held.
func (r *Recorder) seriesOf(set attribute.Set) *series {
	if s, ok := r.series[set.Equivalent()]; ok {
		return s
	}
	s := &series{obs: []metric.ObserveOption{metric.WithAttributeSet(set)}}
	r.series[set.Equivalent()] = s
	// Readers see a prefix of all: appending never writes below its end.
	r.all = append(r.all, s)
	list := r.all
	r.list.Store(&list)
	return s
}

// Close stops reporting the counters (the server stopped). Nil-safe.
func (r *Recorder) Close() {
	if r != nil && r.reg != nil {
		r.reg.Unregister()
	}
}

// ServerOptions returns the options of the gRPC servers of one filter
// chain: a stats handler that records, and the interceptors that answer
// the peer metadata header; and refused, which records an RPC the chain's
// tap handle refused (gRPC tells its stats handlers nothing of those).
// localCert returns the leaf of the chain's identity certificate (nil
// without TLS). Nil for a nil r.
func (r *Recorder) ServerOptions(localCert func() *x509.Certificate) (opts []grpc.ServerOption, refused func(context.Context, *tap.Info, error)) {
	if r == nil {
		return nil, nil
	}
	h := &handler{r: r, localCert: localCert}
	return []grpc.ServerOption{
		grpc.StatsHandler(h),
		grpc.ChainUnaryInterceptor(h.unary),
		grpc.ChainStreamInterceptor(h.stream),
	}, h.refused
}

// refused records an RPC the tap handle refused with err: one request with
// its status code, no message, no byte, and no time spent (the handle
// answers before the RPC has a stream).
func (h *handler) refused(ctx context.Context, info *tap.Info, err error) {
	cs, _ := ctx.Value(connKey{}).(*connState)
	if cs == nil || cs.h != h {
		return
	}
	var authority, hdr string
	if v := info.Header[":authority"]; len(v) > 0 {
		authority = v[0]
	}
	if v := info.Header[HeaderMetadata]; len(v) > 0 {
		hdr = v[0]
	}
	code := codes.PermissionDenied // what gRPC makes of a plain error from the tap
	if st, ok := status.FromError(err); ok {
		code = st.Code()
	}
	o := cs.lookup(ctx, authority, hdr).opts(h.r, uint32(code))
	o.s.requests.Add(1)
	bg := context.Background()
	if h.r.duration != nil {
		h.r.duration.Record(bg, 0, o.rec...)
	}
	if h.r.reqBytes != nil {
		h.r.reqBytes.Record(bg, 0, o.rec...)
	}
	if h.r.resBytes != nil {
		h.r.resBytes.Record(bg, 0, o.rec...)
	}
}

// handler is the stats handler of one filter chain's servers.
type handler struct {
	r         *Recorder
	localCert func() *x509.Certificate
}

type connKey struct{}
type rpcKey struct{}

// connState is what a connection's RPCs share: who the peer is, and the
// label sets already built.
type connState struct {
	h    *handler
	once sync.Once
	// Set by once, from the first RPC's peer.
	peerID, peerNS, localID string
	mtls                    bool

	entries atomic.Pointer[[]*entry] // copy on write, under mu
	mu      sync.Mutex
}

// entry is the label sets of RPCs with one :authority and peer header.
type entry struct {
	authority, header string
	base              []attribute.KeyValue
	codes             [17]atomic.Pointer[codeOpts]
}

// codeOpts are the series and options of a measurement with one status
// code.
type codeOpts struct {
	s   *series
	rec []metric.RecordOption
}

func newCodeOpts(r *Recorder, base []attribute.KeyValue, code uint32) *codeOpts {
	set := withCodes(base, code)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.series[set.Equivalent()]; !ok && len(r.series) >= MaxSeries {
		if r.overflow == nil {
			over := attribute.NewSet(attribute.Bool("otel.metric.overflow", true))
			r.overflow = &codeOpts{s: r.seriesOf(over), rec: []metric.RecordOption{metric.WithAttributeSet(over)}}
		}
		return r.overflow
	}
	return &codeOpts{s: r.seriesOf(set), rec: []metric.RecordOption{metric.WithAttributeSet(set)}}
}

func (e *entry) opts(r *Recorder, code uint32) *codeOpts {
	if int(code) >= len(e.codes) {
		return newCodeOpts(r, e.base, code)
	}
	if o := e.codes[code].Load(); o != nil {
		return o
	}
	o := newCodeOpts(r, e.base, code)
	e.codes[code].Store(o) // a race builds the same value twice
	return o
}

// rpcState is the context of one RPC, and what it has counted.
type rpcState struct {
	context.Context
	conn     *connState
	entry    atomic.Pointer[entry]
	peerSent bool // set at InHeader, before the handler runs
	inMsgs   atomic.Int64
	outMsgs  atomic.Int64
	inBytes  atomic.Int64
	outBytes atomic.Int64
}

func (s *rpcState) Value(k any) any {
	if k == (rpcKey{}) {
		return s
	}
	return s.Context.Value(k)
}

func rpcOf(ctx context.Context) *rpcState {
	s, _ := ctx.Value(rpcKey{}).(*rpcState)
	return s
}

func (h *handler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &connState{h: h})
}

func (h *handler) HandleConn(context.Context, stats.ConnStats) {}

func (h *handler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	cs, _ := ctx.Value(connKey{}).(*connState)
	if cs == nil || cs.h != h {
		return ctx
	}
	return &rpcState{Context: ctx, conn: cs}
}

func (h *handler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	r := rpcOf(ctx)
	if r == nil {
		return
	}
	switch s := s.(type) {
	case *stats.InHeader:
		var authority, hdr string
		if v := s.Header[":authority"]; len(v) > 0 {
			authority = v[0]
		}
		if v := s.Header[HeaderMetadata]; len(v) > 0 {
			hdr = v[0]
			r.peerSent = true
		}
		r.entry.Store(r.conn.lookup(ctx, authority, hdr))
	case *stats.InPayload:
		r.inMsgs.Add(1)
		r.inBytes.Add(int64(s.WireLength))
	case *stats.OutPayload:
		r.outMsgs.Add(1)
		r.outBytes.Add(int64(s.WireLength))
	case *stats.End:
		e := r.entry.Load()
		if e == nil {
			e = r.conn.lookup(ctx, "", "")
		}
		rec := h.r
		o := e.opts(rec, uint32(status.Code(s.Error)))
		o.s.requests.Add(1)
		o.s.reqMsgs.Add(r.inMsgs.Load())
		o.s.resMsgs.Add(r.outMsgs.Load())
		bg := context.Background()
		if rec.duration != nil {
			rec.duration.Record(bg, float64(s.EndTime.Sub(s.BeginTime))/1e6, o.rec...)
		}
		if rec.reqBytes != nil {
			rec.reqBytes.Record(bg, r.inBytes.Load(), o.rec...)
		}
		if rec.resBytes != nil {
			rec.resBytes.Record(bg, r.outBytes.Load(), o.rec...)
		}
	}
}

// lookup returns the label sets of the connection's RPCs with authority
// and peer header hdr, built on first use.
func (cs *connState) lookup(ctx context.Context, authority, hdr string) *entry {
	cs.once.Do(func() { cs.readPeer(ctx) })
	if es := cs.entries.Load(); es != nil {
		for _, e := range *es {
			if e.authority == authority && e.header == hdr {
				return e
			}
		}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var old []*entry
	if es := cs.entries.Load(); es != nil {
		old = *es
		for _, e := range old {
			if e.authority == authority && e.header == hdr {
				return e
			}
		}
	}
	src := source(hdr, cs.peerID, cs.peerNS)
	e := &entry{authority: authority, header: hdr,
		base: baseAttrs(cs.h.r.local, cs.localID, src, cs.peerID, cs.mtls, authority)}
	if len(old) < maxEntries {
		es := append(old[:len(old):len(old)], e)
		cs.entries.Store(&es)
	}
	return e
}

// readPeer reads the identities of the connection: the client's
// certificate (mutual TLS) and the server's own.
func (cs *connState) readPeer(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return
	}
	if certs := info.State.PeerCertificates; len(certs) > 0 {
		cs.mtls = true
		cs.peerID, cs.peerNS = SpiffeID(certs[0])
	}
	if cs.h.localCert != nil {
		cs.localID, _ = SpiffeID(cs.h.localCert())
	}
}

// unary answers a request that carried the peer metadata header with the
// server's own, unless grpc-go's CSM plugin on this server answers it.
func (h *handler) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if r := rpcOf(ctx); r != nil && r.peerSent && h.r.reply != nil && !grpccompat.CSMAnswers(grpc.ServerTransportStreamFromContext(ctx)) {
		grpc.SetHeader(ctx, h.r.reply)
	}
	return next(ctx, req)
}

// stream is unary for streaming RPCs.
func (h *handler) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	if r := rpcOf(ss.Context()); r != nil && r.peerSent && h.r.reply != nil && !grpccompat.CSMAnswers(ss) && !grpccompat.CSMAnswers(grpc.ServerTransportStreamFromContext(ss.Context())) {
		ss.SetHeader(h.r.reply)
	}
	return next(srv, ss)
}
