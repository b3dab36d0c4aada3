package xds

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/tap"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

func TestNewGRPCServerErrors(t *testing.T) {
	testutils.CheckGoroutines(t)
	mgmtAddr := "127.0.0.1:1"
	good := e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{mgmtAddr}, ServerListenerResourceNameTemplate: "%s"})
	nop := func(ctx context.Context, _ *tap.Info) (context.Context, error) { return ctx, nil }
	tests := []struct {
		desc string
		opts []grpc.ServerOption
		want string
	}{
		{desc: "no bootstrap", opts: nil, want: "no xDS bootstrap"},
		{desc: "invalid bootstrap", opts: []grpc.ServerOption{BootstrapContents([]byte("{"))}, want: "bootstrap"},
		{desc: "no template", opts: []grpc.ServerOption{BootstrapContents(e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{mgmtAddr}}))}, want: "server_listener_resource_name_template"},
		{desc: "xdstp unknown authority", opts: []grpc.ServerOption{BootstrapContents(e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{mgmtAddr}, ServerListenerResourceNameTemplate: "xdstp://other/envoy.config.listener.v3.Listener/%s"}))}, want: `authority "other"`},
		{desc: "tap handle", opts: []grpc.ServerOption{BootstrapContents(good), grpc.InTapHandle(nop)}, want: "InTapHandle"},
		{desc: "negative grace", opts: []grpc.ServerOption{BootstrapContents(good), DrainGraceTime(-time.Second)}, want: "DrainGraceTime"},
	}
	t.Setenv("GRPC_XDS_BOOTSTRAP", "")
	t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", "")
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := NewGRPCServer(tc.opts...)
			if err == nil {
				s.Stop()
				t.Fatal("NewGRPCServer succeeded, want an error")
			}
			if !strings.HasPrefix(err.Error(), "xds: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewGRPCServer error = %q, want an \"xds: \" error mentioning %q", err, tc.want)
			}
		})
	}

	// The xdstp authority listed in the bootstrap is fine.
	bs := e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{mgmtAddr}, ServerListenerResourceNameTemplate: "xdstp://auth/envoy.config.listener.v3.Listener/%s",
		Authorities: map[string]e2e.AuthorityOptions{"auth": {}}})
	s, err := NewGRPCServer(BootstrapContents(bs))
	if err != nil {
		t.Fatalf("NewGRPCServer with a listed xdstp authority: %v", err)
	}
	s.Stop()
}

// TestRegisterAfterServeIgnored: RegisterService after Serve is ignored, and
// GetServiceInfo lists what was registered before; Serve after Stop fails.
func TestRegisterAfterServeIgnored(t *testing.T) {
	testutils.CheckGoroutines(t)
	bs := e2e.Bootstrap(t, e2e.BootstrapOptions{ServerURIs: []string{"127.0.0.1:1"}, ServerListenerResourceNameTemplate: "%s"})
	s, err := NewGRPCServer(BootstrapContents(bs))
	if err != nil {
		t.Fatal(err)
	}
	testgrpc.RegisterTestServiceServer(s, testutils.TestService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.Serve(lis) }()
	testutils.WaitFor(testutils.Context(t), t, "Serve to start", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.serving {
			return errors.New("not serving")
		}
		return nil
	})
	s.RegisterService(&grpc.ServiceDesc{ServiceName: "late.Service", HandlerType: (*any)(nil)}, nil)
	info := s.GetServiceInfo()
	if _, ok := info["late.Service"]; ok {
		t.Error("a service registered after Serve is listed")
	}
	if _, ok := info["grpc.testing.TestService"]; !ok {
		t.Errorf("GetServiceInfo = %v, want grpc.testing.TestService", info)
	}
	s.Stop()
	if err := <-serveErr; err != nil {
		t.Errorf("Serve returned %v after Stop, want nil", err)
	}
	lis2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(lis2); err != grpc.ErrServerStopped {
		t.Errorf("Serve after Stop = %v, want grpc.ErrServerStopped", err)
	}
}
