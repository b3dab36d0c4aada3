package istio

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// authorizationPolicy is an AuthorizationPolicy of the echo namespace named
// name, with the given action and rules (YAML, indented for spec.rules).
func authorizationPolicy(name, action, rules string) string {
	return fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: %s
  namespace: echo
spec:
  action: %s
  rules:
%s`, name, action, rules)
}

// Method paths as AuthorizationPolicies name them.
const (
	unaryCallPath = "/grpc.testing.TestService/UnaryCall"
	emptyCallPath = "/grpc.testing.TestService/EmptyCall"
)

// mtlsMesh is the configuration under the AuthorizationPolicy tests:
// STRICT mTLS, so that the server knows each client's identity.
var mtlsMesh = yamlDocs(peerAuthentication("STRICT"), istioMutual)

// rpcCheck is an RPC a workload makes, and the status code it must get.
type rpcCheck struct {
	from   workload
	method rpc
	want   codes.Code
}

// TestAuthorizationPolicy: AuthorizationPolicies on the echo namespace, as
// istiod turns them into the server's RBAC filters, allow or deny the RPCs
// of two clients (grpc-go's xDS client running as the "client" and the
// "other" workload, each with its own namespace and service account) over
// mTLS.
func TestAuthorizationPolicy(t *testing.T) {
	client := fmt.Sprintf("cluster.local/ns/%s/sa/%s", clientPod.namespace, clientPod.serviceAccount)
	other := fmt.Sprintf("cluster.local/ns/%s/sa/%s", otherPod.namespace, otherPod.serviceAccount)
	tests := []struct {
		desc     string
		policies []string
		checks   []rpcCheck
	}{
		{
			desc: "ALLOW by principal",
			policies: []string{authorizationPolicy("allow-client", "ALLOW", fmt.Sprintf(`
  - from:
    - source:
        principals: [%q]
`, client))},
			checks: []rpcCheck{
				{clientPod, unaryCall, codes.OK},
				{clientPod, emptyCall, codes.OK},
				{otherPod, unaryCall, codes.PermissionDenied},
				{otherPod, emptyCall, codes.PermissionDenied},
			},
		},
		{
			desc: "ALLOW by namespace",
			policies: []string{authorizationPolicy("allow-client-ns", "ALLOW", fmt.Sprintf(`
  - from:
    - source:
        namespaces: [%q]
`, clientPod.namespace))},
			checks: []rpcCheck{
				{clientPod, unaryCall, codes.OK},
				{clientPod, emptyCall, codes.OK},
				{otherPod, unaryCall, codes.PermissionDenied},
				{otherPod, emptyCall, codes.PermissionDenied},
			},
		},
		{
			desc: "ALLOW by path",
			policies: []string{authorizationPolicy("allow-unary", "ALLOW", fmt.Sprintf(`
  - to:
    - operation:
        paths: [%q]
`, unaryCallPath))},
			checks: []rpcCheck{
				{clientPod, unaryCall, codes.OK},
				{clientPod, emptyCall, codes.PermissionDenied},
				{otherPod, unaryCall, codes.OK},
				{otherPod, emptyCall, codes.PermissionDenied},
			},
		},
		{
			desc: "DENY by principal",
			policies: []string{authorizationPolicy("deny-other", "DENY", fmt.Sprintf(`
  - from:
    - source:
        principals: [%q]
`, other))},
			checks: []rpcCheck{
				{clientPod, unaryCall, codes.OK},
				{clientPod, emptyCall, codes.OK},
				{otherPod, unaryCall, codes.PermissionDenied},
				{otherPod, emptyCall, codes.PermissionDenied},
			},
		},
		{
			// The client is allowed everything, but denied EmptyCall: a DENY
			// wins over an ALLOW.
			desc: "DENY over ALLOW",
			policies: []string{
				authorizationPolicy("allow-client", "ALLOW", fmt.Sprintf(`
  - from:
    - source:
        principals: [%q]
`, client)),
				authorizationPolicy("deny-empty", "DENY", fmt.Sprintf(`
  - from:
    - source:
        principals: [%q]
    to:
    - operation:
        paths: [%q]
`, client, emptyCallPath)),
			},
			checks: []rpcCheck{
				{clientPod, unaryCall, codes.OK},
				{clientPod, emptyCall, codes.PermissionDenied},
				{otherPod, unaryCall, codes.PermissionDenied},
				{otherPod, emptyCall, codes.PermissionDenied},
			},
		},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			m := newMesh(t, meshSpec{config: yamlDocs(append([]string{mtlsMesh}, test.policies...)...)})
			m.startEcho(t)
			clients := map[workload]*grpc.ClientConn{clientPod: m.xdsClient(t, clientPod), otherPod: m.xdsClient(t, otherPod)}
			for _, c := range test.checks {
				got, err := call(testContext(t), clients[c.from], c.method)
				if got.code != c.want {
					t.Errorf("%s from %s: got %v (%v), want %v", c.method, c.from.name, got.code, err, c.want)
				}
				if got.code == codes.OK && got.serverID != echoPod.spiffeID() {
					t.Errorf("%s from %s: served over %v, want mTLS with %s", c.method, c.from.name, got, echoPod.spiffeID())
				}
				if c.method == unaryCall && got.code == codes.OK && got.clientID != c.from.spiffeID() {
					t.Errorf("%s from %s: the handler saw %q, want %q", c.method, c.from.name, got.clientID, c.from.spiffeID())
				}
			}
		})
	}
}
