package xdsclient_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// startSANServer starts a management server on 127.0.0.1 behind a TLS
// listener that presents leaf (no client certificate asked).
func startSANServer(t *testing.T, leaf *testcerts.Leaf) *e2e.ManagementServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsLis := tls.NewListener(lis, &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, NextProtos: []string{"h2"}})
	return e2e.StartManagementServer(t, e2e.ManagementServerOptions{Listener: tlsLis})
}

// The "tls" channel credentials (gRFC A65) with a CA file check the
// management server's name as grpc-go's TLS credentials do: the host of the
// target, here the IP literal 127.0.0.1, against the certificate's IP SANs.
// A certificate the CA signed for another IP, or for a DNS name only, is
// refused; one for 127.0.0.1 is accepted.
func TestTLSChannelCredsCheckIPSAN(t *testing.T) {
	ca := testcerts.NewCA(t, "san-ca")
	caFile := testcerts.WriteFiles(t, t.TempDir(), nil, ca.PEM).CA
	for _, tc := range testcerts.IPNameChecks("cp") {
		t.Run(strings.ReplaceAll(tc.Name, " ", "_"), func(t *testing.T) {
			ctx := testContext(t)
			ms := startSANServer(t, ca.Issue(t, tc.Leaf))
			l := testListener("lis", 1)
			update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})
			cfg, err := bootstrap.Parse([]byte(fmt.Sprintf(`{
				"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": %q}}], "server_features": ["xds_v3"]}],
				"node": {"id": "san-node"}}`, ms.Address, caFile)))
			if err != nil {
				t.Fatalf("bootstrap.Parse: %v", err)
			}
			c, err := xdsclient.New(cfg, xdsclient.Options{Backoff: fastBackoff})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer c.Close()
			w := newTestWatcher()
			defer c.WatchResource(listenerType, "lis", w)()
			if tc.Accept {
				w.wantData(ctx, t, l)
				return
			}
			for {
				select {
				case err := <-w.connErrs:
					if !strings.Contains(err.Error(), "127.0.0.1") {
						t.Errorf("connection error %q does not name the address checked", err)
					}
					w.wantNothing(t)
					return
				case e := <-w.events:
					if e.kind == "data" {
						t.Fatal("the client accepted a certificate for another name and received the Listener")
					}
				case <-ctx.Done():
					t.Fatal("no connection error with a certificate for another name")
				}
			}
		})
	}
}
