// Package rpclog writes the access log of a filter chain's RPCs, as Envoy's
// HTTP connection manager writes its access_log: one record per RPC when it
// ends, for those its filters or routing refused in the tap (Chain.Refused),
// after it, and those the handler answered (Chain.ServerOptions: the
// chain's outermost interceptors, so they see every RPC that gets past the
// tap and the status its client gets).
//
// What a record says: the request headers as the filters left them (the
// pipeline tells, responseinfo.RequestChanged), the response headers and
// trailers sent (the interceptors wrap the RPC's grpc.ServerTransportStream
// and, for streams, its grpc.ServerStream), the status, Envoy's response
// flags and details (responseinfo: a refusal carries them; a delay is added
// while the RPC goes on), the messages' bytes on the wire, the connection
// (addresses, TLS, its id and whether the server cut it short: rpcpath's
// ConnInfo) and the route (rpcpath's RPCInfo). Filling a record copies the
// request headers once and formats nothing: the log's writers do that on
// their own goroutines (accesslog/sink), and an RPC never waits for them.
package rpclog

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/accesslog/sink"
	"github.com/proxyless-grpc/xds/internal/meshmetrics"
	"github.com/proxyless-grpc/xds/internal/netaddr"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
)

// Chain logs the RPCs of one filter chain. Safe for concurrent use.
type Chain struct {
	log       *sink.Logger
	reads     []string                 // the request headers the log reads (accesslog.Config.RequestHeaders)
	name      string                   // the filter chain's name
	localCert func() *x509.Certificate // the chain's current identity certificate; nil without TLS

	// The RPCs being logged, for Close: a connection's gRPC server is
	// stopped without waiting for its handlers, and an RPC it cut short is
	// logged when its handler returns.
	inflight    atomic.Int64
	closing     atomic.Bool
	release     func() // set by Close before closing
	releaseOnce sync.Once
}

// begin counts an RPC being logged; done ends it.
func (c *Chain) begin() { c.inflight.Add(1) }

func (c *Chain) done() {
	if c.inflight.Add(-1) == 0 && c.closing.Load() {
		c.releaseOnce.Do(c.release)
	}
}

// Close calls release (the Logger's Close) once no RPC is being logged: at
// once, or when the last one has been. The chain's connections are gone
// by then, so no RPC starts after it.
func (c *Chain) Close(release func()) {
	c.release = release
	c.closing.Store(true)
	if c.inflight.Load() == 0 {
		c.releaseOnce.Do(c.release)
	}
}

// New returns the Chain that logs the RPCs of the filter chain named name
// with cfg to log (log = outputs.Logger(cfg)); localCert returns the chain's
// current identity certificate (nil without TLS). nil when log is nil:
// nothing to log. A record gets only the request headers cfg reads.
func New(log *sink.Logger, cfg *accesslog.Config, name string, localCert func() *x509.Certificate) *Chain {
	if log == nil {
		return nil
	}
	return &Chain{log: log, reads: cfg.RequestHeaders(), name: name, localCert: localCert}
}

// ServerOptions returns the interceptors that log the RPCs that get past
// the tap: they must be the chain's first, so that they see the status of
// RPCs the filters refuse after the tap. Nil for a nil c.
func (c *Chain) ServerOptions() []grpc.ServerOption {
	if c == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(c.unary), grpc.ChainStreamInterceptor(c.stream)}
}

// Refused logs an RPC the chain's tap handle refused with err (or that gRPC
// refuses after it, for a method no service has): its headers are the
// tap's, its status err's, and no message went either way.
func (c *Chain) Refused(ctx context.Context, info *tap.Info, err error) {
	c.begin()
	defer c.done()
	r, ri := c.newRecord(ctx, time.Now())
	r.FullMethod = info.FullMethodName
	r.Authority = first(info.Header[":authority"])
	if ri != nil {
		r.RequestHeaders = ri.Headers
	}
	r.TrailersOnly = true
	c.end(r, err, nil)
}

// unary logs a unary RPC.
func (c *Chain) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	c.begin()
	defer c.done()
	r, ri := c.newRecord(ctx, time.Now())
	r.FullMethod = info.FullMethod
	r.BytesReceived = wireSize(req)
	ts := c.newTransportStream(ctx, ri)
	resp, err := next(grpc.NewContextWithServerTransportStream(ctx, ts), req)
	if err == nil {
		// gRPC sends the response, with its headers.
		r.BytesSent = wireSize(resp)
	}
	rs := ts.finish(r, err == nil)
	c.end(r, err, &rs)
	return resp, err
}

