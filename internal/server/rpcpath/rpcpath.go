// Package rpcpath is the per-RPC path of an xDS server (gRFC A36, A28, A39):
// for each RPC, in gRPC's tap handle, it picks the virtual host by
// :authority and the route by path and headers, refuses the RPC unless the
// route's action is non_forwarding_action, and runs the filter chain's HTTP
// filter steps. Everything it reads was prepared when the configuration was
// applied: an RPC costs one atomic load, the route match and the steps,
// with no lock and no map shared by all RPCs.
//
// Read this file top to bottom: Tap (the handle), then Routes (what it reads)
// and Source (where it reads it from). pipeline.go runs an RPC's filter
// steps as one sequence, from the tap to the RPC's goroutine when a step
// returns work that decides later. routes.go builds the routes' steps,
// counts.go wires the filters' outcome counts, chain.go gives a filter
// chain's gRPC servers their options: the tap handle and, when the chain's
// filters may return work, the interceptors that run it, ahead of the
// user's.
package rpcpath

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/netaddr"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
	"github.com/proxyless-grpc/xds/internal/routing"
)

// Tap returns the grpc.InTapHandle of the connections of the filter chain
// named chain, which routes RPCs with what src holds when each RPC arrives.
//
// The handle runs when an RPC's headers arrive, before gRPC looks up the
// method and before any user interceptor, so an RPC it refuses never
// reaches user code. Every refusal by routing is UNAVAILABLE saying why; a
// refusal by a filter has the filter's status (RBAC: PERMISSION_DENIED). gRPC
// calls it with a transport lock held: it allocates nothing for an RPC it
// lets through (unless a filter does).
func Tap(chain string, src *Source) tap.ServerInHandle {
	return (&tapper{chain: chain, src: src}).handle
}

type tapper struct {
	chain string  // immutable
	src   *Source // immutable pointer
	// conn is the state of the one connection the handle serves; nil for a
	// handle shared by a chain's connections (its filters need none).
	conn *httpfilter.ConnState
	// localID returns the chain's identity certificate, for the filters
	// that read it (httpfilter.LocalIdentityUser); nil when none does.
	localID func() *x509.Certificate
	// maxHeaderBytes and maxHeaders bound the request's headers, their
	// size and their number (headerList); 0 for no bound but gRPC's own.
	maxHeaderBytes, maxHeaders int
	// blocked, when set, refuses every RPC: the chain's filters may refuse
	// RPCs after the tap, and the server cannot tell whether a user's
	// interceptor would run before them (UserOptions.Unknown).
	blocked error
	// refused, if set, is told of every RPC the handle refuses (gRPC
	// reports no end for them to its stats handlers).
	refused func(ctx context.Context, info *tap.Info, err error)
	// unregistered, if set with refused, reports whether gRPC will refuse
	// an RPC the handle lets through because no service has its method;
	// refused is told of those too, with errUnregistered.
	unregistered func(method string) bool
	// logs: the chain has an access log; each RPC's context then carries
	// its RPCInfo, with the request headers in logReads. connInfo is the
	// connection's (per-connection handles only).
	logs     bool
	logReads []string
	connInfo *ConnInfo
}

// ConnInfo is what an access log knows of one connection of a chain that
// logs: an id, unique in the process, and, once the server cut the
// connection's RPCs short, why. Safe for concurrent use.
type ConnInfo struct {
	// ID is %CONNECTION_ID%.
	ID    uint64
	ended atomic.Pointer[string]
}

var connIDs atomic.Uint64

// NewConnInfo returns the ConnInfo of a new connection.
func NewConnInfo() *ConnInfo { return &ConnInfo{ID: connIDs.Add(1)} }

// End records that the server cut the connection's RPCs short, and why
// (an access log's response code details); the first reason stays. A nil c
// records nothing.
func (c *ConnInfo) End(details string) {
	if c != nil {
		c.ended.CompareAndSwap(nil, &details)
	}
}

// Ended returns why the server cut the connection's RPCs short; "" while
// it has not.
func (c *ConnInfo) Ended() string {
	if c == nil {
		return ""
	}
	if p := c.ended.Load(); p != nil {
		return *p
	}
	return ""
}

