package bootstrap_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
)

func TestServerListenerName(t *testing.T) {
	tests := []struct {
		desc string
		tmpl string
		addr string
		want string
	}{
		{desc: "ipv4", tmpl: "grpc/server?xds.resource.listening_address=%s", addr: "127.0.0.1:8080", want: "grpc/server?xds.resource.listening_address=127.0.0.1:8080"},
		{desc: "ipv6 bracketed, no escaping (A36)", tmpl: "grpc/server?xds.resource.listening_address=%s", addr: "[::]:80", want: "grpc/server?xds.resource.listening_address=[::]:80"},
		{desc: "ipv4-mapped unmapped", tmpl: "%s", addr: "[::ffff:10.0.0.1]:1", want: "10.0.0.1:1"},
		{desc: "several tokens", tmpl: "a/%s/b/%s", addr: "10.1.2.3:9", want: "a/10.1.2.3:9/b/10.1.2.3:9"},
		{desc: "no token", tmpl: "fixed", addr: "10.1.2.3:9", want: "fixed"},
		{desc: "xdstp ipv4 unchanged (A47 example)", tmpl: "xdstp://xds.authority.com/envoy.config.listener.v3.Listener/grpc/server/%s", addr: "0.0.0.0:8080", want: "xdstp://xds.authority.com/envoy.config.listener.v3.Listener/grpc/server/0.0.0.0:8080"},
		{desc: "xdstp ipv6 brackets encoded", tmpl: "xdstp://xds.authority.com/envoy.config.listener.v3.Listener/%s?project_id=1", addr: "[::1]:443", want: "xdstp://xds.authority.com/envoy.config.listener.v3.Listener/%5B::1%5D:443?project_id=1"},
		{desc: "xdstp zone percent encoded", tmpl: "xdstp://xds.authority.com/t/%s", addr: "[fe80::1%eth0]:1", want: "xdstp://xds.authority.com/t/%5Bfe80::1%25eth0%5D:1"},
		{desc: "xdstp percent-encoded authority", tmpl: "xdstp://xds%2Eauthority.com/t/%s", addr: "10.0.0.1:1", want: "xdstp://xds%2Eauthority.com/t/10.0.0.1:1"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := mustParse(t, tc.tmpl)
			got, err := cfg.ServerListenerName(netip.MustParseAddrPort(tc.addr))
			if err != nil || got != tc.want {
				t.Errorf("ServerListenerName(%s) = %q, %v; want %q", tc.addr, got, err, tc.want)
			}
		})
	}
}

// TestServerListenerNameErrors: the template problems an xDS server cannot
// start with, as typed errors.
func TestServerListenerNameErrors(t *testing.T) {
	tests := []struct {
		desc, tmpl string
		want       error
		wantText   string
	}{
		{desc: "no template", tmpl: "", want: bootstrap.ErrNoServerListenerTemplate, wantText: "server_listener_resource_name_template"},
		{desc: "xdstp without an authority", tmpl: "xdstp:///t/%s", want: bootstrap.ErrBadXDSTPTemplate, wantText: `"xdstp:///t/%s"`},
		{desc: "xdstp without a path", tmpl: "xdstp://xds.authority.com", want: bootstrap.ErrBadXDSTPTemplate},
		{desc: "xdstp with an unknown authority", tmpl: "xdstp://other.example/t/%s", want: bootstrap.ErrUnknownAuthority, wantText: `"other.example"`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := mustParse(t, tc.tmpl)
			_, err := cfg.ServerListenerName(netip.MustParseAddrPort("10.0.0.1:80"))
			var le *bootstrap.ListenerNameError
			if !errors.Is(err, tc.want) || !errors.As(err, &le) {
				t.Fatalf("ServerListenerName() error = %v, want a *ListenerNameError wrapping %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q does not mention %q", err, tc.wantText)
			}
		})
	}
}

// mustParse parses a bootstrap with the server template tmpl (none when
// empty) and the authority "xds.authority.com".
func mustParse(t *testing.T, tmpl string) *bootstrap.Config {
	t.Helper()
	js := `{"xds_servers": [{"server_uri": "localhost:1", "channel_creds": [{"type": "insecure"}]}], "node": {"id": "n"}, "authorities": {"xds.authority.com": {}}`
	if tmpl != "" {
		js += `, "server_listener_resource_name_template": "` + tmpl + `"`
	}
	cfg, err := bootstrap.Parse([]byte(js + "}"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}
