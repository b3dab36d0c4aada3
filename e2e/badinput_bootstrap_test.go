package e2e_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/bootstrap"
)

// TestBadInputBootstrap: a bootstrap with one bad field makes NewGRPCServer
// fail with an error naming that field (issue 9, item 2). The cases
// complement TestNewGRPCServer_BootstrapErrors (no bootstrap, bad JSON, no
// xds_servers, no server template); bootstrap's own tests check Parse
// field by field, these check that the field's name survives up to the
// server's constructor.
func TestBadInputBootstrap(t *testing.T) {
	// base returns a valid bootstrap, as a JSON tree to break.
	base := func() map[string]any {
		return map[string]any{
			"xds_servers": []any{map[string]any{
				"server_uri":    "127.0.0.1:1",
				"channel_creds": []any{map[string]any{"type": "insecure"}},
			}},
			"node":                                   map[string]any{"id": "n"},
			"server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s",
			"certificate_providers": map[string]any{
				"p": map[string]any{
					"plugin_name": "file_watcher",
					"config":      map[string]any{"ca_certificate_file": "/nonexistent/ca.pem"},
				},
				// gRFC A87: a provider with only a SPIFFE bundle map is valid.
				"spiffe": map[string]any{
					"plugin_name": "file_watcher",
					"config":      map[string]any{"spiffe_trust_bundle_map_file": "/nonexistent/bundles.json"},
				},
			},
		}
	}
	server0 := func(b map[string]any) map[string]any { return b["xds_servers"].([]any)[0].(map[string]any) }
	provider := func(b map[string]any) map[string]any {
		return b["certificate_providers"].(map[string]any)["p"].(map[string]any)
	}
	tests := []struct {
		desc      string
		mutate    func(b map[string]any)
		wantField string
	}{
		{"empty xds_servers", func(b map[string]any) { b["xds_servers"] = []any{} }, "xds_servers"},
		{"xds_servers an object", func(b map[string]any) { b["xds_servers"] = map[string]any{} }, "xds_servers"},
		{"server not an object", func(b map[string]any) { b["xds_servers"] = []any{"127.0.0.1:1"} }, "xds_servers[0]"},
		{"no server_uri", func(b map[string]any) { delete(server0(b), "server_uri") }, "xds_servers[0].server_uri"},
		{"server_uri a number", func(b map[string]any) { server0(b)["server_uri"] = 1 }, "xds_servers[0].server_uri"},
		{"no channel_creds", func(b map[string]any) { delete(server0(b), "channel_creds") }, "xds_servers[0].channel_creds"},
		{"empty channel_creds", func(b map[string]any) { server0(b)["channel_creds"] = []any{} }, "xds_servers[0].channel_creds"},
		{"only unsupported channel_creds", func(b map[string]any) {
			server0(b)["channel_creds"] = []any{map[string]any{"type": "no-such-creds"}}
		}, "xds_servers[0].channel_creds"},
		{"registered channel_creds with a bad config", func(b map[string]any) {
			server0(b)["channel_creds"] = []any{map[string]any{"type": "no-such-creds"},
				map[string]any{"type": tdCredsName, "config": map[string]any{"fail": true}}}
		}, "xds_servers[0].channel_creds[1]"},
		{"channel_creds without type", func(b map[string]any) { server0(b)["channel_creds"] = []any{map[string]any{}} }, "xds_servers[0].channel_creds[0].type"},
		{"tls creds with a certificate and no key", func(b map[string]any) {
			server0(b)["channel_creds"] = []any{map[string]any{"type": "tls", "config": map[string]any{"certificate_file": "/c.pem"}}}
		}, "xds_servers[0].channel_creds[0].config.private_key_file"},
		{"tls creds with a bad refresh_interval", func(b map[string]any) {
			server0(b)["channel_creds"] = []any{map[string]any{"type": "tls", "config": map[string]any{"ca_certificate_file": "/ca.pem", "refresh_interval": "-1s"}}}
		}, "xds_servers[0].channel_creds[0].config.refresh_interval"},
		{"tls creds with a SPIFFE bundle map", func(b map[string]any) {
			server0(b)["channel_creds"] = []any{map[string]any{"type": "tls", "config": map[string]any{"spiffe_trust_bundle_map_file": "/m.json"}}}
		}, "xds_servers[0].channel_creds[0].config.spiffe_trust_bundle_map_file"},
		{"call_creds not a list", func(b map[string]any) {
			server0(b)["call_creds"] = map[string]any{"type": "jwt_token_file"}
		}, "xds_servers[0].call_creds"},
		{"call_creds entry without type", func(b map[string]any) {
			server0(b)["call_creds"] = []any{map[string]any{"config": map[string]any{}}}
		}, "xds_servers[0].call_creds[0].type"},
		{"jwt_token_file call_creds without a file", func(b map[string]any) {
			server0(b)["channel_creds"] = []any{map[string]any{"type": "tls"}}
			server0(b)["call_creds"] = []any{map[string]any{"type": "jwt_token_file", "config": map[string]any{}}}
		}, "xds_servers[0].call_creds[0].config.jwt_token_file"},
		{"jwt_token_file a number", func(b map[string]any) {
			server0(b)["channel_creds"] = []any{map[string]any{"type": "tls"}}
			server0(b)["call_creds"] = []any{map[string]any{"type": "jwt_token_file", "config": map[string]any{"jwt_token_file": 7}}}
		}, "xds_servers[0].call_creds[0].config.jwt_token_file"},
		{"jwt_token_file over insecure channel_creds", func(b map[string]any) {
			server0(b)["call_creds"] = []any{map[string]any{"type": "jwt_token_file", "config": map[string]any{"jwt_token_file": "/t.jwt"}}}
		}, "xds_servers[0].call_creds[0]"},
		{"server_features not a list", func(b map[string]any) { server0(b)["server_features"] = "xds_v3" }, "xds_servers[0].server_features"},
		{"node not an object", func(b map[string]any) { b["node"] = []any{} }, "node"},
		{"node id a number", func(b map[string]any) { b["node"] = map[string]any{"id": 5} }, "node"},
		{"server_listener_resource_name_template a number", func(b map[string]any) {
			b["server_listener_resource_name_template"] = 5
		}, "server_listener_resource_name_template"},
		{"client_default_listener_resource_name_template a list", func(b map[string]any) {
			b["client_default_listener_resource_name_template"] = []any{}
		}, "client_default_listener_resource_name_template"},
		{"authorities a list", func(b map[string]any) { b["authorities"] = []any{} }, "authorities"},
		{"authority template of another authority", func(b map[string]any) {
			b["authorities"] = map[string]any{"a": map[string]any{"client_listener_resource_name_template": "xdstp://b/envoy.config.listener.v3.Listener/%s"}}
		}, `authorities["a"].client_listener_resource_name_template`},
		{"authority server without server_uri", func(b map[string]any) {
			b["authorities"] = map[string]any{"a": map[string]any{"xds_servers": []any{map[string]any{"channel_creds": []any{map[string]any{"type": "insecure"}}}}}}
		}, `authorities["a"].xds_servers[0].server_uri`},
		{"certificate_providers a list", func(b map[string]any) { b["certificate_providers"] = []any{} }, "certificate_providers"},
		{"provider without plugin_name", func(b map[string]any) { delete(provider(b), "plugin_name") }, `certificate_providers["p"].plugin_name`},
		{"file_watcher without files", func(b map[string]any) { provider(b)["config"] = map[string]any{} }, `certificate_providers["p"].config`},
		{"file_watcher certificate without key", func(b map[string]any) {
			provider(b)["config"] = map[string]any{"certificate_file": "/c.pem"}
		}, `certificate_providers["p"].config.private_key_file`},
		{"file_watcher bad refresh_interval", func(b map[string]any) {
			provider(b)["config"].(map[string]any)["refresh_interval"] = "soon"
		}, `certificate_providers["p"].config.refresh_interval`},
		{"file_watcher ca file a number", func(b map[string]any) {
			provider(b)["config"] = map[string]any{"ca_certificate_file": 1}
		}, `certificate_providers["p"].config.ca_certificate_file`},
		{"file_watcher SPIFFE bundle map a number", func(b map[string]any) {
			provider(b)["config"] = map[string]any{"spiffe_trust_bundle_map_file": 1}
		}, `certificate_providers["p"].config.spiffe_trust_bundle_map_file`},
		{"file_watcher empty SPIFFE bundle map only", func(b map[string]any) {
			provider(b)["config"] = map[string]any{"spiffe_trust_bundle_map_file": ""}
		}, `certificate_providers["p"].config`},
	}
	// The base is valid: otherwise every case would pass for a wrong reason.
	ok, err := json.Marshal(base())
	if err != nil {
		t.Fatal(err)
	}
	s, err := xds.NewGRPCServer(xds.BootstrapContents(ok))
	if err != nil {
		t.Fatalf("NewGRPCServer with the base bootstrap: %v", err)
	}
	s.Stop()
	for _, tc := range tests {
		t.Run(strings.ReplaceAll(tc.desc, " ", "_"), func(t *testing.T) {
			b := base()
			tc.mutate(b)
			contents, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			s, err := xds.NewGRPCServer(xds.BootstrapContents(contents))
			if err == nil {
				s.Stop()
				t.Fatalf("NewGRPCServer(%s) succeeded, want an error naming %s", contents, tc.wantField)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Errorf("NewGRPCServer error %q does not name %q", err, tc.wantField)
			}
		})
	}
}

