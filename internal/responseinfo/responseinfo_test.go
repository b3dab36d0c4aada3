package responseinfo_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/responseinfo"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestDeps: the filters and the server's path import it; it knows neither.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/responseinfo", append([]string{
		mod + "$",
		mod + "/internal/server",
		mod + "/internal/httpfilter/builtin",
		mod + "/internal/xdsclient",
	}, testutils.TestOnly...)...)
}

// TestRefusedKeepsStatus: the client of a refused RPC gets the status the
// filter refused it with, code, message and details; the log gets the
// flags and details, however the refusal is wrapped.
func TestRefusedKeepsStatus(t *testing.T) {
	st, err := status.New(codes.PermissionDenied, "ext_authz: denied").WithDetails(status.New(codes.Internal, "detail").Proto())
	if err != nil {
		t.Fatal(err)
	}
	refused := responseinfo.Refused(st.Err(), accesslog.FlagUnauthorizedExternalService, "ext_authz_denied")
	for _, err := range []error{refused, fmt.Errorf("filter: %w", refused)} {
		if got := status.Convert(err); got.Code() != codes.PermissionDenied || len(got.Details()) != 1 {
			t.Errorf("status.Convert(%v) = %v, details %v; want the refusal's code and details", err, got, got.Details())
		}
		flags, details, ok := responseinfo.Of(err)
		if !ok || flags != accesslog.FlagUnauthorizedExternalService || details != "ext_authz_denied" {
			t.Errorf("Of(%v) = %v, %q, %v; want ext_authz's flag and details", err, flags, details, ok)
		}
	}
	if got := status.Convert(refused); got.Message() != "ext_authz: denied" {
		t.Errorf("status.Convert(refusal).Message() = %q; want the refusal's message unchanged", got.Message())
	}
	if err := responseinfo.Refused(nil, accesslog.FlagUnauthorizedExternalService, "x"); err != nil {
		t.Errorf("Refused(nil) = %v; want nil", err)
	}
	if _, _, ok := responseinfo.Of(status.Error(codes.Internal, "plain")); ok {
		t.Error("Of(a plain status error) reports flags; want none")
	}
	if _, _, ok := responseinfo.Of(errors.New("not a status")); ok {
		t.Error("Of(a non-status error) reports flags; want none")
	}
}

// recorder is what an access log installs as the RPC's transport stream.
type recorder struct {
	grpc.ServerTransportStream
	flags   accesslog.Flags
	changed []context.Context
}

func (r *recorder) AddResponseFlags(f accesslog.Flags) { r.flags |= f }
func (r *recorder) RequestChanged(ctx context.Context) { r.changed = append(r.changed, ctx) }

// TestRecorder: a flag and a change of headers reach the transport stream
// the log installed, and are dropped without a log.
func TestRecorder(t *testing.T) {
	rec := &recorder{}
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), rec)
	responseinfo.AddFlag(ctx, accesslog.FlagDelayInjected)
	responseinfo.RequestChanged(ctx)
	if rec.flags != accesslog.FlagDelayInjected || len(rec.changed) != 1 || rec.changed[0] != ctx {
		t.Errorf("recorder got flags %v, changes %d; want DI and one change with the RPC's context", rec.flags, len(rec.changed))
	}
	// Without an access log: nothing to tell, and no panic.
	responseinfo.AddFlag(context.Background(), accesslog.FlagDelayInjected)
	responseinfo.RequestChanged(context.Background())
	// A transport stream that is not a Recorder (gRPC's own, with no log).
	responseinfo.AddFlag(grpc.NewContextWithServerTransportStream(context.Background(), plainStream{}), accesslog.FlagDelayInjected)
}

type plainStream struct{ grpc.ServerTransportStream }

// TestOfSucceededAllocatesNothing: the access log asks Of about every RPC,
// and most succeed.
func TestOfSucceededAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { responseinfo.Of(nil) }); n != 0 {
		t.Errorf("Of(nil) allocates %v times, want 0", n)
	}
}
