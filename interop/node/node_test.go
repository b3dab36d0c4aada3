package node

import (
	"context"
	"strings"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/codes"

	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// startServing publishes the server's Listener, with chains, and the Node
// client's resources, and waits until the server serves.
func startServing(ctx context.Context, e *env, tls bool, chains ...*listenerpb.FilterChain) {
	e.t.Helper()
	host, port := e.hostPort()
	e.publish(ctx, serverListener(host, port, chains...), tls)
	e.waitServing(ctx)
}

// wantCode fails the test if l's RPC did not end with code.
func wantCode(t *testing.T, l rpcLine, code codes.Code) {
	t.Helper()
	if l.Code != code {
		t.Errorf("Node client: %v, want %v", l, code)
	}
}

// A plaintext chain (no transport socket: the server's fallback
// credentials) serves the Node client, whose cluster has no TLS either (its
// xDS credentials' fallback).
func TestPlaintext(t *testing.T) {
	ctx := testContext(t)
	e := newEnv(t)
	client := e.nodeClient(nil)
	startServing(ctx, e, false, filterChain(t, "plaintext", allRoutes("routes"), nil))

	lines := client.calls(ctx, t, "Who", "Ping")
	wantCode(t, lines[0], codes.OK)
	wantCode(t, lines[1], codes.OK)
	if got := lines[0].Reply["security"]; got != "insecure" {
		t.Errorf("the server saw security %q, want insecure", got)
	}
	if got := lines[0].TransportSecurity; got == "ssl" {
		t.Errorf("the Node client reports transport security %q, want none", got)
	}
	if got := lines[0].Reply["peer"]; !strings.HasPrefix(got, "127.0.0.1:") {
		t.Errorf("the server saw the Node client at %q, want 127.0.0.1:<port>", got)
	}
}

// mTLS, configured by the control plane on both sides: the server's chain
// requires a client certificate, the Node client's cluster carries an
// UpstreamTlsContext. A client certificate of the CA the server trusts is
// accepted, and each side sees the other's certificate.
func TestMTLSSameCA(t *testing.T) {
	ctx := testContext(t)
	e := newEnv(t)
	const spiffeID = "spiffe://interop.test/ns/node/sa/client"
	leaf := e.pki.ca.Issue(t, testcerts.LeafOptions{CommonName: "node-client", URIs: []string{spiffeID}})
	client := e.nodeClient(leaf)
	startServing(ctx, e, true, filterChain(t, "mtls", allRoutes("routes"), downstreamMTLS()))

	l := client.calls(ctx, t, "Who")[0]
	wantCode(t, l, codes.OK)
	if l.Code != codes.OK {
		return
	}
	if l.TransportSecurity != "ssl" {
		t.Errorf("the Node client reports transport security %q, want ssl", l.TransportSecurity)
	}
	if got, want := l.ServerCertSHA256, certSHA256(e.pki.server.Cert.Raw); got != want {
		t.Errorf("the Node client saw server certificate %s (CN %q), want %s (the server provider's)", got, l.ServerCertCN, want)
	}
	if got := l.Reply["security"]; got != "tls" {
		t.Errorf("the server saw security %q, want tls", got)
	}
	if got, want := l.Reply["client_cert_sha256"], certSHA256(leaf.Cert.Raw); got != want {
		t.Errorf("the server saw client certificate %q, want %s (the Node client provider's)", got, want)
	}
	if got := l.Reply["client_spiffe_id"]; got != spiffeID {
		t.Errorf("the server saw SPIFFE ID %q, want %q", got, spiffeID)
	}
}

// A client certificate of a CA the server does not trust is refused by the
// handshake: the RPC fails UNAVAILABLE, never reaches the service, and the
// server logs the failed handshake.
func TestMTLSOtherCA(t *testing.T) {
	logs := recordWarnings(t) // first: restored after the server stopped
	ctx := testContext(t)
	e := newEnv(t)
	leaf := e.pki.otherCA.Issue(t, testcerts.LeafOptions{CommonName: "intruder", URIs: []string{"spiffe://elsewhere.test/intruder"}})
	client := e.nodeClient(leaf)
	startServing(ctx, e, true, filterChain(t, "mtls", allRoutes("routes"), downstreamMTLS()))

	l := client.calls(ctx, t, "Who")[0]
	wantCode(t, l, codes.Unavailable)
	t.Logf("Node client: %v", l)
	if n := e.svc.whoCalls.Load(); n != 0 {
		t.Errorf("the service answered %d Who RPC(s), want none", n)
	}
	w := logs.waitFor(ctx, t, "TLS handshake", `"mtls"`)
	t.Logf("server warning: %s", w)
}

// An RBAC HTTP filter that denies one method: the Node client gets
// PERMISSION_DENIED for it and OK for another; the denied RPC never reaches
// the service.
func TestRBACDenial(t *testing.T) {
	ctx := testContext(t)
	e := newEnv(t)
	client := e.nodeClient(nil)
	startServing(ctx, e, false, filterChain(t, "rbac", allRoutes("routes"), nil, rbacDenying(t, methodPing)))

	lines := client.calls(ctx, t, "Who", "Ping")
	wantCode(t, lines[0], codes.OK)
	wantCode(t, lines[1], codes.PermissionDenied)
	if n := e.svc.pingCalls.Load(); n != 0 {
		t.Errorf("the service answered %d Ping RPC(s), want none", n)
	}
}

// A route whose action is not non_forwarding_action (a `route` action, for
// one method) refuses that method with UNAVAILABLE; the others still go
// through.
func TestForwardingRouteRefused(t *testing.T) {
	ctx := testContext(t)
	e := newEnv(t)
	client := e.nodeClient(nil)
	startServing(ctx, e, false, filterChain(t, "routes", routesForwarding("routes", methodPing), nil))

	lines := client.calls(ctx, t, "Who", "Ping")
	wantCode(t, lines[0], codes.OK)
	wantCode(t, lines[1], codes.Unavailable)
	if n := e.svc.pingCalls.Load(); n != 0 {
		t.Errorf("the service answered %d Ping RPC(s), want none", n)
	}
}

// A Listener update pushed while the Node client runs RPCs on four
// concurrent workers: the changed filter chain drains the client's
// connection, the client moves to a new one, and no RPC fails.
func TestListenerUpdateDuringRPCs(t *testing.T) {
	const minRPCs = 50 // before the update, and on new connections after it
	ctx := testContext(t)
	e := newEnv(t)
	client := e.nodeClient(nil)
	startServing(ctx, e, false, filterChain(t, "chain-v1", allRoutes("routes-v1"), nil))

	loop := client.loop(ctx, t, 4)
	var before map[string]bool // peers (client addresses) the server saw before the update
	loop.waitFor(ctx, "RPCs before the update", func(lines []rpcLine) bool {
		before = okPeers(lines)
		return countOK(lines, nil) >= minRPCs
	})

	host, port := e.hostPort()
	e.updateServerListener(ctx, serverListener(host, port,
		filterChain(t, "chain-v2", allRoutes("routes-v2"), nil, rbacDenying(t, methodPing))))
	loop.waitFor(ctx, "RPCs on a new connection after the update", func(lines []rpcLine) bool {
		return countOK(lines, before) >= minRPCs
	})

	lines, sum := loop.stop(ctx)
	var failed []rpcLine
	for _, l := range lines {
		if l.Code != codes.OK {
			failed = append(failed, l)
		}
	}
	after := countOK(lines, before)
	t.Logf("Node client: %d RPCs in %.1fs: %d OK on the connection(s) of before the update %v, %d OK on new connections",
		len(lines), sum.Seconds, countOK(lines, nil)-after, keys(before), after)
	if len(failed) > 0 || sum.Failed > 0 {
		t.Errorf("%d RPC(s) failed (summary: %d), want none; first: %v", len(failed), sum.Failed, failed[:min(len(failed), 5)])
	}
	if sum.OK != len(lines)-len(failed) {
		t.Errorf("client.js summary says %d OK, its lines %d", sum.OK, len(lines)-len(failed))
	}
}

// countOK counts the OK RPCs the server answered on a connection not in
// exclude.
func countOK(lines []rpcLine, exclude map[string]bool) int {
	n := 0
	for _, l := range lines {
		if l.Code == codes.OK && !exclude[l.Reply["peer"]] {
			n++
		}
	}
	return n
}

// okPeers is the set of client addresses of the OK RPCs.
func okPeers(lines []rpcLine) map[string]bool {
	peers := make(map[string]bool)
	for _, l := range lines {
		if l.Code == codes.OK {
			peers[l.Reply["peer"]] = true
		}
	}
	return peers
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
