// Package rpcpath is the per-RPC path of an xDS server (gRFC A36, A28, A39):
// for each RPC, in gRPC's tap handle, it picks the virtual host by
// :authority and the route by path and headers, runs the filter chain's HTTP
// filter steps, and lets the RPC through only on a non_forwarding_action
// route. Everything it reads was prepared when the configuration was
// applied: an RPC costs one atomic load, the route match and the steps, with
// no lock and no map shared by all RPCs.
//
// Read this file top to bottom: Tap (the handle), then Routes (what it reads)
// and Source (where it reads it from). pipeline.go runs an RPC's filter
// steps as one sequence, from the tap to the RPC's goroutine when a step
// leaves work for after the tap. steps.go builds the filter steps;
// chain.go gives a filter chain's gRPC servers their options: the tap
// handle and, when the chain's filters leave work for after the tap, the
// interceptors that run it.
package rpcpath

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/netaddr"
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
	// defers: a filter of the chain may leave work for after the tap
	// (httpfilter.Needs.After), which holds back the steps after it.
	defers bool
	// refused, if set, is told of every RPC the handle refuses (gRPC
	// reports no end for them to its stats handlers).
	refused func(ctx context.Context, info *tap.Info, err error)
	// unregistered, if set with refused, reports whether gRPC will refuse
	// an RPC the handle lets through because no service has its method;
	// refused is told of those too, with errUnregistered.
	unregistered func(method string) bool
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
	// 1. A :path that is not "/service/method" is refused before routing and
	// RBAC see it, as gRPC refuses it after them: a DENY on a path must not
	// be side-stepped by a malformed one (grpc-go v1.79.3), and routes and
	// audit logs see only well-formed methods.
	if !wellFormedMethod(info.FullMethodName) {
		return ctx, status.Errorf(codes.Unimplemented, "xds: malformed method name %q", info.FullMethodName)
	}
	// 2. The chain's current routes: an inline RouteConfiguration, or the
	// last answer for its RDS resource (gRFC A36: a missing or broken one
	// fails every RPC).
	rt := t.src.Load()
	if rt.err != nil {
		return ctx, status.Errorf(codes.Unavailable, "xds: filter chain %q: %v", t.chain, rt.err)
	}
	// 3. Virtual host by :authority, route by path and headers (gRFC A28).
	var authority string
	if a := info.Header[":authority"]; len(a) > 0 {
		authority = a[0]
	}
	route, ok := rt.router.Match(authority, info.FullMethodName, info.Header)
	if !ok {
		return ctx, status.Errorf(codes.Unavailable, "xds: RouteConfiguration %q has no virtual host and route matching authority %q and method %q", rt.router.Name(), authority, info.FullMethodName)
	}
	// 4. The chain's HTTP filters (gRFC A39), their configs merged with the
	// route's overrides when the routes were applied, in order, then (5.)
	// the action check (gRFC A36): one sequence, which moves to the RPC's
	// goroutine at the first step that leaves work for after the tap
	// (pipeline.go). The router is the last filter; its work is the route
	// match above and the action check.
	steps := rt.stepsOf(route)
	if len(steps) == 0 {
		return ctx, actionCheck(rt, route)
	}
	rpc := rpcInfo(ctx, info, authority)
	rpc.Conn = t.conn
	if t.localID != nil {
		ctx = httpfilter.WithLocalIdentity(ctx, t.localID)
	}
	return runSteps(ctx, rpc, steps, t.defers, rt, route)
}

// actionCheck is the end of an RPC's filter sequence (gRFC A36): a route
// whose action is not non_forwarding_action fails the RPCs that reach it
// with UNAVAILABLE.
func actionCheck(rt *Routes, route *routing.Route) error {
	if route.Action == routing.ActionNonForwarding {
		return nil
	}
	return status.Errorf(codes.Unavailable, "xds: RouteConfiguration %q, virtual host %q, route %d %q: action is %v, not non_forwarding_action", rt.router.Name(), route.VirtualHost, route.Index, route.Name, route.Action)
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
	router *routing.Router     // nil when err is set
	steps  [][]httpfilter.Step // by Route.ID; nil when no route has a step
	err    error               // why RPCs fail with UNAVAILABLE
}

// Unavailable returns Routes that fail every RPC with UNAVAILABLE and err's
// text (an RDS resource that does not exist, was NACKed without a good
// version, or cannot be fetched: gRFC A36).
func Unavailable(err error) *Routes { return &Routes{err: err} }

// Router returns the router; nil for Unavailable routes.
func (r *Routes) Router() *routing.Router { return r.router }

// Err returns why every RPC fails; nil when there is a router.
func (r *Routes) Err() error { return r.err }

// stepsOf returns the steps to run on route. It does not allocate.
func (r *Routes) stepsOf(route *routing.Route) []httpfilter.Step {
	if r.steps == nil {
		return nil
	}
	return r.steps[route.ID]
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
