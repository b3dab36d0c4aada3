package testutils

import (
	"encoding/base64"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// PeerMetadata returns the value of an x-envoy-peer-metadata header that
// carries fields: base64 of a deterministically serialized
// google.protobuf.Struct, padded as an Envoy sidecar writes it (istio/proxy's
// metadata exchange) or unpadded as grpc-go's CSM plugin writes it.
func PeerMetadata(t testing.TB, fields map[string]any, padded bool) string {
	t.Helper()
	s, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if padded {
		return base64.StdEncoding.EncodeToString(b)
	}
	return base64.RawStdEncoding.EncodeToString(b)
}
