package bootstrap

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// srv returns a bootstrap whose only server has the given channel_creds.
func srv(creds string) string {
	return `{"xds_servers": [{"server_uri": "s", "channel_creds": ` + creds + `}]}`
}

// tlsWith returns a bootstrap whose only server has tls creds with config.
func tlsWith(config string) string {
	return srv(`[{"type": "tls", "config": ` + config + `}]`)
}

// callCreds returns a bootstrap whose only server has tls channel creds and
// the given call_creds.
func callCreds(list string) string {
	return `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "tls"}], "call_creds": ` + list + `}]}`
}

// provider returns a bootstrap with one certificate provider "p".
func provider(p string) string {
	return withServers(`"certificate_providers": {"p": ` + p + `}`)
}

// watcher returns a bootstrap with a file_watcher provider "p" with config.
func watcher(config string) string {
	return provider(`{"plugin_name": "file_watcher", "config": ` + config + `}`)
}

// authority returns a bootstrap with one authority "a".
func authority(a string) string {
	return withServers(`"authorities": {"a": ` + a + `}`)
}

func TestParse_Errors(t *testing.T) {
	tests := []struct {
		desc      string
		in        string
		wantField string
		// wantErr is the sentinel the error must wrap; nil for errors of
		// other packages (protojson).
		wantErr error
	}{
		{desc: "top level is an array", in: `[]`, wantErr: ErrWrongType},
		{desc: "top level is null", in: `null`, wantErr: ErrWrongType},
		{desc: "top level is a string", in: `"x"`, wantErr: ErrWrongType},

		{desc: "no xds_servers", in: `{}`, wantField: "xds_servers", wantErr: ErrMissingField},
		{desc: "null xds_servers", in: `{"xds_servers": null}`, wantField: "xds_servers", wantErr: ErrMissingField},
		{desc: "empty xds_servers", in: `{"xds_servers": []}`, wantField: "xds_servers", wantErr: ErrMissingField},
		{desc: "xds_servers an object", in: `{"xds_servers": {}}`, wantField: "xds_servers", wantErr: ErrWrongType},
		{desc: "server a number", in: `{"xds_servers": [1]}`, wantField: "xds_servers[0]", wantErr: ErrWrongType},
		{desc: "no server_uri", in: `{"xds_servers": [{"channel_creds": [{"type": "insecure"}]}]}`,
			wantField: "xds_servers[0].server_uri", wantErr: ErrMissingField},
		{desc: "empty server_uri", in: `{"xds_servers": [{"server_uri": "", "channel_creds": [{"type": "insecure"}]}]}`,
			wantField: "xds_servers[0].server_uri", wantErr: ErrMissingField},
		{desc: "server_uri a number", in: `{"xds_servers": [{"server_uri": 5, "channel_creds": [{"type": "insecure"}]}]}`,
			wantField: "xds_servers[0].server_uri", wantErr: ErrWrongType},
		{desc: "second server broken", in: `{"xds_servers": [{"server_uri": "a", "channel_creds": [{"type": "insecure"}]}, {"server_uri": "b"}]}`,
			wantField: "xds_servers[1].channel_creds", wantErr: ErrMissingField},

		{desc: "no channel_creds", in: `{"xds_servers": [{"server_uri": "s"}]}`,
			wantField: "xds_servers[0].channel_creds", wantErr: ErrMissingField},
		{desc: "empty channel_creds", in: srv(`[]`), wantField: "xds_servers[0].channel_creds", wantErr: ErrMissingField},
		{desc: "channel_creds an object", in: srv(`{"type": "insecure"}`), wantField: "xds_servers[0].channel_creds", wantErr: ErrWrongType},
		{desc: "creds entry a string", in: srv(`["insecure"]`), wantField: "xds_servers[0].channel_creds[0]", wantErr: ErrWrongType},
		{desc: "creds entry without type", in: srv(`[{}]`), wantField: "xds_servers[0].channel_creds[0].type", wantErr: ErrMissingField},
		{desc: "creds type a number", in: srv(`[{"type": 1}]`), wantField: "xds_servers[0].channel_creds[0].type", wantErr: ErrWrongType},
		{desc: "only unsupported creds", in: srv(`[{"type": "unknown_creds"}, {"type": "xds"}]`),
			wantField: "xds_servers[0].channel_creds", wantErr: ErrNoSupportedCreds},
		{desc: "broken entry after unsupported", in: srv(`[{"type": "unknown_creds"}, {"type": ["tls"]}]`),
			wantField: "xds_servers[0].channel_creds[1].type", wantErr: ErrWrongType},
		{desc: "insecure config a string", in: srv(`[{"type": "insecure", "config": "x"}]`),
			wantField: "xds_servers[0].channel_creds[0].config", wantErr: ErrWrongType},

		{desc: "tls config an array", in: tlsWith(`[]`), wantField: "xds_servers[0].channel_creds[0].config", wantErr: ErrWrongType},
		{desc: "tls certificate without key", in: tlsWith(`{"certificate_file": "c"}`),
			wantField: "xds_servers[0].channel_creds[0].config.private_key_file", wantErr: ErrMissingField},
		{desc: "tls key without certificate", in: tlsWith(`{"private_key_file": "k", "ca_certificate_file": "ca"}`),
			wantField: "xds_servers[0].channel_creds[0].config.certificate_file", wantErr: ErrMissingField},
		{desc: "tls ca a number", in: tlsWith(`{"ca_certificate_file": 1}`),
			wantField: "xds_servers[0].channel_creds[0].config.ca_certificate_file", wantErr: ErrWrongType},
		{desc: "tls certificate a bool", in: tlsWith(`{"certificate_file": true, "private_key_file": "k"}`),
			wantField: "xds_servers[0].channel_creds[0].config.certificate_file", wantErr: ErrWrongType},
		{desc: "tls key an object", in: tlsWith(`{"certificate_file": "c", "private_key_file": {}}`),
			wantField: "xds_servers[0].channel_creds[0].config.private_key_file", wantErr: ErrWrongType},
		{desc: "tls refresh a number", in: tlsWith(`{"refresh_interval": 600}`),
			wantField: "xds_servers[0].channel_creds[0].config.refresh_interval", wantErr: ErrWrongType},
		{desc: "tls refresh a Go duration", in: tlsWith(`{"refresh_interval": "10m"}`),
			wantField: "xds_servers[0].channel_creds[0].config.refresh_interval", wantErr: ErrInvalidValue},
		{desc: "tls refresh zero", in: tlsWith(`{"refresh_interval": "0s"}`),
			wantField: "xds_servers[0].channel_creds[0].config.refresh_interval", wantErr: ErrInvalidValue},
		{desc: "tls refresh negative", in: tlsWith(`{"refresh_interval": "-1s"}`),
			wantField: "xds_servers[0].channel_creds[0].config.refresh_interval", wantErr: ErrInvalidValue},

		{desc: "tls with a SPIFFE bundle map", in: tlsWith(`{"ca_certificate_file": "ca", "spiffe_trust_bundle_map_file": "m.json"}`),
			wantField: "xds_servers[0].channel_creds[0].config.spiffe_trust_bundle_map_file", wantErr: ErrInvalidValue},

		{desc: "call_creds an object", in: callCreds(`{"type": "jwt_token_file"}`),
			wantField: "xds_servers[0].call_creds", wantErr: ErrWrongType},
		{desc: "call_creds entry a string", in: callCreds(`["jwt_token_file"]`),
			wantField: "xds_servers[0].call_creds[0]", wantErr: ErrWrongType},
		{desc: "call_creds entry without type", in: callCreds(`[{"config": {}}]`),
			wantField: "xds_servers[0].call_creds[0].type", wantErr: ErrMissingField},
		{desc: "call_creds type a number", in: callCreds(`[{"type": 1}]`),
			wantField: "xds_servers[0].call_creds[0].type", wantErr: ErrWrongType},
		{desc: "jwt_token_file without config", in: callCreds(`[{"type": "jwt_token_file"}]`),
			wantField: "xds_servers[0].call_creds[0].config.jwt_token_file", wantErr: ErrMissingField},
		{desc: "jwt_token_file config a string", in: callCreds(`[{"type": "jwt_token_file", "config": "/t"}]`),
			wantField: "xds_servers[0].call_creds[0].config", wantErr: ErrWrongType},
		{desc: "jwt_token_file empty", in: callCreds(`[{"type": "jwt_token_file", "config": {"jwt_token_file": ""}}]`),
			wantField: "xds_servers[0].call_creds[0].config.jwt_token_file", wantErr: ErrMissingField},
		{desc: "jwt_token_file a number", in: callCreds(`[{"type": "jwt_token_file", "config": {"jwt_token_file": 1}}]`),
			wantField: "xds_servers[0].call_creds[0].config.jwt_token_file", wantErr: ErrWrongType},
		{desc: "second call_creds entry broken", in: callCreds(`[{"type": "other"}, {"type": "jwt_token_file", "config": {}}]`),
			wantField: "xds_servers[0].call_creds[1].config.jwt_token_file", wantErr: ErrMissingField},
		{desc: "jwt_token_file over insecure channel creds",
			in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}],
				"call_creds": [{"type": "jwt_token_file", "config": {"jwt_token_file": "/t"}}]}]}`,
			wantField: "xds_servers[0].call_creds[0]", wantErr: ErrInvalidValue},

		{desc: "server_features a string", in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}], "server_features": "xds_v3"}]}`,
			wantField: "xds_servers[0].server_features", wantErr: ErrWrongType},
		{desc: "server feature a number", in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3", 1]}]}`,
			wantField: "xds_servers[0].server_features[1]", wantErr: ErrWrongType},

		{desc: "node an array", in: withServers(`"node": []`), wantField: "node", wantErr: ErrWrongType},
		{desc: "node id a number", in: withServers(`"node": {"id": 5}`), wantField: "node.id", wantErr: ErrWrongType},
		{desc: "node metadata a string", in: withServers(`"node": {"metadata": "m"}`), wantField: "node.metadata", wantErr: ErrWrongType},
		{desc: "node locality zone a list", in: withServers(`"node": {"locality": {"zone": []}}`), wantField: "node.locality.zone", wantErr: ErrWrongType},
		{desc: "node locality a string", in: withServers(`"node": {"locality": "z"}`), wantField: "node.locality", wantErr: ErrWrongType},
		{desc: "node cluster an object", in: withServers(`"node": {"cluster": {}}`), wantField: "node.cluster", wantErr: ErrWrongType},

		{desc: "authorities an array", in: withServers(`"authorities": []`), wantField: "authorities", wantErr: ErrWrongType},
		{desc: "authority a number", in: authority(`1`), wantField: `authorities["a"]`, wantErr: ErrWrongType},
		{desc: "authority template a number", in: authority(`{"client_listener_resource_name_template": 1}`),
			wantField: `authorities["a"].client_listener_resource_name_template`, wantErr: ErrWrongType},
		{desc: "authority template for another authority", in: authority(`{"client_listener_resource_name_template": "xdstp://b/x/%s"}`),
			wantField: `authorities["a"].client_listener_resource_name_template`, wantErr: ErrInvalidValue},
		{desc: "authority template without slash", in: authority(`{"client_listener_resource_name_template": "xdstp://a"}`),
			wantField: `authorities["a"].client_listener_resource_name_template`, wantErr: ErrInvalidValue},
		{desc: "authority template prefix of a longer name", in: authority(`{"client_listener_resource_name_template": "xdstp://ab/x/%s"}`),
			wantField: `authorities["a"].client_listener_resource_name_template`, wantErr: ErrInvalidValue},
		{desc: "authority template old-style", in: authority(`{"client_listener_resource_name_template": "%s"}`),
			wantField: `authorities["a"].client_listener_resource_name_template`, wantErr: ErrInvalidValue},
		{desc: "authority servers an object", in: authority(`{"xds_servers": {}}`),
			wantField: `authorities["a"].xds_servers`, wantErr: ErrWrongType},
		{desc: "authority server without uri", in: authority(`{"xds_servers": [{"channel_creds": [{"type": "insecure"}]}]}`),
			wantField: `authorities["a"].xds_servers[0].server_uri`, wantErr: ErrMissingField},
		{desc: "authority server unsupported creds", in: authority(`{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "unknown_creds"}]}]}`),
			wantField: `authorities["a"].xds_servers[0].channel_creds`, wantErr: ErrNoSupportedCreds},
		{desc: "first broken authority in name order", in: withServers(`"authorities": {"z": 1, "b": 2}`),
			wantField: `authorities["b"]`, wantErr: ErrWrongType},

		{desc: "server template a number", in: withServers(`"server_listener_resource_name_template": 1`),
			wantField: "server_listener_resource_name_template", wantErr: ErrWrongType},
		{desc: "client default template a list", in: withServers(`"client_default_listener_resource_name_template": []`),
			wantField: "client_default_listener_resource_name_template", wantErr: ErrWrongType},

		{desc: "certificate_providers an array", in: withServers(`"certificate_providers": []`),
			wantField: "certificate_providers", wantErr: ErrWrongType},
		{desc: "provider a string", in: provider(`"file_watcher"`), wantField: `certificate_providers["p"]`, wantErr: ErrWrongType},
		{desc: "provider without plugin_name", in: provider(`{"config": {}}`),
			wantField: `certificate_providers["p"].plugin_name`, wantErr: ErrMissingField},
		{desc: "provider empty plugin_name", in: provider(`{"plugin_name": ""}`),
			wantField: `certificate_providers["p"].plugin_name`, wantErr: ErrMissingField},
		{desc: "provider plugin_name a number", in: provider(`{"plugin_name": 1}`),
			wantField: `certificate_providers["p"].plugin_name`, wantErr: ErrWrongType},
		{desc: "unknown plugin config a string", in: provider(`{"plugin_name": "other", "config": "x"}`),
			wantField: `certificate_providers["p"].config`, wantErr: ErrWrongType},
		{desc: "file_watcher without config", in: provider(`{"plugin_name": "file_watcher"}`),
			wantField: `certificate_providers["p"].config`, wantErr: ErrMissingField},
		{desc: "file_watcher empty config", in: watcher(`{}`),
			wantField: `certificate_providers["p"].config`, wantErr: ErrMissingField},
		{desc: "file_watcher only refresh", in: watcher(`{"refresh_interval": "1s"}`),
			wantField: `certificate_providers["p"].config`, wantErr: ErrMissingField},
		{desc: "file_watcher certificate without key", in: watcher(`{"certificate_file": "c", "ca_certificate_file": "ca"}`),
			wantField: `certificate_providers["p"].config.private_key_file`, wantErr: ErrMissingField},
		{desc: "file_watcher key without certificate", in: watcher(`{"private_key_file": "k"}`),
			wantField: `certificate_providers["p"].config.certificate_file`, wantErr: ErrMissingField},
		{desc: "file_watcher ca a number", in: watcher(`{"ca_certificate_file": 7}`),
			wantField: `certificate_providers["p"].config.ca_certificate_file`, wantErr: ErrWrongType},
		{desc: "file_watcher refresh a number", in: watcher(`{"ca_certificate_file": "ca", "refresh_interval": 60}`),
			wantField: `certificate_providers["p"].config.refresh_interval`, wantErr: ErrWrongType},
		{desc: "file_watcher refresh zero", in: watcher(`{"ca_certificate_file": "ca", "refresh_interval": "0.0s"}`),
			wantField: `certificate_providers["p"].config.refresh_interval`, wantErr: ErrInvalidValue},
		{desc: "file_watcher refresh too precise", in: watcher(`{"ca_certificate_file": "ca", "refresh_interval": "1.0000000001s"}`),
			wantField: `certificate_providers["p"].config.refresh_interval`, wantErr: ErrInvalidValue},
		{desc: "file_watcher refresh too long", in: watcher(`{"ca_certificate_file": "ca", "refresh_interval": "315576000001s"}`),
			wantField: `certificate_providers["p"].config.refresh_interval`, wantErr: ErrInvalidValue},
		{desc: "file_watcher SPIFFE map a number", in: watcher(`{"spiffe_trust_bundle_map_file": 7}`),
			wantField: `certificate_providers["p"].config.spiffe_trust_bundle_map_file`, wantErr: ErrWrongType},
		{desc: "file_watcher empty SPIFFE map only", in: watcher(`{"spiffe_trust_bundle_map_file": ""}`),
			wantField: `certificate_providers["p"].config`, wantErr: ErrMissingField},
		{desc: "file_watcher config an array", in: watcher(`[]`),
			wantField: `certificate_providers["p"].config`, wantErr: ErrWrongType},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("Parse() = %+v, want error", got)
			}
			if got != nil {
				t.Errorf("Parse() returned a Config with the error %v", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse() error %v (%T) is not an *Error", err, err)
			}
			if e.Field != tc.wantField {
				t.Errorf("Parse() error Field = %q, want %q (error: %v)", e.Field, tc.wantField, err)
			}
			if e.Source != "" {
				t.Errorf("Parse() error Source = %q, want empty", e.Source)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Parse() error %v does not wrap %v", err, tc.wantErr)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "bootstrap: "+tc.wantField) {
				t.Errorf("Parse() error %q does not start with %q", msg, "bootstrap: "+tc.wantField)
			}
		})
	}
}

