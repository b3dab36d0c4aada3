package grpcservice_test

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// startTLSHealthServer is startHealthServer presenting leaf.
func startTLSHealthServer(t *testing.T, leaf *testcerts.Leaf) string {
	t.Helper()
	return startHealthServer(t, grpc.Creds(credentials.NewServerTLSFromCert(&leaf.TLS)))
}

// allowedTLS returns the Env of an untrusted management server whose
// bootstrap allows target with "tls" channel credentials trusting caFile.
func allowedTLS(t *testing.T, target, caFile string) *grpcservice.Env {
	t.Helper()
	cfg, err := bootstrap.Parse([]byte(fmt.Sprintf(`{
		"xds_servers": [{"server_uri": "127.0.0.1:1", "channel_creds": [{"type": "insecure"}]}],
		"node": {"id": "n"},
		"allowed_grpc_services": {%q: {"channel_creds": [{"type": "tls", "config": {"ca_certificate_file": %q}}]}}}`, target, caFile)))
	if err != nil {
		t.Fatalf("bootstrap.Parse: %v", err)
	}
	return grpcservice.EnvOf(cfg, cfg.XDSServers[0])
}

// TestTLSSideChannelChecksIPSAN: a side channel of an allowed_grpc_services
// entry with "tls" credentials, to an IP literal target, checks the
// authorization server's certificate against that IP as grpc-go's TLS
// credentials do: a certificate the CA signed for another IP, or for a DNS
// name only, fails the call; one for the target's IP is accepted. A DNS
// name target (localhost) is still checked against the DNS SANs.
func TestTLSSideChannelChecksIPSAN(t *testing.T) {
	ca := testcerts.NewCA(t, "side-ca")
	caFile := testcerts.WriteFiles(t, t.TempDir(), nil, ca.PEM).CA
	for _, tc := range append(testcerts.IPNameChecks("authz"),
		testcerts.NameCheck{Name: "DNS target, its DNS SAN", Leaf: testcerts.LeafOptions{CommonName: "authz", DNSNames: []string{"localhost"}}, Host: "localhost", Accept: true},
	) {
		t.Run(strings.ReplaceAll(tc.Name, " ", "_"), func(t *testing.T) {
			testutils.CheckGoroutines(t)
			ctx := testutils.Context(t)
			target := startTLSHealthServer(t, ca.Issue(t, tc.Leaf))
			if tc.Host != "" {
				_, port, _ := net.SplitHostPort(target)
				target = net.JoinHostPort(tc.Host, port)
			}
			s, err := grpcservice.Parse(allowedTLS(t, target, caFile), service(target, nil))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			release, err := s.Acquire()
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			defer release()
			cc, err := s.Conn(ctx)
			if err != nil {
				t.Fatalf("Conn: %v", err)
			}
			_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			if tc.Accept {
				if err != nil {
					t.Fatalf("Check over a certificate for the target's IP: %v", err)
				}
				return
			}
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "127.0.0.1") {
				t.Fatalf("Check over a certificate for another name = %v, want UNAVAILABLE naming the address checked", err)
			}
		})
	}
}

// TestFailedCredsRetriedByNextAcquire: credentials that cannot be built
// (the CA file is missing) fail the holders' Conn with the reason; the
// next Acquire, a configuration update, builds them again, and its channel
// works once the file is there, while the failed one is still held.
func TestFailedCredsRetriedByNextAcquire(t *testing.T) {
	testutils.CheckGoroutines(t)
	ctx := testutils.Context(t)
	ca := testcerts.NewCA(t, "retry-ca")
	target := startTLSHealthServer(t, ca.Issue(t, testcerts.LeafOptions{CommonName: "authz", IPs: []string{"127.0.0.1"}}))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	s, err := grpcservice.Parse(allowedTLS(t, target, caFile), service(target, nil))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	release1, err := s.Acquire()
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer release1()
	if _, err := s.Conn(ctx); err == nil || !strings.Contains(err.Error(), "ca.pem") {
		t.Fatalf("Conn with a missing CA file = %v, want an error naming the file", err)
	}
	if n := grpcservice.OpenChannels(); n != 0 {
		t.Errorf("%d channels open after a failed build, want 0 (the next Acquire builds again)", n)
	}

	testcerts.WriteFile(t, caFile, ca.PEM)
	release2, err := s.Acquire()
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer release2()
	cc, err := s.Conn(ctx)
	if err != nil {
		t.Fatalf("Conn once the CA file is there: %v", err)
	}
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	release1()
	if _, err := s.Conn(ctx); err != nil {
		t.Errorf("Conn after the failed channel's release: %v; the new one is still held", err)
	}
}
