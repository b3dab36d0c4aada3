package xds

import (
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestParseOptions(t *testing.T) {
	testutils.CheckGoroutines(t)
	so, err := parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if so.drainGrace != DefaultDrainGraceTime || so.drainJitter != 0 || so.onModeChange != nil || so.bootstrap != nil {
		t.Errorf("defaults = %+v, want 10m grace, no jitter, no callback, no bootstrap", so)
	}

	creds := grpc.Creds(insecure.NewCredentials())
	so, err = parseOptions([]grpc.ServerOption{
		DrainGraceTime(time.Second), creds, DrainJitter(time.Minute),
		BootstrapContents([]byte("{}")), ClientPool(nil), grpc.MaxRecvMsgSize(1),
		DrainGraceTime(2 * time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	if so.drainGrace != 2*time.Second || so.drainJitter != time.Minute || string(so.bootstrap) != "{}" || so.pool == nil {
		t.Errorf("parsed = %+v", so)
	}
	if len(so.grpcOpts) != 2 || so.grpcOpts[0] != creds {
		t.Errorf("gRPC options passed through = %d (first %v), want 2 in order", len(so.grpcOpts), so.grpcOpts)
	}

	for _, o := range []grpc.ServerOption{DrainGraceTime(-1), DrainJitter(-1)} {
		if _, err := parseOptions([]grpc.ServerOption{o}); err == nil {
			t.Errorf("parseOptions(%T negative) succeeded, want an error", o)
		}
	}
}
