package istio

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/csds"
)

// testTimeout bounds each wait of a test: for a serving mode, for a
// configuration change to reach a client, for an RPC.
const testTimeout = 15 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// echoService is the service under test. UnaryCall answers with what the
// handler sees of its peer: the SPIFFE ID of the client's certificate in
// Username, and "mtls", "tls" or "plaintext" in Hostname.
type echoService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echoService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (echoService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	p, _ := peer.FromContext(ctx)
	id, security := peerIdentity(p)
	return &testpb.SimpleResponse{Username: id, Hostname: security}, nil
}

// FullDuplexCall echoes each request's payload until the client closes its
// side.
func (echoService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// peerIdentity returns the SPIFFE ID of p's certificate ("" if none) and
// whether the connection is "mtls", "tls" (no peer certificate) or
// "plaintext".
func peerIdentity(p *peer.Peer) (id, security string) {
	if p == nil {
		return "", "unknown"
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", "plaintext"
	}
	if len(info.State.PeerCertificates) == 0 {
		return "", "tls"
	}
	if info.SPIFFEID != nil {
		id = info.SPIFFEID.String()
	}
	return id, "mtls"
}

// echoServer is the server under test: this library's xds.GRPCServer with
// xDS server credentials and the bootstrap istio-agent writes for the echo
// pod, serving echoService on the echo pod's IP.
type echoServer struct {
	srv   *xds.GRPCServer
	addr  string // host:port of the listener
	modes *modeRecorder
	lis   *countingListener
}

// countingListener counts the connections the server accepts, so that a
// test can tell a connection the server refused from a client that never
// reached it.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// startEcho starts the echo server on m.echoLis, with opts, and waits until
// it serves.
func (m *mesh) startEcho(t *testing.T, opts ...grpc.ServerOption) *echoServer {
	t.Helper()
	creds, err := xds.NewServerCredentials(xds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatalf("xds.NewServerCredentials: %v", err)
	}
	modes := &modeRecorder{changed: make(chan struct{}, 1)}
	s, err := xds.NewGRPCServer(append([]grpc.ServerOption{
		grpc.Creds(creds),
		xds.BootstrapContents(m.bootstrap(t, m.server, m.workloadCerts(t, m.server))),
		xds.ServingModeCallback(modes.record),
	}, opts...)...)
	if err != nil {
		t.Fatalf("xds.NewGRPCServer with istio-agent's bootstrap: %v", err)
	}
	testgrpc.RegisterTestServiceServer(s, echoService{})
	lis := &countingListener{Listener: m.echoLis}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v after Stop, want nil", err)
		}
	})
	es := &echoServer{srv: s, addr: m.echoLis.Addr().String(), modes: modes, lis: lis}
	es.awaitMode(t, connectivity.ServingModeServing)
	return es
}

// awaitMode waits until the server's last serving mode is want; if it is
// not within testTimeout, the test fails with the xDS client's view of the
// Listener (e.g. the reason it NACKed istiod's).
func (es *echoServer) awaitMode(t *testing.T, want connectivity.ServingMode) {
	t.Helper()
	ctx := testContext(t)
	for {
		mode, err := es.modes.last()
		if mode == want {
			return
		}
		select {
		case <-es.modes.changed:
		case <-ctx.Done():
			t.Fatalf("the echo server's serving mode is %v (err: %v), want %v; its Listener as the server's xDS client has it:\n%s", mode, err, want, listenerStatus(t))
		}
	}
}

// modeRecorder records the serving modes the server reports.
type modeRecorder struct {
	mu   sync.Mutex
	mode connectivity.ServingMode // guarded by mu
	err  error                    // guarded by mu
	// changed has a value when a mode was recorded since the last receive.
	changed chan struct{}
}

func (r *modeRecorder) record(_ net.Addr, a xds.ServingModeChangeArgs) {
	r.mu.Lock()
	r.mode, r.err = a.Mode, a.Err
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *modeRecorder) last() (connectivity.ServingMode, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mode, r.err
}

// listenerStatus describes each Listener the process's xDS clients (of this
// library) watch, from the CSDS service a user would query: its status, and
// the reason of its last rejected update.
func listenerStatus(t *testing.T) string {
	t.Helper()
	srv, err := csds.NewClientStatusDiscoveryServer()
	if err != nil {
		return fmt.Sprintf("(csds: %v)", err)
	}
	defer srv.Close()
	resp, err := srv.FetchClientStatus(context.Background(), &csdspb.ClientStatusRequest{})
	if err != nil {
		return fmt.Sprintf("(csds: %v)", err)
	}
	var b strings.Builder
	for _, c := range resp.GetConfig() {
		for _, g := range c.GetGenericXdsConfigs() {
			if !strings.HasSuffix(g.GetTypeUrl(), ".Listener") {
				continue
			}
			fmt.Fprintf(&b, "  %s: %v (version %q)\n", g.GetName(), g.GetClientStatus(), g.GetVersionInfo())
			if g.GetClientStatus() == adminpb.ClientResourceStatus_NACKED || g.GetErrorState() != nil {
				fmt.Fprintf(&b, "    rejected version %q: %s\n", g.GetErrorState().GetVersionInfo(), g.GetErrorState().GetDetails())
			}
		}
	}
	if b.Len() == 0 {
		return "  (no Listener watched)"
	}
	return b.String()
}

