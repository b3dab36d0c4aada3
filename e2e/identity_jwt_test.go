package e2e_test

import (
	"net"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	pubxdsclient "github.com/proxyless-grpc/xds/xdsclient"
)

// jwtServer creates an xDS server for env's bootstrap with a short
// reconnection backoff (an xDS client of its own), serving on 127.0.0.1.
func (e *jwtEnv) jwtServer(t *testing.T) (*testServer, net.Listener) {
	t.Helper()
	pool := xdsclient.NewPool(xdsclient.Options{Backoff: func(int) time.Duration { return 50 * time.Millisecond }})
	s := e.newServer(t, xds.ClientPool(xdsclient.WrapPool(pool).(*pubxdsclient.Pool)))
	lis, _ := listen(t, "127.0.0.1")
	return s, lis
}

// TestIdentityJWT: a server whose bootstrap has jwt_token_file call
// credentials (gRFC A97) over TLS channel credentials (gRFC A65) gets its
// configuration from a management server that refuses any ADS stream
// without a valid bearer token.
func TestIdentityJWT(t *testing.T) {
	ctx := testContext(t)
	env := newJWTEnv(t)
	env.writeToken(t, env.token(t, "spiffe://cluster.local/ns/default/sa/greeter", env.key))
	s, lis := env.jwtServer(t)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	s.serveOn(lis)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	if ev := env.checker.next(ctx, t); !ev.accepted || ev.sub != "spiffe://cluster.local/ns/default/sa/greeter" {
		t.Errorf("the management server saw %+v, want the token of the greeter accepted", ev)
	}
	if code := newClient(t, lis.Addr(), "127.0.0.1", 0).emptyCall(ctx); code != codes.OK {
		t.Errorf("EmptyCall: %v, want OK", code)
	}
}

// TestIdentityJWTRefused: without a valid token the management server
// never sends the Listener: the server does not serve, and the reason is
// logged. A missing token file is not sent at all, and a good token written
// later is picked up at the next attempt.
func TestIdentityJWTRefused(t *testing.T) {
	tests := []struct {
		desc string
		// setup writes the token file (or not) and returns whether the
		// management server is expected to see (and refuse) streams.
		setup     func(t *testing.T, e *jwtEnv) (sent bool)
		noToken   bool // a bootstrap without call_creds
		wantLog   string
		wantCode  string
		recovered bool // a good token is then written and the server serves
	}{
		{desc: "missing token file", setup: func(t *testing.T, e *jwtEnv) bool { return false },
			wantLog: "jwt_token_file", wantCode: "Unavailable", recovered: true},
		{desc: "token file not a JWT", setup: func(t *testing.T, e *jwtEnv) bool { e.writeToken(t, "not-a-token"); return false },
			wantLog: "want a JWT", wantCode: "Unauthenticated", recovered: true},
		{desc: "token signed by another issuer", setup: func(t *testing.T, e *jwtEnv) bool {
			e.writeToken(t, e.token(t, "intruder", []byte("another key")))
			return true
		}, wantLog: "bad signature", wantCode: "Unauthenticated", recovered: true},
		{desc: "token revoked by the management server", setup: func(t *testing.T, e *jwtEnv) bool {
			e.checker.revoke("greeter")
			e.writeToken(t, e.token(t, "greeter", e.key))
			return true
		}, wantLog: "revoked", wantCode: "Unauthenticated"},
		{desc: "bootstrap without call_creds", noToken: true, setup: func(t *testing.T, e *jwtEnv) bool { return true },
			wantLog: "want one authorization header", wantCode: "Unauthenticated"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ctx := testContext(t)
			env := newJWTEnv(t)
			if tc.noToken {
				env.bootstrap = env.bootstrapJSON(t, env.nodeID, false)
			}
			sent := tc.setup(t, env)
			s, lis := env.jwtServer(t)
			env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
			s.serveOn(lis)

			logs := warningsOf("xdsclient: ADS stream to \"" + env.ms.Address + "\" failed")
			logs.waitCount(ctx, t, 2, tc.wantCode, tc.wantLog, env.nodeID)
			if sent {
				if ev := env.checker.next(ctx, t); ev.accepted {
					t.Fatalf("the management server accepted %+v, want it refused", ev)
				}
			} else {
				select {
				case ev := <-env.checker.events:
					t.Fatalf("the management server saw a stream %+v, want none (no token to send)", ev)
				default:
				}
			}
			s.modes.expectNone(t, lis.Addr(), defaultTestShortTimeout)
			expectClosedNoBytes(t, lis.Addr(), "127.0.0.1")
			if !tc.recovered {
				return
			}
			env.writeToken(t, env.token(t, "greeter", env.key))
			s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
			env.checker.waitAccepted(ctx, t, "greeter")
		})
	}
}

// TestIdentityJWTRotated: a token rotated in its file while the old one is
// still valid is used by the next ADS stream. The management server
// revokes the old token and restarts (as istiod's connections end, at the
// latest at its maximum connection age); the server reconnects with the
// new token, keeps serving throughout, and applies configuration sent on
// the new stream.
func TestIdentityJWTRotated(t *testing.T) {
	ctx := testContext(t)
	env := newJWTEnv(t)
	env.writeToken(t, env.token(t, "old", env.key))
	s, lis := env.jwtServer(t)
	env.update(ctx, t, []*listenerpb.Listener{testListener(lis.Addr(), []chainSpec{{name: "A"}}, nil)}, nil)
	s.serveOn(lis)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	env.checker.waitAccepted(ctx, t, "old")
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)
	c.waitForChain(ctx, t, "A", "A", "B")

	env.writeToken(t, env.token(t, "new", env.key))
	env.checker.revoke("old")
	e2e.RestartManagementServer(t, env.ms)
	env.checker.waitAccepted(ctx, t, "new")

	env.update(ctx, t, []*listenerpb.Listener{testListener(lis.Addr(), []chainSpec{{name: "B"}}, nil)}, nil)
	c.waitForChain(ctx, t, "B", "A", "B")
	s.modes.expectNoneBy(ctx, t, env.ms, lis.Addr())
}
