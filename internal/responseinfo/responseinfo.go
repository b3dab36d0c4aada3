// Package responseinfo carries what an access log says of how an RPC ended,
// in Envoy's words, from where it is decided (an HTTP filter, the server's
// routing) to where the log is written, without either knowing the other:
// the response flags (accesslog.Flags, %RESPONSE_FLAGS%) and the response
// code details ("ext_authz_denied", the accesslog.Details constants,
// %RESPONSE_CODE_DETAILS%).
//
// A refusal carries them in its error (Refused, Of); a flag on an RPC that
// goes on (a fault delay's "DI") is told to the RPC's Recorder, found in its
// context when something logs the RPC (AddFlag). Neither costs an RPC that
// is not refused anything but a context lookup.
package responseinfo

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/accesslog"
)

// refusal is a status error with the response flag and details of the
// refusal. It is the status error it wraps to gRPC: GRPCStatus returns that
// error's status, so the client gets its code and message unchanged.
type refusal struct {
	err     error
	flags   accesslog.Flags
	details string
}

// Refused returns err, a gRPC status error refusing an RPC, carrying flags
// (0 for none) and details (Envoy's response code details). A nil err
// stays nil.
func Refused(err error, flags accesslog.Flags, details string) error {
	if err == nil {
		return nil
	}
	return &refusal{err: err, flags: flags, details: details}
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// GRPCStatus returns the status of the error it wraps, so that gRPC (and
// status.FromError) sees that status and message unchanged.
func (r *refusal) GRPCStatus() *status.Status {
	s, _ := status.FromError(r.err)
	return s
}

// Of returns the flags and details err carries (Refused), looking through
// wrapping; ok is false when it carries none.
func Of(err error) (flags accesslog.Flags, details string, ok bool) {
	if err == nil {
		return 0, "", false // without errors.As, whose target escapes: no allocation for an RPC that succeeded
	}
	var r *refusal
	if !errors.As(err, &r) {
		return 0, "", false
	}
	return r.flags, r.details, true
}

// Recorder is what an access log puts in an RPC's context to hear of it
// from the code that runs it: the grpc.ServerTransportStream it installs
// (grpc.NewContextWithServerTransportStream) implements it, so that no
// context value of its own is added per RPC.
type Recorder interface {
	// AddResponseFlags adds f to the RPC's response flags.
	AddResponseFlags(f accesslog.Flags)
	// RequestChanged says that ctx carries the RPC's request headers as
	// the filters left them.
	RequestChanged(ctx context.Context)
}

func recorderOf(ctx context.Context) Recorder {
	r, _ := grpc.ServerTransportStreamFromContext(ctx).(Recorder)
	return r
}

// AddFlag adds the response flags f to the RPC of ctx (a delay injected:
// an RPC that goes on, so no refusal carries them) when something logs it;
// it does nothing otherwise.
func AddFlag(ctx context.Context, f accesslog.Flags) {
	if r := recorderOf(ctx); r != nil {
		r.AddResponseFlags(f)
	}
}

// RequestChanged tells what logs the RPC of ctx that ctx now carries its
// request headers as the filters left them (the access log's %REQ()% reads
// them as Envoy's does, after the filters); it does nothing when nothing
// logs the RPC.
func RequestChanged(ctx context.Context) {
	if r := recorderOf(ctx); r != nil {
		r.RequestChanged(ctx)
	}
}
