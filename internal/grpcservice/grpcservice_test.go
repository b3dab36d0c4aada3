package grpcservice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesstokenpb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/call_credentials/access_token/v3"
	insecurepb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/insecure/v3"
	xdscredspb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/xds/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

func service(target string, f func(*corepb.GrpcService_GoogleGrpc)) *corepb.GrpcService {
	gg := &corepb.GrpcService_GoogleGrpc{TargetUri: target}
	if f != nil {
		f(gg)
	}
	return &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_GoogleGrpc_{GoogleGrpc: gg}}
}

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestParseTrust: gRFC A102's trust model, case by case.
func TestParseTrust(t *testing.T) {
	allowed := &bootstrap.ServerConfig{ServerURI: "dns:///authz:9191", ChannelCreds: bootstrap.ChannelCreds{Type: bootstrap.CredsInsecure}}
	untrusted := &grpcservice.Env{Allowed: map[string]*bootstrap.ServerConfig{"dns:///authz:9191": allowed}, Server: "cp:1"}
	trusted := &grpcservice.Env{Trusted: true, Server: "cp:1"}
	insecure := func(t *testing.T) func(*corepb.GrpcService_GoogleGrpc) {
		return func(gg *corepb.GrpcService_GoogleGrpc) {
			gg.ChannelCredentialsPlugin = []*anypb.Any{anyOf(t, &insecurepb.InsecureCredentials{})}
		}
	}
	for _, tc := range []struct {
		name    string
		env     *grpcservice.Env
		gs      *corepb.GrpcService
		wantErr string
		source  string
	}{
		{name: "allowed target", env: untrusted, gs: service("dns:///authz:9191", nil), source: "allowed_grpc_services"},
		{name: "allowed target, resource creds ignored", env: untrusted, gs: service("dns:///authz:9191", insecure(t)), source: "allowed_grpc_services"},
		{name: "other target, untrusted", env: untrusted, gs: service("dns:///evil:9191", insecure(t)), wantErr: "not in the bootstrap's allowed_grpc_services"},
		{name: "trusted, insecure plugin", env: trusted, gs: service("dns:///evil:9191", insecure(t)), source: "trusted"},
		{name: "trusted, no plugin", env: trusted, gs: service("dns:///authz:9191", nil), wantErr: "channel_credentials_plugin"},
		{name: "trusted, xds with fallback", env: trusted, gs: service("127.0.0.1:9", func(gg *corepb.GrpcService_GoogleGrpc) {
			gg.ChannelCredentialsPlugin = []*anypb.Any{anyOf(t, &xdscredspb.XdsCredentials{FallbackCredentials: anyOf(t, &insecurepb.InsecureCredentials{})})}
		}), source: "trusted"},
		{name: "trusted, xds without fallback", env: trusted, gs: service("127.0.0.1:9", func(gg *corepb.GrpcService_GoogleGrpc) {
			gg.ChannelCredentialsPlugin = []*anypb.Any{anyOf(t, &xdscredspb.XdsCredentials{})}
		}), wantErr: "fallback_credentials"},
		{name: "trusted, empty access token", env: trusted, gs: service("127.0.0.1:9", func(gg *corepb.GrpcService_GoogleGrpc) {
			insecure(t)(gg)
			gg.CallCredentialsPlugin = []*anypb.Any{anyOf(t, &accesstokenpb.AccessTokenCredentials{})}
		}), wantErr: "token is empty"},
		{name: "no env", gs: service("127.0.0.1:9", nil), source: "unchecked"},
		{name: "envoy_grpc", env: trusted, gs: &corepb.GrpcService{TargetSpecifier: &corepb.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corepb.GrpcService_EnvoyGrpc{ClusterName: "c"}}}, wantErr: "envoy_grpc"},
		{name: "unknown scheme", env: trusted, gs: service("nope://x/y", insecure(t)), wantErr: "target_uri"},
		{name: "empty target", env: trusted, gs: service("", insecure(t)), wantErr: "target_uri"},
		{name: "zero timeout", env: trusted, gs: func() *corepb.GrpcService {
			gs := service("127.0.0.1:9", insecure(t))
			gs.Timeout = durationpb.New(0)
			return gs
		}(), wantErr: "timeout"},
		{name: "initial_metadata grpc-", env: trusted, gs: func() *corepb.GrpcService {
			gs := service("127.0.0.1:9", insecure(t))
			gs.InitialMetadata = []*corepb.HeaderValue{{Key: "grpc-timeout", Value: "1S"}}
			return gs
		}(), wantErr: "grpc-"},
		{name: "initial_metadata bad value", env: trusted, gs: func() *corepb.GrpcService {
			gs := service("127.0.0.1:9", insecure(t))
			gs.InitialMetadata = []*corepb.HeaderValue{{Key: "x-a", Value: "line\nbreak"}}
			return gs
		}(), wantErr: "printable"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			s, err := grpcservice.Parse(tc.env, tc.gs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !strings.Contains(s.CredsSource, tc.source) {
				t.Errorf("CredsSource = %q, want %q", s.CredsSource, tc.source)
			}
		})
	}
}

// TestAcquireShares: one channel per target and credentials, opened by the
// first Acquire and closed by the last release; a Service without
// credentials (parsed offline) cannot be acquired.
func TestAcquireShares(t *testing.T) {
	env := &grpcservice.Env{Trusted: true}
	plugin := func(gg *corepb.GrpcService_GoogleGrpc) {
		gg.ChannelCredentialsPlugin = []*anypb.Any{anyOf(t, &insecurepb.InsecureCredentials{})}
	}
	a, err := grpcservice.Parse(env, service("127.0.0.1:9", plugin))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := grpcservice.Parse(env, service("127.0.0.1:9", plugin)) // same target and creds
	c, _ := grpcservice.Parse(env, service("127.0.0.1:10", plugin))
	r1, err := a.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := b.Acquire()
	r3, _ := c.Acquire()
	if n := grpcservice.OpenChannels(); n != 2 {
		t.Errorf("%d channels for two targets, want 2", n)
	}
	ctx := testutils.Context(t)
	ca, _ := a.Conn(ctx)
	cb, _ := b.Conn(ctx)
	if ca == nil || ca != cb {
		t.Errorf("Conn of equal services: %p, %p; want one channel", ca, cb)
	}
	r1()
	r1() // twice: no effect
	if _, err := b.Conn(ctx); err != nil {
		t.Errorf("channel closed while b holds it")
	}
	r2()
	r3()
	if n := grpcservice.OpenChannels(); n != 0 {
		t.Errorf("%d channels open after every release, want 0", n)
	}
	if _, err := a.Conn(ctx); err == nil {
		t.Errorf("Conn after the last release: still open")
	}
	offline, _ := grpcservice.Parse(nil, service("127.0.0.1:9", nil))
	if _, err := offline.Acquire(); err == nil {
		t.Errorf("Acquire of a service parsed without a bootstrap succeeded")
	}
}

// An RPC whose deadline has passed has ended, even before its context's
// timer says so.
func TestCallerEnded(t *testing.T) {
	if err := grpcservice.CallerEnded(context.Background()); err != nil {
		t.Errorf("no deadline: %v", err)
	}
	live, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := grpcservice.CallerEnded(live); err != nil {
		t.Errorf("deadline ahead: %v", err)
	}
	past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancelPast()
	if err := grpcservice.CallerEnded(past); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline passed: %v, want DeadlineExceeded", err)
	}
	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if err := grpcservice.CallerEnded(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want Canceled", err)
	}
}
