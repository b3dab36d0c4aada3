package xdsclient_test

import (
	"errors"
	"net"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/clock"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// With the resource_timer_is_transient_error server feature, a resource that
// does not arrive in time is in TIMEOUT, not DOES_NOT_EXIST, and the
// watcher hears a ResourceError of KindTimeout (gRFC A88); the timer runs
// twice the configured time.
func TestTimeoutStatus(t *testing.T) {
	const expiry = 15 * time.Second
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	clk := clock.NewFake(fakeEpoch)
	c := newClient(t, e2e.BootstrapOptions{
		ServerURIs:     []string{ms.Address},
		ServerFeatures: []string{xdsclient.ServerFeatureResourceTimerIsTransientError},
	}, xdsclient.Options{WatchExpiryTimeout: expiry, Clock: clk})

	w := newTestWatcher()
	defer c.WatchResource(listenerType, "missing", w)()
	waitTimers(ctx, t, clk, 2*expiry)
	clk.Advance(2*expiry - time.Nanosecond)
	if d := findDump(c, listenerURL, "missing"); d == nil || d.Status != xdsclient.StatusRequested {
		t.Fatalf("dump before twice the WatchExpiryTimeout = %+v, want status REQUESTED", d)
	}
	clk.Advance(time.Nanosecond)
	err := w.wantError(ctx, t, "error", xdsclient.KindTimeout)
	if errors.Is(err, xdsclient.ErrResourceDoesNotExist) {
		t.Errorf("timeout error %v matches ErrResourceDoesNotExist, want not", err)
	}
	if d := findDump(c, listenerURL, "missing"); d == nil || d.Status != xdsclient.StatusTimeout {
		t.Fatalf("dump = %+v, want status TIMEOUT", d)
	}
}

// errorADSServer is an ADS server that answers each first subscription of a
// type with a scripted response: a resource_errors entry per name (xRFC
// TP3), which the in-process go-control-plane server cannot send.
type errorADSServer struct {
	discoverypb.UnimplementedAggregatedDiscoveryServiceServer
	respond func(req *discoverypb.DiscoveryRequest) *discoverypb.DiscoveryResponse
}

func (s *errorADSServer) StreamAggregatedResources(stream discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if req.GetResponseNonce() != "" {
			continue // an ACK or NACK
		}
		if resp := s.respond(req); resp != nil {
			if err := stream.Send(resp); err != nil {
				return nil
			}
		}
	}
}

func startErrorADSServer(t *testing.T, respond func(*discoverypb.DiscoveryRequest) *discoverypb.DiscoveryResponse) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen: %v", err)
	}
	s := grpc.NewServer(grpc.WaitForHandlers(true))
	discoverypb.RegisterAggregatedDiscoveryServiceServer(s, &errorADSServer{respond: respond})
	done := make(chan struct{})
	go func() { s.Serve(lis); close(done) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return lis.Addr().String()
}

// A resource_errors entry puts the resource in RECEIVED_ERROR with the
// server's status as the error state, and the watcher hears a ResourceError
// of KindReceivedError carrying that status; a valid resource of the same
// response is ACKED and the response is ACKed (gRFC A88).
func TestReceivedErrorStatus(t *testing.T) {
	ctx := testContext(t)
	good := testListener("good", 1)
	addr := startErrorADSServer(t, func(req *discoverypb.DiscoveryRequest) *discoverypb.DiscoveryResponse {
		if len(req.GetResourceNames()) != 2 {
			return nil // wait for both subscriptions
		}
		a, _ := anypb.New(good)
		return &discoverypb.DiscoveryResponse{
			TypeUrl: listenerURL, VersionInfo: "7", Nonce: "n1",
			Resources: []*anypb.Any{a},
			ResourceErrors: []*discoverypb.ResourceError{{
				ResourceName: &discoverypb.ResourceName{Name: "denied"},
				ErrorDetail:  status.New(codes.PermissionDenied, "not for you").Proto(),
			}},
		}
	})
	cfg, err := bootstrap.Parse(e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{addr}, NodeID: "n"}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := xdsclient.New(cfg, xdsclient.Options{ResourceTypes: []*xdsclient.ResourceType{listenerType}, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	wg, wd := newTestWatcher(), newTestWatcher()
	defer c.WatchResource(listenerType, "good", wg)()
	defer c.WatchResource(listenerType, "denied", wd)()
	wg.wantData(ctx, t, good)
	err = wd.wantError(ctx, t, "error", xdsclient.KindReceivedError)
	if status.Code(errors.Unwrap(err)) != codes.PermissionDenied {
		t.Errorf("error %v: cause has code %v, want PermissionDenied", err, status.Code(errors.Unwrap(err)))
	}

	d := findDump(c, listenerURL, "denied")
	if d == nil {
		t.Fatal("dump has no resource \"denied\"")
	}
	if d.Status != xdsclient.StatusReceivedError || d.Error == nil || d.Error.Version != "7" || d.Error.Reason != "PermissionDenied: not for you" {
		t.Fatalf("dump of denied = %+v (error %+v), want RECEIVED_ERROR with the server's error at version 7", d, d.Error)
	}
	if d := findDump(c, listenerURL, "good"); d == nil || d.Status != xdsclient.StatusACKed || d.Error != nil {
		t.Fatalf("dump of good = %+v, want ACKED without error state", d)
	}

	// A new watcher of the resource learns the error at once.
	w2 := newTestWatcher()
	defer c.WatchResource(listenerType, "denied", w2)()
	w2.wantError(ctx, t, "error", xdsclient.KindReceivedError)
}
