package xds

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"reflect"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/proxyless-grpc/xds/filterchain"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/rbacfilter"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/routing"
)

// routeFilters are the HTTP filter steps (gRFC A39) of one
// HttpConnectionManager's filter list over one Router: steps[route.ID] are
// the steps to run for an RPC on that route, in filter order, leaving out
// filters with nothing to do there. Immutable.
type routeFilters struct {
	hcm   *filterchain.HTTPConnectionManager
	steps [][]httpfilter.Step // nil when no route has a step
}

// buildRouteFilters builds the steps of hcm's filters for every route of r:
// each filter instance's config merged with the route's override (the
// route's over its virtual host's, already merged by routing). Identical
// (instance, config, override) triples share one step, and routes with the
// same steps share one slice. A step that fails to build fails its route's
// RPCs with UNAVAILABLE: fail closed, never open.
func buildRouteFilters(hcm *filterchain.HTTPConnectionManager, r *routing.Router, m *metrics.Listener) *routeFilters {
	rf := &routeFilters{hcm: hcm}
	routes := r.Routes()
	memo := make(map[stepKey]httpfilter.Step)
	var prev []httpfilter.Step
	for _, rt := range routes {
		var steps []httpfilter.Step
		for _, in := range hcm.Filters {
			override := rt.FilterOverrides[in.Name]
			if !in.Active(override) {
				continue
			}
			if s := buildStep(memo, in, override, m); s != nil {
				steps = append(steps, s)
			}
		}
		if len(steps) == 0 {
			continue
		}
		if rf.steps == nil {
			rf.steps = make([][]httpfilter.Step, len(routes))
		}
		if sameSteps(steps, prev) {
			steps = prev
		}
		rf.steps[rt.ID], prev = steps, steps
	}
	return rf
}

// stepKey identifies a step by its inputs, when they are comparable.
type stepKey struct {
	name             string
	config, override httpfilter.Config
}

func buildStep(memo map[stepKey]httpfilter.Step, in httpfilter.Instance, override httpfilter.Config, m *metrics.Listener) httpfilter.Step {
	key := stepKey{name: in.Name, config: in.Config, override: override}
	comparable := isComparable(in.Config) && isComparable(override)
	if comparable {
		if s, ok := memo[key]; ok {
			return s
		}
	}
	s, err := in.Filter.BuildStep(in.Name, in.Config, override)
	if err != nil {
		s = failStep{err: status.Errorf(codes.Unavailable, "xds: HTTP filter %q: %v", in.Name, err)}
	}
	if rs, ok := s.(*rbacfilter.Step); ok && m != nil {
		s = countedRBACStep{step: rs, rec: m.RBAC(in.Name)}
	}
	if comparable {
		memo[key] = s
	}
	return s
}

func isComparable(c httpfilter.Config) bool {
	return c == nil || reflect.ValueOf(c).Comparable()
}

func sameSteps(a, b []httpfilter.Step) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// countedRBACStep is an RBAC step whose decisions are counted in the
// grpc.xds_server.rbac.decisions metric. It is used only when the server has
// a MeterProvider, so a server without metrics pays nothing for it.
type countedRBACStep struct {
	step *rbacfilter.Step
	rec  *metrics.RBAC
}

func (s countedRBACStep) Run(ctx context.Context, rpc httpfilter.RPC) (context.Context, error) {
	ctx, err := s.step.Run(ctx, rpc)
	switch {
	case err == nil:
		s.rec.Allowed(ctx)
	case status.Code(err) == codes.PermissionDenied:
		s.rec.Denied(ctx)
	}
	return ctx, err
}

// failStep fails every RPC of its route with err.
type failStep struct{ err error }

func (s failStep) Run(ctx context.Context, _ httpfilter.RPC) (context.Context, error) {
	return ctx, s.err
}

// newRouteTable returns the table of router for the HttpConnectionManagers
// hcms, with their filter steps precomputed.
func newRouteTable(router *routing.Router, hcms []*filterchain.HTTPConnectionManager, m *metrics.Listener) *routeTable {
	rt := &routeTable{router: router}
	for _, h := range hcms {
		rt.filters = append(rt.filters, buildRouteFilters(h, router, m))
	}
	return rt
}

// forUsers returns a table of rt's router with the steps of exactly hcms:
// rt itself when it has those already, else a new table reusing rt's steps
// of the HttpConnectionManagers still in hcms (so that the steps of ones no
// longer used are dropped). rt is not modified.
func (rt *routeTable) forUsers(hcms []*filterchain.HTTPConnectionManager, m *metrics.Listener) *routeTable {
	if rt == nil || rt.router == nil {
		return rt
	}
	same := len(hcms) == len(rt.filters)
	for _, h := range hcms {
		same = same && rt.has(h)
	}
	if same {
		return rt
	}
	out := &routeTable{router: rt.router, filters: make([]*routeFilters, 0, len(hcms))}
	for _, h := range hcms {
		f := rt.find(h)
		if f == nil {
			f = buildRouteFilters(h, rt.router, m)
		}
		out.filters = append(out.filters, f)
	}
	return out
}

func (rt *routeTable) find(hcm *filterchain.HTTPConnectionManager) *routeFilters {
	for _, f := range rt.filters {
		if f.hcm == hcm {
			return f
		}
	}
	return nil
}

func (rt *routeTable) has(hcm *filterchain.HTTPConnectionManager) bool { return rt.find(hcm) != nil }

// steps returns the filter steps of route for the chains of hcm; ok is
// false when the table has no steps for hcm (it then must not serve the
// RPC). It does not allocate.
func (rt *routeTable) steps(hcm *filterchain.HTTPConnectionManager, route *routing.Route) (steps []httpfilter.Step, ok bool) {
	for _, f := range rt.filters {
		if f.hcm == hcm {
			if f.steps == nil {
				return nil, true
			}
			return f.steps[route.ID], true
		}
	}
	return nil, false
}

// rpcInfo describes an RPC to filter steps: the method is :path, the peer's
// and the local address come from the connection, and so does TLS.
func rpcInfo(ctx context.Context, info *tap.Info, authority string) httpfilter.RPC {
	rpc := httpfilter.RPC{FullMethod: info.FullMethodName, Authority: authority, Header: info.Header}
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

// addrPort converts a TCP address; the zero value for other kinds.
func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case interface{ AddrPort() netip.AddrPort }:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// noFilters is the error of an RPC whose chain has no filter steps in the
// route table: a configuration is being switched over. Fail closed.
func noFilters(fc *filterchain.FilterChain) error {
	return status.Error(codes.Unavailable, fmt.Sprintf("xds: filter chain %q: HTTP filters are not ready for the current routes", fc.Name))
}