// RPCInfo is what the tap handle learns of an RPC for the access log of
// its chain: when its headers arrived, its connection, and the route that
// matched (its name; "" before the match). Set by the tap, read once the
// RPC ends.
type RPCInfo struct {
	Start time.Time
	Conn  *ConnInfo
	Route string
	// Authority is the request's :authority as it arrived.
	Authority string
	// Headers are the request headers the access log reads, as they
	// arrived (gRPC's values, which nothing modifies); nil when it reads
	// none or the request has none of them.
	Headers map[string][]string
}

type rpcInfoKey struct{}

// infoContext is a context carrying an RPCInfo: one allocation for both.
type infoContext struct {
	context.Context
	info RPCInfo
}

func (c *infoContext) Value(key any) any {
	if key == (rpcInfoKey{}) {
		return &c.info
	}
	return c.Context.Value(key)
}

// InfoOf returns the RPCInfo of the RPC of ctx; nil when its chain does
// not log.
func InfoOf(ctx context.Context) *RPCInfo {
	ri, _ := ctx.Value(rpcInfoKey{}).(*RPCInfo)
	return ri
}

// errUnregistered is what refused is told of an RPC for a method no
// service has: gRPC answers it UNIMPLEMENTED after the tap, without
// running an interceptor.
var errUnregistered = status.Error(codes.Unimplemented, "xds: no registered service has the method")

func (t *tapper) handle(ctx context.Context, info *tap.Info) (context.Context, error) {
	ctx, err := t.route(ctx, info)
	if t.refused != nil {
		switch {
		case err != nil:
			t.refused(ctx, info, err)
		case t.unregistered != nil && t.unregistered(info.FullMethodName):
			t.refused(ctx, info, errUnregistered)
		}
	}
	return ctx, err
}

// route is the handle's work: it routes the RPC and runs the filter steps
// that run in the tap.
func (t *tapper) route(ctx context.Context, info *tap.Info) (context.Context, error) {
	var ri *RPCInfo
	if t.logs {
		ic := &infoContext{Context: ctx, info: RPCInfo{Start: time.Now(), Conn: t.connInfo}}
		if a := info.Header[":authority"]; len(a) > 0 {
			ic.info.Authority = a[0]
		}
		for _, k := range t.logReads {
			if v, ok := info.Header[k]; ok {
				if ic.info.Headers == nil {
					ic.info.Headers = make(map[string][]string, len(t.logReads))
				}
				ic.info.Headers[k] = v
			}
		}
		ctx, ri = ic, &ic.info
	}
	// 1. A :path that is not "/service/method" is refused before routing and
	// RBAC see it, as gRPC refuses it after them: a DENY on a path must not
	// be side-stepped by a malformed one (grpc-go v1.79.3), and routes and
	// audit logs see only well-formed methods.
	if !wellFormedMethod(info.FullMethodName) {
		return ctx, responseinfo.Refused(status.Errorf(codes.Unimplemented, "xds: malformed method name %q", info.FullMethodName), accesslog.FlagDownstreamProtocolError, DetailsInvalidPath)
	}
	if t.blocked != nil {
		return ctx, t.blocked
	}
	// 2. Request headers over the chain's bounds are refused before anything
	// reads them, as Envoy's HTTP codec refuses them (max_request_headers_kb,
	// max_headers_count): no filter copies more into a side call. Envoy
	// resets such a stream with INTERNAL_ERROR, which a gRPC client reports
	// as INTERNAL (and gRPC maps HTTP's 431 to INTERNAL): the same code here.
	if t.maxHeaderBytes > 0 || t.maxHeaders > 0 {
		n, size := headerList(info.FullMethodName, info.Header)
		switch {
		case t.maxHeaderBytes > 0 && size > t.maxHeaderBytes:
			return ctx, headerOverflow(status.Errorf(codes.Internal, "xds: request headers of %d bytes exceed the filter chain's limit of %d bytes (max_request_headers_kb)", size, t.maxHeaderBytes))
		case t.maxHeaders > 0 && n > t.maxHeaders:
			return ctx, headerOverflow(status.Errorf(codes.Internal, "xds: %d request headers exceed the filter chain's limit of %d (max_headers_count)", n, t.maxHeaders))
		}
	}
	// 3. The chain's current routes: an inline RouteConfiguration, or the
	// last answer for its RDS resource (gRFC A36: a missing or broken one
	// fails every RPC).
	rt := t.src.Load()
	if rt.err != nil {
		return ctx, noRoute(status.Errorf(codes.Unavailable, "xds: filter chain %q: %v", t.chain, rt.err), DetailsNoRouteConfiguration)
	}
	// 4. Virtual host by :authority, route by path and headers (gRFC A28).
	var authority string
	if a := info.Header[":authority"]; len(a) > 0 {
		authority = a[0]
	}
	route, ok := rt.router.Match(authority, info.FullMethodName, info.Header)
	if !ok {
		return ctx, noRoute(status.Errorf(codes.Unavailable, "xds: RouteConfiguration %q has no virtual host and route matching authority %q and method %q", rt.router.Name(), authority, info.FullMethodName), accesslog.DetailsRouteNotFound)
	}
	if ri != nil {
		ri.Route = route.Name
	}
	// 5. The route's action (gRFC A36): only non_forwarding_action serves
	// RPCs, and the others are refused before any filter acts: no side call,
	// no token, no header sent anywhere.
	if route.Action != routing.ActionNonForwarding {
		return ctx, noRoute(status.Errorf(codes.Unavailable, "xds: RouteConfiguration %q, virtual host %q, route %d %q: action is %v, not non_forwarding_action", rt.router.Name(), route.VirtualHost, route.Index, route.Name, route.Action), DetailsNotNonForwarding)
	}
	// 6. The chain's HTTP filters (gRFC A39), their configs merged with the
	// route's overrides when the routes were applied, in order: one
	// sequence, which moves to the RPC's goroutine at the first step that
	// returns work (pipeline.go). The router is the last filter; its work
	// is the route match and the action check above.
	stages := rt.stagesOf(route)
	if len(stages) == 0 {
		return ctx, nil
	}
	rpc := rpcInfo(ctx, info, authority)
	rpc.Conn = t.conn
	if t.localID != nil {
		ctx = httpfilter.WithLocalIdentity(ctx, t.localID)
	}
	return runInTap(ctx, rpc, stages)
}

