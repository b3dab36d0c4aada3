package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// TestReflectionAndHealth checks that the standard reflection and health
// services work on an xDS server: reflection lists every registered service
// (through GetServiceInfo), health answers.
func TestReflectionAndHealth(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	reflection.Register(s)
	hs := health.NewServer()
	healthgrpc.RegisterHealthServer(s, hs)
	hs.SetServingStatus("grpc.testing.TestService", healthpb.HealthCheckResponse_SERVING)

	var _ reflection.ServiceInfoProvider = s.GRPCServer
	var _ grpc.ServiceRegistrar = s.GRPCServer
	wantServices := []string{
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
		"grpc.testing.TestService",
	}
	var got []string
	for name := range s.GetServiceInfo() {
		got = append(got, name)
	}
	slices.Sort(got)
	if diff := cmp.Diff(got, wantServices); diff != "" {
		t.Errorf("GetServiceInfo() services (-got, +want):\n%s", diff)
	}
	if methods := s.GetServiceInfo()["grpc.testing.TestService"].Methods; len(methods) == 0 {
		t.Errorf("GetServiceInfo()[TestService] has no methods")
	}

	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	env.update(ctx, t, []*listenerpb.Listener{simpleListener(lis.Addr())}, nil)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)

	stream, err := reflectiongrpc.NewServerReflectionClient(c.ClientConn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("ServerReflectionInfo: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	got = nil
	for _, svc := range resp.GetListServicesResponse().GetService() {
		got = append(got, svc.GetName())
	}
	slices.Sort(got)
	if diff := cmp.Diff(got, wantServices); diff != "" {
		t.Errorf("reflection ListServices (-got, +want):\n%s", diff)
	}
	stream.CloseSend()

	hresp, err := healthgrpc.NewHealthClient(c.ClientConn).Check(ctx, &healthpb.HealthCheckRequest{Service: "grpc.testing.TestService"})
	if err != nil {
		t.Fatalf("health Check: %v", err)
	}
	if got, want := hresp.GetStatus(), healthpb.HealthCheckResponse_SERVING; got != want {
		t.Errorf("health status %v, want %v", got, want)
	}
}

// TestServicesOnEveryGeneration checks that services registered before Serve
// are served by every connection, also by connections of filter chains
// created by later Listener updates.
func TestServicesOnEveryGeneration(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	s := env.newServer(t)
	hs := health.NewServer()
	healthgrpc.RegisterHealthServer(s, hs)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	addr := lis.Addr()
	for _, name := range []string{"A", "B"} {
		env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{{name: name}}, nil)}, nil)
		c := newClient(t, addr, "127.0.0.1", 0)
		c.waitForChain(ctx, t, name, "A", "B")
		if _, err := healthgrpc.NewHealthClient(c.ClientConn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("health Check on chain %s: %v", name, err)
		}
	}
}

// recorder records the method names a user interceptor or stats handler saw.
type recorder struct {
	mu      sync.Mutex
	methods []string
}

func (r *recorder) add(m string) {
	r.mu.Lock()
	r.methods = append(r.methods, m)
	r.mu.Unlock()
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.methods)
}

// statsRecorder is a stats.Handler that records the method of every RPC
// that ended without error, and counts connections.
type statsRecorder struct {
	ended recorder
	mu    sync.Mutex
	nConn int
}

type methodKey struct{}

func (h *statsRecorder) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

func (h *statsRecorder) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if end, ok := s.(*stats.End); ok && end.Error == nil {
		m, _ := ctx.Value(methodKey{}).(string)
		h.ended.add(m)
	}
}

func (h *statsRecorder) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (h *statsRecorder) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnBegin); ok {
		h.mu.Lock()
		h.nConn++
		h.mu.Unlock()
	}
}

