package matcher

import "encoding/base64"

// WireBinary returns a binary ("-bin") header's value as it is on the wire
// when a gRPC client sends it: base64, standard alphabet, without padding.
// gRPC's HTTP/2 protocol asks senders to leave the padding out (grpc-go,
// grpc-java and C-core do), and receivers to accept it either way; gRPC
// then hands the server the decoded bytes, so this is the form an Envoy in
// front of the server would have seen. It is the one view of a binary
// header for whatever matches request headers as Envoy does: RBAC (gRFC
// A41 matches on-the-wire values, "binary headers ... in their
// base64-encoded form") and the rate limit actions' descriptors.
func WireBinary(v string) string {
	return base64.RawStdEncoding.EncodeToString([]byte(v))
}