// The response code details of the tap's own refusals, in the access log
// (Envoy's words where Envoy has a case: http2.too_many_headers,
// route_not_found).
const (
	// DetailsInvalidPath: a :path that is not "/service/method".
	DetailsInvalidPath = "invalid_path"
	// DetailsHeaderOverflow: request headers over the chain's bounds (Envoy's
	// codec; flag DPE).
	DetailsHeaderOverflow = "http2.too_many_headers"
	// DetailsNoRouteConfiguration: the chain's RouteConfiguration does not
	// exist or cannot be used (gRFC A36; flag NR).
	DetailsNoRouteConfiguration = "route_configuration_unavailable"
	// DetailsNotNonForwarding: the route's action is not
	// non_forwarding_action (gRFC A36; flag NR).
	DetailsNotNonForwarding = "route_not_non_forwarding"
	// DetailsBlocked: the chain refuses every RPC (see Chain.Blocked).
	DetailsBlocked = "filter_chain_blocked"
	// DetailsFilterError: an HTTP filter's own code broke (a panic,
	// undeclared work).
	DetailsFilterError = "filter_error"
	// DetailsDrainTimeout and DetailsServerStopped are why the server cut a
	// connection's RPCs short (ConnInfo.End): its drain grace time ran
	// out, or the server was stopped (Stop, or GracefulStop turned into a
	// stop).
	DetailsDrainTimeout  = "drain_timeout"
	DetailsServerStopped = "server_stopped"
)

func headerOverflow(err error) error {
	return responseinfo.Refused(err, accesslog.FlagDownstreamProtocolError, DetailsHeaderOverflow)
}

func noRoute(err error, details string) error {
	return responseinfo.Refused(err, accesslog.FlagNoRouteFound, details)
}

// consumedHeaders are the headers of every gRPC request that gRPC's server
// takes before the tap, leaving them out of the request's metadata
// (:method, :scheme, te), as Envoy counts them: their number, and their
// names and values in bytes.
const (
	consumedHeaders     = 3
	consumedHeaderBytes = len(":method") + len("POST") + len(":scheme") + len("http") + len("te") + len("trailers")
)

// headerList returns the number of the request's headers and their size as
// Envoy counts them against max_headers_count and max_request_headers_kb:
// each name and value, pseudo-headers included (:path, :authority), every
// value of a name on its own; a binary ("-bin") value counts as its base64
// form on the wire.
func headerList(method string, h metadata.MD) (n, size int) {
	n, size = consumedHeaders+1, consumedHeaderBytes+len(":path")+len(method)
	for k, vs := range h {
		bin := strings.HasSuffix(k, "-bin")
		for _, v := range vs {
			l := len(v)
			if bin {
				l = base64.RawStdEncoding.EncodedLen(l)
			}
			n++
			size += len(k) + l
		}
	}
	return n, size
}

