package bootstrap_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
)

const allowedServer = `"xds_servers": [{"server_uri": "127.0.0.1:1", "channel_creds": [{"type": "insecure"}], "server_features": ["trusted_xds_server"]}]`

// TestParse_AllowedGRPCServices: gRFC A102's allowed_grpc_services maps a
// target to credentials in the format of an xds_servers entry, and
// trusted_xds_server marks a management server as trusted.
func TestParse_AllowedGRPCServices(t *testing.T) {
	cfg, err := bootstrap.Parse([]byte(`{` + allowedServer + `, "allowed_grpc_services": {
		"dns:///authz.example:443": {"channel_creds": [{"type": "unknown"}, {"type": "tls", "config": {}}], "call_creds": [{"type": "unknown"}]},
		"127.0.0.1:9191": {"channel_creds": [{"type": "insecure"}]}
	}}`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if !cfg.XDSServers[0].Trusted {
		t.Errorf("Trusted = false with server_features [trusted_xds_server]")
	}
	a := cfg.AllowedGRPCServices
	if len(a) != 2 || a["dns:///authz.example:443"].ChannelCreds.Type != bootstrap.CredsTLS || a["127.0.0.1:9191"].ChannelCreds.Type != bootstrap.CredsInsecure {
		t.Fatalf("AllowedGRPCServices = %+v, want the TLS and the insecure entries", a)
	}
	if a["127.0.0.1:9191"].ServerURI != "127.0.0.1:9191" || len(a["dns:///authz.example:443"].CallCreds) != 0 {
		t.Errorf("entries = %+v, %+v; want the target as ServerURI and no supported call creds", a["127.0.0.1:9191"], a["dns:///authz.example:443"])
	}

	other, err := bootstrap.Parse([]byte(`{` + allowedServer + `, "allowed_grpc_services": {"127.0.0.1:9191": {"channel_creds": [{"type": "insecure"}]}}}`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if other.Key() == cfg.Key() {
		t.Errorf("Key() equal for different allowed_grpc_services: the xDS client pool would share a client whose decoders allow other targets")
	}
}

func TestParse_AllowedGRPCServicesErrors(t *testing.T) {
	for _, tc := range []struct{ name, allowed, want string }{
		{"not an object", `[]`, "allowed_grpc_services"},
		{"entry not an object", `{"a": 1}`, `allowed_grpc_services["a"]`},
		{"no channel_creds", `{"a": {}}`, `allowed_grpc_services["a"].channel_creds`},
		{"empty channel_creds", `{"a": {"channel_creds": []}}`, `allowed_grpc_services["a"].channel_creds`},
		{"no supported channel_creds", `{"a": {"channel_creds": [{"type": "nope"}]}}`, `allowed_grpc_services["a"].channel_creds`},
		{"empty target", `{"": {"channel_creds": [{"type": "insecure"}]}}`, `allowed_grpc_services[""]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bootstrap.Parse([]byte(`{` + allowedServer + `, "allowed_grpc_services": ` + tc.allowed + `}`))
			var berr *bootstrap.Error
			if !errors.As(err, &berr) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want a *bootstrap.Error naming %s", err, tc.want)
			}
		})
	}
}