// TestBadInputBootstrap_ChannelCreds: what NewGRPCServer says about
// channel_creds. A list of unknown types fails and lists what is supported;
// a type registered with grpc-go whose builder refuses its config fails,
// naming the entry and the type, and leaves nothing built; Traffic
// Director's google_default alone is accepted.
func TestBadInputBootstrap_ChannelCreds(t *testing.T) {
	noGoogleNetwork(t)
	withCreds := func(creds string) []byte {
		return []byte(`{"xds_servers": [{"server_uri": "` + closedLoopbackAddr(t) + `", "channel_creds": ` + creds + `}],
			"node": {"id": "n"}, "server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s"}`)
	}
	tests := []struct {
		desc     string
		creds    string
		wantErr  error
		wantText []string
	}{
		{
			desc:     "unknown types only",
			creds:    `[{"type": "no-such-creds"}, {"type": "alts"}]`,
			wantErr:  bootstrap.ErrNoSupportedCreds,
			wantText: []string{"xds_servers[0].channel_creds", `["no-such-creds", "alts"]`, "google_default, insecure, tls", "RegisterChannelCredentials"},
		},
		{
			desc:     "registered type with a bad config",
			creds:    `[{"type": "` + tdCredsName + `", "config": {"fail": 1}}, {"type": "insecure"}]`,
			wantErr:  bootstrap.ErrInvalidValue,
			wantText: []string{"xds_servers[0].channel_creds[0]", `"` + tdCredsName + `"`, "asks to fail"},
		},
	}
	for _, tc := range tests {
		t.Run(strings.ReplaceAll(tc.desc, " ", "_"), func(t *testing.T) {
			builds, cleanups := tdTestCreds.builds.Load(), tdTestCreds.cleanups.Load()
			s, err := xds.NewGRPCServer(grpc.Creds(insecure.NewCredentials()), xds.BootstrapContents(withCreds(tc.creds)))
			if err == nil {
				s.Stop()
				t.Fatalf("NewGRPCServer succeeded, want an error")
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("NewGRPCServer error %v does not wrap %v", err, tc.wantErr)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewGRPCServer error %q does not contain %q", err, w)
				}
			}
			if b, c := tdTestCreds.builds.Load()-builds, tdTestCreds.cleanups.Load()-cleanups; b != c {
				t.Errorf("%d builds of the registered credentials and %d cleanups, want as many", b, c)
			}
		})
	}
	t.Run("google_default_alone", func(t *testing.T) {
		s, err := xds.NewGRPCServer(grpc.Creds(insecure.NewCredentials()), xds.BootstrapContents(withCreds(`[{"type": "google_default"}]`)))
		if err != nil {
			t.Fatalf("NewGRPCServer with google_default channel_creds: %v", err)
		}
		s.Stop()
	})
}
