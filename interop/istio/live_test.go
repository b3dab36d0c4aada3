package istio

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// TestLiveAuthorizationPolicyChange: an AuthorizationPolicy created while
// the server runs denies the RPCs it names from then on, without failing a
// stream already running; deleting it allows them again.
func TestLiveAuthorizationPolicyChange(t *testing.T) {
	m := newMesh(t, meshSpec{config: mtlsMesh})
	m.startEcho(t)
	client, other := m.xdsClient(t, clientPod), m.xdsClient(t, otherPod)
	otherOK := result{code: codes.OK, clientID: otherPod.spiffeID(), security: "mtls", serverID: echoPod.spiffeID()}
	expect(t, client, unaryCall, mtlsFromClient)
	expect(t, other, unaryCall, otherOK)

	// A stream of the other workload, open across the change.
	ctx := testContext(t)
	stream, err := testgrpc.NewTestServiceClient(other).FullDuplexCall(ctx)
	if err != nil {
		t.Fatalf("FullDuplexCall: %v", err)
	}
	roundTrip := func(msg string) {
		t.Helper()
		if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(msg)}}); err != nil {
			t.Fatalf("stream Send(%q): %v", msg, err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream Recv after Send(%q): %v", msg, err)
		}
		if got := string(resp.GetPayload().GetBody()); got != msg {
			t.Fatalf("stream echoed %q, want %q", got, msg)
		}
	}
	roundTrip("before")

	denyOther := authorizationPolicy("deny-other", "DENY", fmt.Sprintf(`
  - from:
    - source:
        principals: ["cluster.local/ns/%s/sa/%s"]
`, otherPod.namespace, otherPod.serviceAccount))
	m.apply(t, denyOther)
	awaitResult(t, other, unaryCall, result{code: codes.PermissionDenied})
	expect(t, client, unaryCall, mtlsFromClient)

	// The stream began before the policy: it keeps running to its end.
	roundTrip("after")
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("stream CloseSend: %v", err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: got %v, want io.EOF (status OK)", err)
	}

	m.remove(t, denyOther)
	awaitResult(t, other, unaryCall, otherOK)
	expect(t, client, unaryCall, mtlsFromClient)
}

// TestLiveDisableToStrict: the echo namespace goes from mTLS DISABLE to
// STRICT (with a DestinationRule for its clients) while the server runs.
// Plaintext clients that were served are refused from then on, including
// on the client connection they had; grpc-go's xDS client switches to mTLS.
func TestLiveDisableToStrict(t *testing.T) {
	m := newMesh(t, meshSpec{config: peerAuthentication("DISABLE")})
	es := m.startEcho(t)
	xdsClient, plaintext := m.xdsClient(t, clientPod), es.directPlaintext(t)
	expect(t, xdsClient, unaryCall, plaintextOK)
	expect(t, plaintext, unaryCall, plaintextOK)

	m.apply(t, yamlDocs(peerAuthentication("STRICT"), istioMutual))
	awaitResult(t, xdsClient, unaryCall, mtlsFromClient)
	awaitResult(t, plaintext, unaryCall, refused)
	expect(t, es.directPlaintext(t), unaryCall, refused)
}
