// Package istio holds the interop tests of github.com/proxyless-grpc/xds with
// a real istiod: istio's own discovery server and proxyless gRPC generator,
// run in process on loopback (istio.io/istio/pilot/test/xds), configured with
// Kubernetes objects and Istio resources written as YAML. The server under
// test gets the bootstrap istio-agent writes for proxyless workloads; its
// clients are grpc-go's own xds:/// client, given its configuration by the
// same istiod, and plain gRPC clients that dial the server directly. It
// also runs the ext_proc filter against a third-party processor from
// istio's module, the echo server's endpoint picker.
//
// The package has no code of its own: it is a separate module so that the
// library's go.mod does not depend on istio.
package istio
