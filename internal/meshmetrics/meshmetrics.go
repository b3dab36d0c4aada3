// Package meshmetrics records Istio's standard metrics (istio_requests_total
// and the rest, reporter="destination") for the RPCs an xDS server handles,
// with the 25 labels Envoy's istio_stats gives them on the inbound side, so
// that Istio's dashboards and Kiali see a proxyless server as they see a
// sidecar. The server's side comes from its bootstrap's node metadata, the
// client's from the peer metadata header (Istio's or grpc-go CSM plugin's
// keys) or else its certificate; the server answers a request that carried
// the header with its own.
//
// Cost: the label sets of a filter chain are built once per :authority,
// peer header and client identity (a handful per client workload), then
// once per gRPC status code; a unary RPC allocates nothing of its own, a
// streaming one its counting wrapper, and the metrics SDK what it needs.
package meshmetrics

import (
	"context"
	"crypto/x509"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
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
// chain: the interceptors that record each RPC and answer the peer metadata
// header; and refused, which records an RPC the chain refused before its
// handler (gRPC runs no interceptor for it). localCert returns the leaf of
// the chain's identity certificate (nil without TLS). Nil for a nil r.
//
// The options must come before the chain's own interceptors, so that an RPC
// they refuse is counted, and before the user's, so that the reply is set
// before those run.
//
// Interceptors rather than a stats handler: with any stats handler, gRPC
// builds and reports seven events per RPC, which alone costs more than the
// whole budget of the mesh metrics (issue 33: within 5% of plain gRPC).
// What the interceptors cannot see is said in docs/observability.md: sizes
// are of the messages as marshaled, before compression; the status is the
// one the handler returned.
func (r *Recorder) ServerOptions(localCert func() *x509.Certificate) (opts []grpc.ServerOption, refused func(context.Context, *tap.Info, error)) {
	if r == nil {
		return nil, nil
	}
	h := &handler{r: r, localCert: localCert, entries: make(map[entryKey]*entry)}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(h.unary),
		grpc.ChainStreamInterceptor(h.stream),
	}, h.refused
}

// handler records the RPCs of one filter chain's servers.
type handler struct {
	r         *Recorder
	localCert func() *x509.Certificate

	// entries are the label sets built so far. At maxEntries they start
	// again empty (the header and :authority are the client's to choose);
	// the series are the recorder's, and survive that.
	mu      sync.RWMutex
	entries map[entryKey]*entry // guarded by mu
}

// maxEntries bounds a chain's cached label sets.
const maxEntries = 4096

// entryKey is what the labels of an RPC depend on, besides its status: its
// :authority, the peer metadata header, and its connection's security: TLS
// or not, a client certificate or not, and that certificate's SPIFFE ID as
// the host and path of its URI (read without allocating). Connections of
// one client workload share their key.
type entryKey struct {
	authority, header  string
	peerHost, peerPath string
	tls, mtls          bool
}

// entry is the label sets of RPCs with one entryKey.
type entry struct {
	base  []attribute.KeyValue
	codes [17]atomic.Pointer[codeOpts]
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

// keyOf returns the entryKey of an RPC with :authority authority and peer
// metadata header hdr on the connection of ctx.
func keyOf(ctx context.Context, authority, hdr string) entryKey {
	k := entryKey{authority: authority, header: hdr}
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			k.tls = true
			if certs := info.State.PeerCertificates; len(certs) > 0 {
				k.mtls = true
				if u := spiffeURI(certs[0]); u != nil {
					k.peerHost, k.peerPath = u.Host, u.Path
				}
			}
		}
	}
	return k
}