// xdsClient returns grpc-go's own xDS client of the echo service, running
// as workload w: an xds:/// target resolved with istio-agent's bootstrap for
// w (its Listener, routes, cluster and endpoints come from istiod) and
// grpc-go's xDS client credentials, which do mTLS with w's certificate when
// istiod's Cluster says so, plaintext otherwise.
func (m *mesh) xdsClient(t *testing.T, w workload) *grpc.ClientConn {
	t.Helper()
	return m.xdsClientTo(t, w, echoTarget)
}

// xdsClientTo is xdsClient for another xds:/// target.
func (m *mesh) xdsClientTo(t *testing.T, w workload, target string) *grpc.ClientConn {
	t.Helper()
	r, err := grpcxds.NewXDSResolverWithConfigForTesting(m.bootstrap(t, w, m.workloadCerts(t, w)))
	if err != nil {
		t.Fatalf("grpc-go's xDS resolver with istio-agent's bootstrap: %v", err)
	}
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	return dial(t, target, creds, grpc.WithResolvers(r))
}

// directPlaintext returns a client that dials the echo server's address
// without xDS and without TLS, as a workload outside the mesh would.
func (es *echoServer) directPlaintext(t *testing.T) *grpc.ClientConn {
	t.Helper()
	return dial(t, "passthrough:///"+es.addr, insecure.NewCredentials())
}

// directTLS returns a client that dials the echo server's address without
// xDS, over TLS: it checks that the server has its pod's mesh identity
// and presents cert, if not nil, as its own.
func (m *mesh) directTLS(t *testing.T, es *echoServer, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Workload certificates have no DNS name; VerifyConnection checks the
		// chain and the SPIFFE ID instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyChain(cs.PeerCertificates, m.ca.pool, m.server.spiffeID(), x509.ExtKeyUsageServerAuth)
		},
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return dial(t, "passthrough:///"+es.addr, credentials.NewTLS(cfg))
}

func dial(t *testing.T, target string, creds credentials.TransportCredentials, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)...)
	if err != nil {
		t.Fatalf("grpc.NewClient(%q): %v", target, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// result is what a client observes of one RPC.
type result struct {
	code codes.Code
	// clientID is the client's SPIFFE ID as the echo handler saw it ("" for
	// a plaintext connection); set by UnaryCall only.
	clientID string
	// security is "mtls", "tls" or "plaintext" as the handler saw the
	// connection; set by UnaryCall only.
	security string
	// serverID is the SPIFFE ID of the server's certificate as the client
	// saw it ("" for a plaintext connection).
	serverID string
}

func (r result) String() string {
	return fmt.Sprintf("{%v client=%q (%s) server=%q}", r.code, r.clientID, r.security, r.serverID)
}

// rpc names a method of the echo service.
type rpc string

const (
	unaryCall rpc = "UnaryCall"
	emptyCall rpc = "EmptyCall"
)

// call makes one RPC, waiting for the connection to be ready, and returns
// what the client observes. err is the RPC's error, for failure messages.
func call(ctx context.Context, cc *grpc.ClientConn, method rpc) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var p peer.Peer
	c := testgrpc.NewTestServiceClient(cc)
	var r result
	var err error
	switch method {
	case unaryCall:
		var resp *testpb.SimpleResponse
		resp, err = c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Peer(&p))
		r.clientID, r.security = resp.GetUsername(), resp.GetHostname()
	case emptyCall:
		_, err = c.EmptyCall(ctx, &testpb.Empty{}, grpc.Peer(&p))
	default:
		return result{code: codes.Internal}, fmt.Errorf("unknown method %q", method)
	}
	r.code = status.Code(err)
	if err == nil {
		r.serverID, _ = peerIdentity(&p)
	}
	return r, err
}

// awaitResult makes RPCs on cc until one returns want, for changes that
// istiod pushes: each connection keeps its configuration until it is
// drained, so a client sees the change on its next connection.
func awaitResult(t *testing.T, cc *grpc.ClientConn, method rpc, want result) {
	t.Helper()
	ctx := testContext(t)
	var got result
	var err error
	for {
		got, err = call(ctx, cc, method)
		if got == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s to %s: got %v (%v), want %v within %v; Listener:\n%s", method, cc.Target(), got, err, want, testTimeout, listenerStatus(t))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// expect checks that one RPC on cc returns want.
func expect(t *testing.T, cc *grpc.ClientConn, method rpc, want result) {
	t.Helper()
	got, err := call(testContext(t), cc, method)
	if got != want {
		t.Errorf("%s to %s: got %v (%v), want %v", method, cc.Target(), got, err, want)
	}
}