// stream logs a streaming RPC.
func (c *Chain) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	c.begin()
	defer c.done()
	ctx := ss.Context()
	r, ri := c.newRecord(ctx, time.Now())
	r.FullMethod = info.FullMethod
	ts := c.newTransportStream(ctx, ri)
	ws := &serverStream{ServerStream: ss, ts: ts, ctx: grpc.NewContextWithServerTransportStream(ctx, ts)}
	err := next(srv, ws)
	r.BytesReceived, r.BytesSent = ws.in, ws.out
	rs := ts.finish(r, false)
	c.end(r, err, &rs)
	return err
}

// newRecord starts the record of the RPC of ctx: its start (the tap's, when
// the RPC went through it; else now), connection and route. It returns the
// tap's RPCInfo too (nil when the RPC did not go through it).
func (c *Chain) newRecord(ctx context.Context, now time.Time) (*accesslog.Record, *rpcpath.RPCInfo) {
	r := &accesslog.Record{StartTime: now, FilterChainName: c.name}
	ri := rpcpath.InfoOf(ctx)
	if ri != nil {
		r.StartTime, r.RouteName = ri.Start, ri.Route
		if ri.Conn != nil {
			r.ConnectionID = ri.Conn.ID
		}
	}
	if p, ok := peer.FromContext(ctx); ok {
		r.Remote, _ = netaddr.FromNet(p.Addr)
		r.Local, _ = netaddr.FromNet(p.LocalAddr)
		var st *tls.ConnectionState
		switch ai := p.AuthInfo.(type) {
		case credentials.TLSInfo:
			st = &ai.State
		case *credentials.TLSInfo:
			st = &ai.State
		}
		if st != nil {
			r.TLSVersion, r.CipherSuite, r.ServerName = st.Version, st.CipherSuite, st.ServerName
			if len(st.PeerCertificates) > 0 {
				r.PeerCertificates = st.PeerCertificates
			}
			if c.localCert != nil {
				r.LocalCertificate = c.localCert()
			}
		}
	}
	return r, ri
}

// end completes r with the RPC's end, err (nil: OK), and logs it. rs is
// what its transport stream saw (nil for an RPC refused in the tap).
func (c *Chain) end(r *accesslog.Record, err error, rs *streamEnd) {
	r.Duration = time.Since(r.StartTime)
	code := codes.OK
	if err != nil {
		st := statusOf(err)
		code, r.GRPCMessage = st.Code(), st.Message()
	}
	r.GRPCStatus, r.HasGRPCStatus = uint32(code), true
	r.ResponseCode = 200
	if rs != nil {
		r.ResponseFlags = rs.flags
	}
	flags, details, refused := responseinfo.Of(err)
	r.ResponseFlags |= flags
	switch {
	case refused:
		r.ResponseCodeDetails = details
	case rs != nil && rs.ended != "":
		// The server cut the RPC short: its drain ran out of time, or it
		// was stopped.
		r.ResponseFlags |= accesslog.FlagDownstreamConnectionTermination
		r.ResponseCodeDetails = rs.ended
	case rs != nil && errors.Is(rs.reqErr, context.Canceled) && code == codes.Canceled:
		// The client reset the stream: no status went back.
		r.ResponseFlags |= accesslog.FlagDownstreamRemoteReset
		r.ResponseCodeDetails = accesslog.DetailsRemoteReset
		r.HasGRPCStatus, r.ResponseCode = false, 0
	default:
		r.ResponseCodeDetails = accesslog.DetailsViaUpstream
	}
	if first(r.RequestHeaders["x-request-id"]) == "" {
		// Envoy's stream ID is the x-request-id it generates for a
		// request without one (%STREAM_ID%).
		r.StreamID = accesslog.NewStreamID()
	}
	c.log.Log(r)
}

// statusOf is the status the client gets for a handler's err (not nil).
func statusOf(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

// transportStream is the RPC's grpc.ServerTransportStream as its handler
// (and the filters after the tap) see it: what they set or send as headers
// and trailers is recorded on the way to gRPC's. It is the RPC's
// responseinfo.Recorder too. Used by the RPC's goroutines (a streaming
// handler may send from one and set trailers from another).
type transportStream struct {
	grpc.ServerTransportStream
	c     *Chain
	first context.Context  // the RPC's context as the interceptor got it; immutable
	ri    *rpcpath.RPCInfo // the tap's, in first; nil without it; immutable

	mu       sync.Mutex
	req      context.Context // the request headers as the filters left them; guarded by mu
	headers  metadata.MD     // set or sent; guarded by mu
	trailers metadata.MD     // guarded by mu
	sentHdr  bool            // headers went out; guarded by mu
	sent     bool            // a message went out; guarded by mu
	flags    accesslog.Flags // guarded by mu
}

var _ responseinfo.Recorder = (*transportStream)(nil)

// newTransportStream wraps the grpc.ServerTransportStream of ctx, the
// RPC's context as the interceptor got it, whose tap RPCInfo is ri.
func (c *Chain) newTransportStream(ctx context.Context, ri *rpcpath.RPCInfo) *transportStream {
	return &transportStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx), c: c, first: ctx, ri: ri, req: ctx}
}

