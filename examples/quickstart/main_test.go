package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestRun runs the demo and checks that it tells the whole story, in order.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	story := out.String()
	rest := story
	for _, want := range []string{
		"] 1. ",
		"client:   UnaryCall failed with code Unavailable: the server closes every connection",
		"] 2. ",
		"callback: the server is SERVING\n",
		`client:   UnaryCall succeeded: "Hello, newcomer"`,
		"] 3. ",
		"client:   UnaryCall as mallory failed with code PermissionDenied: RBAC: access denied",
		`client:   UnaryCall as alice succeeded: "Hello, alice"`,
		"opened a FullDuplexCall stream",
		"] 4. ",
		`client:   UnaryCall failed with code Unavailable: xds: RouteConfiguration "greeter-routes", virtual host "all", route 0 "unary-to-a-cluster": action is route, not non_forwarding_action`,
		"client:   EmptyCall succeeded.",
		"no new dial",
		"] 5. ",
		"client:   EmptyCall as mallory succeeded, on a new connection",
		"the stream opened before the update exchanged another message and ended OK.",
		"server:   that stream's connection",
		"] 6. ",
		`xDS client "#server" of node "quickstart-server":`,
		"Listener            grpc/server?xds.resource.listening_address=127.0.0.1:",
		"ACKED\n",
		"RouteConfiguration  greeter-routes",
		"ACKED\n",
		"] 7. ",
		"client:   with alice's certificate: EmptyCall succeeded over mTLS; the server is spiffe://quickstart.example/greeter.",
		"client:   without a certificate: EmptyCall failed with code Unavailable: the server refused the TLS handshake.",
		"] 8. ",
		"callback: the server is NOT_SERVING (",
		"does not exist",
		"] 9. Stopped the server and the control plane. Done.\n",
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("the output lacks %q after what came before it; output:\n%s", want, story)
		}
		rest = rest[i+len(want):]
	}
	if n := strings.Count(story, "callback:"); n != 2 {
		t.Errorf("the output has %d serving-mode callbacks, want 2 (SERVING, NOT_SERVING); output:\n%s", n, story)
	}
	// Every step is timestamped.
	if !regexp.MustCompile(`(?m)^\[\+\d+\.\d\ds\] 9\. `).MatchString(story) {
		t.Errorf("the steps are not timestamped like [+0.12s]; output:\n%s", story)
	}
}