// lookup returns the label sets of RPCs with key k, built on first use.
func (h *handler) lookup(k entryKey) *entry {
	h.mu.RLock()
	e, ok := h.entries[k]
	h.mu.RUnlock()
	if ok {
		return e
	}
	// The client's identity, and the server's own: read when a label set
	// is first built.
	var peerID, peerNS, localID, localTD string
	if k.peerHost != "" || k.peerPath != "" {
		peerID, peerNS = spiffeIDOf(&url.URL{Scheme: "spiffe", Host: k.peerHost, Path: k.peerPath})
	}
	if k.tls && h.localCert != nil {
		if u := spiffeURI(h.localCert()); u != nil {
			localID, _ = spiffeIDOf(u)
			localTD = u.Host
		}
	}
	src := source(k.header, k.peerHost, peerNS, h.r.local.Workload, localTD)
	e = &entry{base: baseAttrs(h.r.local, localID, src, peerID, k.mtls, k.authority)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.entries[k]; ok {
		return old
	}
	if len(h.entries) >= maxEntries {
		clear(h.entries)
	}
	h.entries[k] = e
	return e
}

// record adds one RPC with status code, its message counts and sizes, and
// its duration in milliseconds.
func (h *handler) record(o *codeOpts, inMsgs, outMsgs, inBytes, outBytes int64, ms float64) {
	o.s.requests.Add(1)
	o.s.reqMsgs.Add(inMsgs)
	o.s.resMsgs.Add(outMsgs)
	bg := context.Background()
	rec := h.r
	if rec.duration != nil {
		rec.duration.Record(bg, ms, o.rec...)
	}
	if rec.reqBytes != nil {
		rec.reqBytes.Record(bg, inBytes, o.rec...)
	}
	if rec.resBytes != nil {
		rec.resBytes.Record(bg, outBytes, o.rec...)
	}
}

// refused records an RPC the tap handle refused with err: one request with
// its status code, no message, no byte, and no time spent (the handle
// answers before the RPC has a stream).
func (h *handler) refused(ctx context.Context, info *tap.Info, err error) {
	code := codes.PermissionDenied // what gRPC makes of a plain error from the tap
	if st, ok := status.FromError(err); ok {
		code = st.Code()
	}
	h.record(h.lookup(keyOf(ctx, first(info.Header[":authority"]), first(info.Header[HeaderMetadata]))).opts(h.r, uint32(code)), 0, 0, 0, 0, 0)
}

// codeOf is the status code gRPC sends for a handler's error.
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return status.FromContextError(err).Code()
}

// WireSize is the size of message m in a gRPC request or response body:
// its encoding and the 5-byte prefix of its frame. Messages that are not
// protocol buffers (another codec) count their prefix only. The access log
// counts its bytes with it too, so that both say the same.
func WireSize(m any) int64 {
	if pm, ok := m.(proto.Message); ok {
		return int64(proto.Size(pm)) + 5
	}
	return 5
}

// incoming returns the entryKey of the RPC of ctx, from its headers.
// metadata.FromIncomingContext would copy every header; this copies the
// one value of each that it reads.
func incoming(ctx context.Context) entryKey {
	return keyOf(ctx, first(metadata.ValueFromIncomingContext(ctx, ":authority")), first(metadata.ValueFromIncomingContext(ctx, HeaderMetadata)))
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// unary records a unary RPC, and answers a request that carried the peer
// metadata header with the server's own, unless grpc-go's CSM plugin on
// this server answers it.
func (h *handler) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	start := time.Now()
	k := incoming(ctx)
	if k.header != "" && h.r.reply != nil && !grpccompat.CSMAnswers(grpc.ServerTransportStreamFromContext(ctx)) {
		grpc.SetHeader(ctx, h.r.reply)
	}
	resp, err := next(ctx, req)
	var out, outBytes int64
	if err == nil {
		out, outBytes = 1, WireSize(resp)
	}
	h.record(h.lookup(k).opts(h.r, uint32(codeOf(err))), 1, out, WireSize(req), outBytes, msSince(start))
	return resp, err
}

// stream is unary for streaming RPCs, whose messages it counts as the
// handler receives and sends them.
func (h *handler) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	start := time.Now()
	ctx := ss.Context()
	k := incoming(ctx)
	if k.header != "" && h.r.reply != nil && !grpccompat.CSMAnswers(ss) && !grpccompat.CSMAnswers(grpc.ServerTransportStreamFromContext(ctx)) {
		ss.SetHeader(h.r.reply)
	}
	cs := &countingStream{ServerStream: ss}
	err := next(srv, cs)
	h.record(h.lookup(k).opts(h.r, uint32(codeOf(err))), cs.in.Load(), cs.out.Load(), cs.inBytes.Load(), cs.outBytes.Load(), msSince(start))
	return err
}

func msSince(t time.Time) float64 { return float64(time.Since(t)) / 1e6 }

// countingStream counts the messages a streaming handler receives and
// sends, and their sizes.
type countingStream struct {
	grpc.ServerStream
	in, out, inBytes, outBytes atomic.Int64
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.in.Add(1)
		s.inBytes.Add(WireSize(m))
	}
	return err
}

func (s *countingStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		s.out.Add(1)
		s.outBytes.Add(WireSize(m))
	}
	return err
}