// header records response headers set (sent: and sent) by the handler or
// a filter; trailer, trailers set. The wrappers record only what gRPC
// accepted.
func (t *transportStream) header(md metadata.MD, sent bool) {
	t.mu.Lock()
	t.headers = metadata.Join(t.headers, md)
	t.sentHdr = t.sentHdr || sent
	t.mu.Unlock()
}

func (t *transportStream) trailer(md metadata.MD) {
	t.mu.Lock()
	t.trailers = metadata.Join(t.trailers, md)
	t.mu.Unlock()
}

func (t *transportStream) SetHeader(md metadata.MD) error {
	err := t.ServerTransportStream.SetHeader(md)
	if err == nil {
		t.header(md, false)
	}
	return err
}

func (t *transportStream) SendHeader(md metadata.MD) error {
	err := t.ServerTransportStream.SendHeader(md)
	if err == nil {
		t.header(md, true)
	}
	return err
}

func (t *transportStream) SetTrailer(md metadata.MD) error {
	err := t.ServerTransportStream.SetTrailer(md)
	if err == nil {
		t.trailer(md)
	}
	return err
}

// AddResponseFlags implements responseinfo.Recorder.
func (t *transportStream) AddResponseFlags(f accesslog.Flags) {
	t.mu.Lock()
	t.flags |= f
	t.mu.Unlock()
}

// RequestChanged implements responseinfo.Recorder.
func (t *transportStream) RequestChanged(ctx context.Context) {
	t.mu.Lock()
	t.req = ctx
	t.mu.Unlock()
}

// headers returns the request headers the log reads, each value list got
// from get (a copy the record owns); nil when the log reads none.
func (c *Chain) headers(get func(string) []string) map[string][]string {
	if len(c.reads) == 0 {
		return nil
	}
	md := make(map[string][]string, len(c.reads))
	for _, k := range c.reads {
		if v := get(k); len(v) > 0 {
			md[k] = v
		}
	}
	return md
}

// streamEnd is what an RPC's transport stream saw, for end.
type streamEnd struct {
	flags  accesslog.Flags // added while the RPC went on
	ended  string          // why the server cut the connection short; "" if it did not
	reqErr error           // the error of the RPC's context as the filters left it
}

// finish puts in r what the RPC's handler and filters set and sent: the
// request headers as the filters left them, the response headers and
// trailers, and whether the status went alone (gRPC sends it Trailers-Only
// when no header was set and nothing went before it). respSent says a
// unary response went out. It returns what end needs of the stream.
func (t *transportStream) finish(r *accesslog.Record, respSent bool) streamEnd {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.req == t.first && t.ri != nil {
		// The headers as they arrived, picked by the tap: no filter
		// changed them after it.
		r.RequestHeaders, r.Authority = t.ri.Headers, t.ri.Authority
	} else {
		md, _ := metadata.FromIncomingContext(t.req) // a copy the record owns
		r.RequestHeaders = t.c.headers(func(k string) []string { return md[k] })
		r.Authority = first(md[":authority"])
	}
	r.ResponseHeaders, r.Trailers = t.headers, t.trailers
	r.TrailersOnly = !t.sentHdr && !t.sent && !respSent && len(t.headers) == 0
	var ended string
	if t.ri != nil {
		ended = t.ri.Conn.Ended()
	}
	return streamEnd{flags: t.flags, ended: ended, reqErr: t.req.Err()}
}

// serverStream is a streaming RPC's grpc.ServerStream as the handler sees
// it: its context carries the transportStream; its headers and trailers
// are recorded; its messages counted, as on the wire.
type serverStream struct {
	grpc.ServerStream
	ts      *transportStream
	ctx     context.Context
	in, out uint64 // bytes; each only touched by the goroutine that receives (sends)
}

func (s *serverStream) Context() context.Context { return s.ctx }

func (s *serverStream) SetHeader(md metadata.MD) error {
	err := s.ServerStream.SetHeader(md)
	if err == nil {
		s.ts.header(md, false)
	}
	return err
}

func (s *serverStream) SendHeader(md metadata.MD) error {
	err := s.ServerStream.SendHeader(md)
	if err == nil {
		s.ts.header(md, true)
	}
	return err
}

func (s *serverStream) SetTrailer(md metadata.MD) {
	s.ServerStream.SetTrailer(md)
	s.ts.trailer(md)
}

func (s *serverStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		s.out += wireSize(m)
		s.ts.mu.Lock()
		s.ts.sent = true
		s.ts.mu.Unlock()
	}
	return err
}

func (s *serverStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.in += wireSize(m)
	}
	return err
}

// wireSize is the size of message m on the wire, as the mesh metrics count
// it.
func wireSize(m any) uint64 { return uint64(meshmetrics.WireSize(m)) }

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
