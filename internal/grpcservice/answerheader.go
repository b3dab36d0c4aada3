package grpcservice

import (
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// AnswerHeader validates a header of a side channel's answer (the
// ext_authz and rate limit services' header mutations): its key is
// lower-cased, as Envoy does; a reserved one (Reserved) is not kept (gRFC
// A92: ignored, not an error); an invalid one is an error (HeaderValue).
// One function for every side channel, so that they all apply gRFC A102's
// rules alike.
func AnswerHeader(hv *corepb.HeaderValue) (key, value string, keep bool, err error) {
	if k := strings.ToLower(hv.GetKey()); k != hv.GetKey() {
		hv = &corepb.HeaderValue{Key: k, Value: hv.GetValue(), RawValue: hv.GetRawValue()}
	}
	if Reserved(hv.GetKey()) {
		return "", "", false, nil
	}
	if key, value, err = HeaderValue(hv); err != nil {
		return "", "", false, err
	}
	return key, value, true, nil
}
