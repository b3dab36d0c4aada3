package main

import (
	"bufio"
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestMain ends with a goroutine leak check (go.uber.org/goleak).
func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestXDSResolverRegistered: the blank import of google.golang.org/grpc/xds
// is what makes xds:/// targets resolvable; without it grpc.NewClient would
// fall back to the passthrough resolver and never ask istiod.
func TestXDSResolverRegistered(t *testing.T) {
	if resolver.Get("xds") == nil {
		t.Fatal(`no "xds" resolver registered: the frontend cannot dial xds:/// targets`)
	}
}

// denyEmpty greets on UnaryCall, as the greeter does, and refuses EmptyCall
// as the greeter's RBAC filter does for the frontend.
type denyEmpty struct {
	testgrpc.UnimplementedTestServiceServer
}

func (denyEmpty) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte("Hello, " + string(req.GetPayload().GetBody()))}}, nil
}

func (denyEmpty) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return nil, status.Error(codes.PermissionDenied, "RBAC: access denied")
}

// TestRunPrintsTheWalkthroughLines: the lines examples/kubernetes/README.md
// tells the reader to expect are the ones run prints, against a server that
// answers as the greeter does behind its AuthorizationPolicy.
func TestRunPrintsTheWalkthroughLines(t *testing.T) {
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, denyEmpty{})
	addr := testutils.ServeGRPC(t, s)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, "passthrough:///"+addr.String(), insecure.NewCredentials(), time.Hour, pw)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for _, want := range []string{"UnaryCall OK: Hello, frontend", "EmptyCall PermissionDenied: RBAC: access denied"} {
		if !sc.Scan() {
			t.Fatalf("run printed no line, want %q", want)
		}
		if got := sc.Text(); got != want {
			t.Errorf("run printed %q, want %q", got, want)
		}
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