// TestUserInterceptorsAndStatsHandler checks that user interceptors and
// stats handlers given to NewGRPCServer run, and that an RPC refused by xDS
// routing never reaches a user interceptor or the service.
func TestUserInterceptorsAndStatsHandler(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	var unary, streams recorder
	sh := &statsRecorder{}
	s := env.newServer(t,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			unary.add(info.FullMethod)
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			streams.add(info.FullMethod)
			return handler(srv, ss)
		}),
		grpc.StatsHandler(sh),
	)
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	// Only EmptyCall and FullDuplexCall are allowed.
	env.update(ctx, t, []*listenerpb.Listener{testListener(lis.Addr(), []chainSpec{{name: "A", allowed: []string{methodEmpty, methodStream}}}, nil)}, nil)
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	c := newClient(t, lis.Addr(), "127.0.0.1", 0)

	if got := c.emptyCall(ctx); got != codes.OK {
		t.Fatalf("EmptyCall: %v, want OK", got)
	}
	if got := c.unaryCall(ctx); got != codes.Unavailable {
		t.Fatalf("UnaryCall: %v, want UNAVAILABLE", got)
	}
	st := c.startStream(ctx, t)
	st.finish(t)

	if diff := cmp.Diff(unary.get(), []string{methodEmpty}); diff != "" {
		t.Errorf("user unary interceptor saw (-got, +want):\n%s", diff)
	}
	if diff := cmp.Diff(streams.get(), []string{methodStream}); diff != "" {
		t.Errorf("user stream interceptor saw (-got, +want):\n%s", diff)
	}
	// The server reports stats.End after writing the status, so the client
	// can see an RPC finish a moment before the handler hears of it.
	testutils.WaitFor(ctx, t, fmt.Sprintf("the stats handler to see %s and %s end", methodEmpty, methodStream), func() error {
		if ended := sh.ended.get(); !slices.Contains(ended, methodEmpty) || !slices.Contains(ended, methodStream) {
			return fmt.Errorf("it saw %v", ended)
		}
		return nil
	})
	if slices.Contains(sh.ended.get(), methodUnary) {
		t.Errorf("stats handler saw %s succeed, but xDS routing refused it", methodUnary)
	}
	sh.mu.Lock()
	if sh.nConn != 1 {
		t.Errorf("stats handler saw %d connections begin, want 1", sh.nConn)
	}
	sh.mu.Unlock()
}

// TestUnknownMethodOnAllowedRoute checks that an allowed route still ends in
// gRPC's own handling: a method of no registered service is UNIMPLEMENTED.
func TestUnknownMethodOnAllowedRoute(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	_, addr := startServing(ctx, t, env, simpleListener, nil)
	c := newClient(t, addr, "127.0.0.1", 0)
	err := c.Invoke(ctx, "/no.such.Service/Method", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	if got := status.Code(err); got != codes.Unimplemented {
		t.Errorf("unknown method: %v, want UNIMPLEMENTED", err)
	}
}

// selfSignedTLS returns a server certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSignedTLS(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "xds-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}

// TestUserTransportCredentials checks that user TLS credentials work on an
// xDS server (the connection wrapper is transparent to the handshake), with
// filter chain selection by source address still applying, and that a not
// serving listener closes TLS connections without a ServerHello.
func TestUserTransportCredentials(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env := newTestEnv(t)
	cert, pool := selfSignedTLS(t)
	s := env.newServer(t, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)
	addr := lis.Addr()
	clientCreds := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}))

	// Not serving: a TLS client gets no ServerHello.
	conn, err := tls.Dial("tcp", addr.String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err == nil {
		conn.Close()
		t.Fatal("TLS handshake with a not-serving listener succeeded")
	}

	env.update(ctx, t, []*listenerpb.Listener{testListener(addr, []chainSpec{
		{name: "A", match: srcMatch("127.0.0.1/32")},
		{name: "B", match: srcMatch("127.0.0.2/32")},
	}, nil)}, nil)
	s.modes.wait(ctx, t, addr, connectivity.ServingModeServing)
	for _, tc := range []struct{ src, want string }{{"127.0.0.1", "A"}, {"127.0.0.2", "B"}} {
		c := newClient(t, addr, tc.src, 0, clientCreds)
		if got := c.chainOf(ctx, t, "A", "B"); got != tc.want {
			t.Errorf("TLS connection from %s served by chain %q, want %q", tc.src, got, tc.want)
		}
		st := c.startStream(ctx, t)
		st.finish(t)
	}
}
