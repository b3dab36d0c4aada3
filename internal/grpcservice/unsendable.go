package grpcservice

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// MaxRequestBytes bounds a side call's request: what a gRPC server takes in
// one message by default (4 MiB). A filter sends nothing larger: the service
// would refuse it, and a client whose headers made the request that large
// would have made the call fail on purpose.
const MaxRequestBytes = 4 << 20

// ErrUnsendable marks a side call's request that the RPC itself made
// impossible to send: larger than MaxRequestBytes, or with bytes that a
// protobuf string cannot hold. That failure is the client's doing, never a
// service that did not answer, so the filter refuses the RPC; no failure
// mode lets it through.
var ErrUnsendable = errors.New("the request cannot be sent to the service")

// CheckSize returns an error wrapping ErrUnsendable when req encodes to more
// than MaxRequestBytes.
func CheckSize(req proto.Message) error {
	if n := proto.Size(req); n > MaxRequestBytes {
		return fmt.Errorf("%w: it is too large (%d bytes, more than %d)", ErrUnsendable, n, MaxRequestBytes)
	}
	return nil
}

// CheckString returns an error wrapping ErrUnsendable when s, which the
// request carries in the protobuf string field, is not UTF-8: proto3
// refuses to encode it, and the call would fail.
func CheckString(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrUnsendable, field)
	}
	return nil
}

// RequestRefused returns an error wrapping ErrUnsendable when err, a side
// call's failure, is the service refusing the request itself:
// RESOURCE_EXHAUSTED, which a gRPC server answers to a message over its
// receive limit (a deployment may set one below MaxRequestBytes) or over a
// quota. A client can cause that on purpose, so it is a refusal like the
// others, not a service that did not answer; nil for any other failure.
func RequestRefused(err error) error {
	if status.Code(err) != codes.ResourceExhausted {
		return nil
	}
	return fmt.Errorf("%w: the service refused it as too large or over a quota (%v)", ErrUnsendable, err)
}