// wellFormedMethod reports whether m is "/service/method", as gRPC's
// server requires of :path to dispatch an RPC: a leading '/' and another
// '/' after it.
func wellFormedMethod(m string) bool {
	return len(m) > 1 && m[0] == '/' && strings.LastIndexByte(m, '/') > 0
}

// rpcInfo describes an RPC to filter steps: the method is :path, the peer's
// and the local address come from the connection, and so does TLS.
func rpcInfo(ctx context.Context, info *tap.Info, authority string) httpfilter.RPC {
	rpc := httpfilter.RPC{Request: httpfilter.Request{FullMethod: info.FullMethodName, Authority: authority, Header: info.Header}}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return rpc
	}
	rpc.Remote = addrPort(p.Addr)
	rpc.Local = addrPort(p.LocalAddr)
	switch ai := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		rpc.TLS, rpc.PeerCertificates = true, peerCerts(ai.State.PeerCertificates)
	case *credentials.TLSInfo:
		rpc.TLS, rpc.PeerCertificates = true, peerCerts(ai.State.PeerCertificates)
	case nil:
	default:
		rpc.TLS = ai.AuthType() == "tls"
	}
	return rpc
}

func peerCerts(c []*x509.Certificate) []*x509.Certificate {
	if len(c) == 0 {
		return nil
	}
	return c
}

// addrPort converts a TCP address, IPv4-mapped addresses unmapped; the zero
// value for other kinds.
func addrPort(a net.Addr) netip.AddrPort {
	ap, _ := netaddr.FromNet(a)
	return ap
}

// Routes is what one filter chain routes RPCs with at one moment: the
// router of its RouteConfiguration and, for every route, the steps of the
// chain's HTTP filters there; or the reason there are no routes. Immutable.
type Routes struct {
	router *routing.Router // nil when err is set
	stages [][]stage       // by Route.ID; nil when no route has a step
	err    error           // why RPCs fail with UNAVAILABLE
}

// Unavailable returns Routes that fail every RPC with UNAVAILABLE and err's
// text (an RDS resource that does not exist, was NACKed without a good
// version, or cannot be fetched: gRFC A36).
func Unavailable(err error) *Routes { return &Routes{err: err} }

// Router returns the router; nil for Unavailable routes.
func (r *Routes) Router() *routing.Router { return r.router }

// Err returns why every RPC fails; nil when there is a router.
func (r *Routes) Err() error { return r.err }

// stagesOf returns the steps to run on route. It does not allocate.
func (r *Routes) stagesOf(route *routing.Route) []stage {
	if r.stages == nil {
		return nil
	}
	return r.stages[route.ID]
}

// Problem describes why routes of router, or err when there is no router,
// fail some or all RPCs by configuration, for gRFC A36 configuration error
// logging; "" when they fail none.
func Problem(router *routing.Router, err error) string {
	if router == nil {
		if err == nil {
			return ""
		}
		return err.Error() + "; every RPC on the filter chains using it fails with UNAVAILABLE"
	}
	failing := router.FailingRoutes()
	if len(failing) == 0 {
		return ""
	}
	f := failing[0]
	return fmt.Sprintf("RouteConfiguration %q has %d route(s) whose action is not non_forwarding_action, failing their RPCs with UNAVAILABLE (first: virtual host %q route %d %q, action %v)",
		router.Name(), len(failing), f.VirtualHost, f.Index, f.Name, f.Action)
}

// Source is where a filter chain's RPCs find their Routes: fixed for an
// inline RouteConfiguration, replaced on each RDS answer otherwise (gRFC
// A36: an RDS update applies to existing connections at once). Load takes
// no lock.
type Source struct {
	cur atomic.Pointer[Routes]
}

// NewSource returns a Source holding r, which must not be nil.
func NewSource(r *Routes) *Source {
	s := &Source{}
	s.cur.Store(r)
	return s
}

// Load returns the current routes.
func (s *Source) Load() *Routes { return s.cur.Load() }

// Store replaces the routes; RPCs arriving afterwards use r.
func (s *Source) Store(r *Routes) { s.cur.Store(r) }
