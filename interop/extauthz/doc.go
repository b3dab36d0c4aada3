// Package extauthz is an interop test: Open Policy Agent's Envoy plugin
// (github.com/open-policy-agent/opa-envoy-plugin), run in the test process as
// an envoy.service.auth.v3.Authorization server on loopback with a Rego
// policy, decides the RPCs of this library's xDS server through its ext_authz
// HTTP filter. It is a module of its own, so that the library's go.mod gains
// nothing from OPA. See README.md.
package extauthz