func TestParse_InvalidJSON(t *testing.T) {
	for _, in := range []string{``, `{`, `{"xds_servers": [}`, `{} {}`, `{"a": 1,}`, "\x00"} {
		got, err := Parse([]byte(in))
		var syntax *json.SyntaxError
		if !errors.As(err, &syntax) {
			t.Errorf("Parse(%q) = %v, %v; want a *json.SyntaxError", in, got, err)
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Field != "" {
			t.Errorf("Parse(%q) error %v: want an *Error with no Field", in, err)
		}
	}
}

// TestParse_ErrorMessages pins the text of the messages an operator reads
// most often; other tests check error kinds only.
func TestParse_ErrorMessages(t *testing.T) {
	tests := []struct {
		desc string
		in   string
		want string
	}{
		{
			desc: "unsupported creds",
			in: `{"xds_servers": [{"server_uri": "a", "channel_creds": [{"type": "insecure"}]},
				{"server_uri": "b", "channel_creds": [{"type": "unknown_creds"}]}]}`,
			want: `bootstrap: xds_servers[1].channel_creds: no supported type in ["unknown_creds"] (supported: google_default, insecure, tls)`,
		},
		{
			desc: "wrong type",
			in:   `{"xds_servers": [{"server_uri": 5}]}`,
			want: `bootstrap: xds_servers[0].server_uri: wrong JSON type: want string, got number`,
		},
		{
			desc: "missing",
			in:   `{"xds_servers": []}`,
			want: `bootstrap: xds_servers: missing required field: the list is empty`,
		},
		{
			desc: "template",
			in:   authority(`{"client_listener_resource_name_template": "xdstp://b/%s"}`),
			want: `bootstrap: authorities["a"].client_listener_resource_name_template: invalid value "xdstp://b/%s": must start with "xdstp://a/"`,
		},
		{
			desc: "duration",
			in:   tlsWith(`{"refresh_interval": "0s"}`),
			want: `bootstrap: xds_servers[0].channel_creds[0].config.refresh_interval: invalid value "0s": must be positive`,
		},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: Parse() error = %v, want %s", tc.desc, err, tc.want)
		}
	}
}
