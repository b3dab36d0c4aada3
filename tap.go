package xds

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/proxyless-grpc/xds/internal/routing"
)

// tap is the grpc.InTapHandle of every grpc.Server of cs: the xDS part of
// each RPC (gRFC A36). It runs when the RPC's headers arrive, before gRPC
// looks up the method and before any user interceptor, so an RPC refused here
// never reaches user code. It picks the virtual host by :authority and the
// route by path and headers, runs the chain's HTTP filters, and lets the RPC
// through only on a non_forwarding_action route; every refusal by routing is
// UNAVAILABLE saying why, a refusal by a filter has the filter's status (RBAC:
// PERMISSION_DENIED).
//
// gRPC calls it with a transport lock held, so it does only the route match
// and the precomputed filter steps: one atomic load, no lock, no map shared
// by all RPCs, no allocation unless the RPC is refused (or a filter
// allocates).
func (cs *chainServer) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	// A :path that is not "/service/method" is refused before routing and
	// RBAC see it, as gRPC refuses it after them: a DENY on a path must not
	// be side-stepped by a malformed one (grpc-go v1.79.3), and routes and
	// audit logs see only well-formed methods.
	if !wellFormedMethod(info.FullMethodName) {
		return ctx, status.Errorf(codes.Unimplemented, "xds: malformed method name %q", info.FullMethodName)
	}
	rt := cs.routes.load()
	if rt.err != nil {
		return ctx, status.Errorf(codes.Unavailable, "xds: filter chain %q: %v", cs.chain.Name, rt.err)
	}
	var authority string
	if a := info.Header[":authority"]; len(a) > 0 {
		authority = a[0]
	}
	route, ok := rt.router.Match(authority, info.FullMethodName, info.Header)
	if !ok {
		return ctx, status.Errorf(codes.Unavailable, "xds: RouteConfiguration %q has no virtual host and route matching authority %q and method %q", rt.router.Name(), authority, info.FullMethodName)
	}
	// The chain's HTTP filters (gRFC A39), with their configs merged with
	// the route's overrides when the routes were applied, run in order
	// before the action check (gRFC A36). The router is the last filter; its
	// work is the route match above and the action check below.
	steps, ok := rt.steps(cs.chain.HCM, route)
	if !ok {
		return ctx, noFilters(cs.chain)
	}
	if len(steps) > 0 {
		rpc := rpcInfo(ctx, info, authority)
		for _, s := range steps {
			var err error
			if ctx, err = s.Run(ctx, rpc); err != nil {
				return ctx, err
			}
		}
	}
	// gRFC A36: a route of another action fails the RPCs that reach the end
	// of the filter chain.
	if route.Action != routing.ActionNonForwarding {
		return ctx, status.Errorf(codes.Unavailable, "xds: RouteConfiguration %q, virtual host %q, route %d %q: action is %v, not non_forwarding_action", rt.router.Name(), route.VirtualHost, route.Index, route.Name, route.Action)
	}
	return ctx, nil
}

// wellFormedMethod reports whether m is "/service/method", as gRPC's
// server requires of :path to dispatch an RPC: a leading '/' and another
// '/' after it.
func wellFormedMethod(m string) bool {
	return len(m) > 1 && m[0] == '/' && strings.LastIndexByte(m, '/') > 0
}
