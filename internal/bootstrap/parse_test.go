package bootstrap

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/version"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// serversJSON is a valid xds_servers member, for documents that test other
// fields.
const serversJSON = `"xds_servers": [{"server_uri": "xds.example.com:443", "channel_creds": [{"type": "insecure"}]}]`

// withServers returns a bootstrap with serversJSON and the given members.
func withServers(members string) string {
	if members == "" {
		return "{" + serversJSON + "}"
	}
	return "{" + serversJSON + ", " + members + "}"
}

// server returns a server with insecure credentials and no features.
func server(uri string) *ServerConfig {
	return &ServerConfig{ServerURI: uri, ChannelCreds: ChannelCreds{Type: CredsInsecure}}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantNode returns n with the fields this library sets.
func wantNode(n *corepb.Node) *corepb.Node {
	n.UserAgentName = UserAgentName
	n.UserAgentVersionType = &corepb.Node_UserAgentVersion{UserAgentVersion: version.Version()}
	n.ClientFeatures = []string{ClientFeatureNoOverprovisioning, ClientFeatureResourceInSotW}
	return n
}

// base returns the Config of withServers("") to be adjusted by a test case.
func base() *Config {
	return &Config{
		XDSServers: []*ServerConfig{server("xds.example.com:443")},
		Node:       wantNode(&corepb.Node{}),
		ClientDefaultListenerResourceNameTemplate: "%s",
	}
}

// with returns base() changed by f.
func with(f func(c *Config)) *Config {
	c := base()
	f(c)
	return c
}

// cmpOpts compares Configs: protos by value, the key (tested on its own in
// key_test.go) ignored.
var cmpOpts = []cmp.Option{protocmp.Transform(), cmpopts.IgnoreUnexported(Config{}, CertProviderConfig{})}

func TestParse_Servers(t *testing.T) {
	tests := []struct {
		desc string
		in   string
		want *Config
	}{
		{
			desc: "minimal",
			in:   withServers(""),
			want: base(),
		},
		{
			desc: "unknown fields ignored everywhere",
			in: `{"future": {"a": [1]}, "xds_servers": [{"server_uri": "xds.example.com:443", "x": 1,
				"channel_creds": [{"type": "insecure", "y": true}]}]}`,
			want: base(),
		},
		{
			desc: "null optional fields are absent",
			in: withServers(`"node": null, "authorities": null, "certificate_providers": null,
				"server_listener_resource_name_template": null, "client_default_listener_resource_name_template": null`),
			want: base(),
		},
		{
			desc: "servers keep their order (A71 primary then fallbacks)",
			in: `{"xds_servers": [
				{"server_uri": "primary:443", "channel_creds": [{"type": "insecure"}]},
				{"server_uri": "fallback:443", "channel_creds": [{"type": "insecure"}], "server_features": null}]}`,
			want: with(func(c *Config) { c.XDSServers = []*ServerConfig{server("primary:443"), server("fallback:443")} }),
		},
		{
			desc: "first supported creds type wins, later entries not examined",
			in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [
				{"type": "unknown_creds"}, {"type": "insecure", "config": {"b": 1, "a": 2}}, {"type": "tls", "config": 7}]}]}`,
			want: with(func(c *Config) {
				c.XDSServers = []*ServerConfig{{ServerURI: "s",
					ChannelCreds: ChannelCreds{Type: CredsInsecure, Config: json.RawMessage(`{"b": 1, "a": 2}`)}}}
			}),
		},
		{
			desc: "tls without config: system roots, no client cert, default refresh",
			in:   `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "tls"}, {"type": "insecure"}]}]}`,
			want: with(func(c *Config) {
				c.XDSServers = []*ServerConfig{{ServerURI: "s",
					ChannelCreds: ChannelCreds{Type: CredsTLS, TLS: &TLSCreds{RefreshInterval: 10 * time.Minute}}}}
			}),
		},
		{
			desc: "tls with every field (A65)",
			in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "tls", "config": {
				"ca_certificate_file": "/ca.pem", "certificate_file": "/cert.pem", "private_key_file": "/key.pem",
				"refresh_interval": "1.5s"}}]}]}`,
			want: with(func(c *Config) {
				c.XDSServers = []*ServerConfig{{ServerURI: "s", ChannelCreds: ChannelCreds{
					Type: CredsTLS,
					Config: json.RawMessage(`{
				"ca_certificate_file": "/ca.pem", "certificate_file": "/cert.pem", "private_key_file": "/key.pem",
				"refresh_interval": "1.5s"}`),
					TLS: &TLSCreds{CACertificateFile: "/ca.pem", CertificateFile: "/cert.pem", PrivateKeyFile: "/key.pem",
						RefreshInterval: 1500 * time.Millisecond},
				}}}
			}),
		},
		{
			desc: "tls with only a CA",
			in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "tls", "config": {
				"ca_certificate_file": "/ca.pem", "refresh_interval": null}}]}]}`,
			want: with(func(c *Config) {
				c.XDSServers = []*ServerConfig{{ServerURI: "s", ChannelCreds: ChannelCreds{
					Type: CredsTLS,
					Config: json.RawMessage(`{
				"ca_certificate_file": "/ca.pem", "refresh_interval": null}`),
					TLS: &TLSCreds{CACertificateFile: "/ca.pem", RefreshInterval: 10 * time.Minute},
				}}}
			}),
		},
		{
			desc: "server features kept as given, unknown ones ignored",
			in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}],
				"server_features": ["xds_v3", "ignore_resource_deletion", "trusted_xds_server"]}]}`,
			want: with(func(c *Config) {
				c.XDSServers = []*ServerConfig{{ServerURI: "s", ChannelCreds: ChannelCreds{Type: CredsInsecure},
					ServerFeatures:         []string{"xds_v3", "ignore_resource_deletion", "trusted_xds_server"},
					IgnoreResourceDeletion: true}}
			}),
		},
		{
			desc: "call_creds: jwt_token_file kept, unsupported types skipped (A97)",
			in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "tls"}], "call_creds": [
				{"type": "google_default"}, {"type": "jwt_token_file", "config": {"jwt_token_file": "/t.jwt"}},
				{"type": "future", "config": 7}]}]}`,
			want: with(func(c *Config) {
				c.XDSServers = []*ServerConfig{{ServerURI: "s",
					ChannelCreds: ChannelCreds{Type: CredsTLS, TLS: &TLSCreds{RefreshInterval: 10 * time.Minute}},
					CallCreds: []CallCreds{{Type: CallCredsJWTTokenFile, Config: json.RawMessage(`{"jwt_token_file": "/t.jwt"}`),
						JWTTokenFile: "/t.jwt"}}}}
			}),
		},
		{
			desc: "call_creds: only unsupported types, with insecure channel creds",
			in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}],
				"call_creds": [{"type": "google_default"}]}]}`,
			want: with(func(c *Config) { c.XDSServers = []*ServerConfig{server("s")} }),
		},
		{
			desc: "call_creds: empty list and null",
			in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}], "call_creds": []},
				{"server_uri": "t", "channel_creds": [{"type": "insecure"}], "call_creds": null}]}`,
			want: with(func(c *Config) { c.XDSServers = []*ServerConfig{server("s"), server("t")} }),
		},
		{
			desc: "empty server features",
			in:   `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}], "server_features": []}]}`,
			want: with(func(c *Config) { c.XDSServers = []*ServerConfig{server("s")} }),
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse() failed: %v", err)
			}
			if diff := cmp.Diff(got, tc.want, cmpOpts...); diff != "" {
				t.Errorf("Parse() returned unexpected diff (-got, +want):\n%s", diff)
			}
		})
	}
}

func TestParse_Node(t *testing.T) {
	metadata, err := structpb.NewStruct(map[string]any{"zone": "z1", "n": 2, "nested": map[string]any{"ok": true}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		desc string
		in   string
		want *corepb.Node
	}{
		{
			desc: "absent",
			in:   withServers(""),
			want: wantNode(&corepb.Node{}),
		},
		{
			desc: "empty object",
			in:   withServers(`"node": {}`),
			want: wantNode(&corepb.Node{}),
		},
		{
			desc: "fields, metadata, locality; unknown fields ignored",
			in: withServers(`"node": {"id": "projects/1/nodes/a", "cluster": "c", "unknown": {"x": 1},
				"metadata": {"zone": "z1", "n": 2, "nested": {"ok": true}},
				"locality": {"region": "r", "zone": "z", "sub_zone": "s"}}`),
			want: wantNode(&corepb.Node{Id: "projects/1/nodes/a", Cluster: "c", Metadata: metadata,
				Locality: &corepb.Locality{Region: "r", Zone: "z", SubZone: "s"}}),
		},
		{
			desc: "metadata of every JSON type, null members",
			in: withServers(`"node": {"id": null, "cluster": null, "locality": null,
				"metadata": {"s": "x", "n": -1.5, "b": false, "z": null, "l": [1, "a", {"k": []}], "o": {}}}`),
			want: wantNode(&corepb.Node{Metadata: mustStruct(t, map[string]any{
				"s": "x", "n": -1.5, "b": false, "z": nil, "l": []any{1, "a", map[string]any{"k": []any{}}}, "o": map[string]any{},
			})}),
		},
		{
			desc: "camelCase names",
			in:   withServers(`"node": {"id": "a", "locality": {"subZone": "s"}}`),
			want: wantNode(&corepb.Node{Id: "a", Locality: &corepb.Locality{SubZone: "s"}}),
		},
		{
			desc: "fields reserved to the client are overwritten (A27)",
			in: withServers(`"node": {"id": "a", "user_agent_name": "me", "user_agent_version": "9",
				"client_features": ["mine"]}`),
			want: wantNode(&corepb.Node{Id: "a"}),
		},
		{
			desc: "user_agent_build_version replaced by user_agent_version",
			in:   withServers(`"node": {"user_agent_build_version": {"metadata": {}}}`),
			want: wantNode(&corepb.Node{}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse() failed: %v", err)
			}
			if diff := cmp.Diff(got.Node, tc.want, protocmp.Transform()); diff != "" {
				t.Errorf("Parse().Node returned unexpected diff (-got, +want):\n%s", diff)
			}
		})
	}
}

func TestParse_AuthoritiesAndTemplates(t *testing.T) {
	tests := []struct {
		desc string
		in   string
		want *Config
	}{
		{
			desc: "empty authorities is nil",
			in:   withServers(`"authorities": {}`),
			want: base(),
		},
		{
			desc: "default template, top-level servers (A47)",
			in:   withServers(`"authorities": {"a.example.com": {}}`),
			want: with(func(c *Config) {
				c.Authorities = map[string]*Authority{"a.example.com": {
					ClientListenerResourceNameTemplate: "xdstp://a.example.com/envoy.config.listener.v3.Listener/%s"}}
			}),
		},
		{
			desc: "default template percent-encodes the authority",
			in:   withServers(`"authorities": {"a b/c%:1@x": {"xds_servers": []}, "": {"client_listener_resource_name_template": ""}}`),
			want: with(func(c *Config) {
				c.Authorities = map[string]*Authority{
					"a b/c%:1@x": {ClientListenerResourceNameTemplate: "xdstp://a%20b%2Fc%25:1@x/envoy.config.listener.v3.Listener/%s"},
					"":           {ClientListenerResourceNameTemplate: "xdstp:///envoy.config.listener.v3.Listener/%s"},
				}
			}),
		},
		{
			desc: "explicit templates with raw or encoded authority, own servers",
			in: withServers(`"authorities": {
				"a": {"client_listener_resource_name_template": "xdstp://a/custom/%s",
					"xds_servers": [{"server_uri": "a:443", "channel_creds": [{"type": "insecure"}]}]},
				"b c": {"client_listener_resource_name_template": "xdstp://b%20c/x/%s", "unknown": 1},
				"d e": {"client_listener_resource_name_template": "xdstp://d e/x/%s"}}`),
			want: with(func(c *Config) {
				c.Authorities = map[string]*Authority{
					"a":   {ClientListenerResourceNameTemplate: "xdstp://a/custom/%s", XDSServers: []*ServerConfig{server("a:443")}},
					"b c": {ClientListenerResourceNameTemplate: "xdstp://b%20c/x/%s"},
					"d e": {ClientListenerResourceNameTemplate: "xdstp://d e/x/%s"},
				}
			}),
		},
		{
			desc: "server and client default templates",
			in: withServers(`"server_listener_resource_name_template": "xdstp://a/envoy.config.listener.v3.Listener/grpc/server/%s",
				"client_default_listener_resource_name_template": "xdstp://a/l/%s"`),
			want: with(func(c *Config) {
				c.ServerListenerResourceNameTemplate = "xdstp://a/envoy.config.listener.v3.Listener/grpc/server/%s"
				c.ClientDefaultListenerResourceNameTemplate = "xdstp://a/l/%s"
			}),
		},
		{
			desc: "old-style server template, empty client template defaults",
			in: withServers(`"server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s",
				"client_default_listener_resource_name_template": ""`),
			want: with(func(c *Config) {
				c.ServerListenerResourceNameTemplate = "grpc/server?xds.resource.listening_address=%s"
			}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse() failed: %v", err)
			}
			if diff := cmp.Diff(got, tc.want, cmpOpts...); diff != "" {
				t.Errorf("Parse() returned unexpected diff (-got, +want):\n%s", diff)
			}
		})
	}
}

func TestParse_CertProviders(t *testing.T) {
	tests := []struct {
		desc string
		in   string
		want map[string]*CertProviderConfig
	}{
		{
			desc: "empty map is nil",
			in:   `{}`,
			want: nil,
		},
		{
			desc: "file_watcher with every field (A29)",
			in: `{"p": {"plugin_name": "file_watcher", "config": {"certificate_file": "c", "private_key_file": "k",
				"ca_certificate_file": "ca", "refresh_interval": "60s"}}}`,
			want: map[string]*CertProviderConfig{"p": {
				PluginName: "file_watcher",
				Config: json.RawMessage(`{"certificate_file": "c", "private_key_file": "k",
				"ca_certificate_file": "ca", "refresh_interval": "60s"}`),
				FileWatcher: &FileWatcherConfig{CertificateFile: "c", PrivateKeyFile: "k", CACertificateFile: "ca",
					RefreshInterval: time.Minute},
			}},
		},
		{
			desc: "file_watcher with only a CA, default refresh",
			in:   `{"p": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": "ca"}}}`,
			want: map[string]*CertProviderConfig{"p": {
				PluginName:  "file_watcher",
				Config:      json.RawMessage(`{"ca_certificate_file": "ca"}`),
				FileWatcher: &FileWatcherConfig{CACertificateFile: "ca", RefreshInterval: 10 * time.Minute},
			}},
		},
		{
			desc: "file_watcher with only an identity",
			in:   `{"p": {"plugin_name": "file_watcher", "config": {"certificate_file": "c", "private_key_file": "k"}}}`,
			want: map[string]*CertProviderConfig{"p": {
				PluginName:  "file_watcher",
				Config:      json.RawMessage(`{"certificate_file": "c", "private_key_file": "k"}`),
				FileWatcher: &FileWatcherConfig{CertificateFile: "c", PrivateKeyFile: "k", RefreshInterval: 10 * time.Minute},
			}},
		},
		{
			desc: "file_watcher with only a SPIFFE bundle map (A87)",
			in:   `{"p": {"plugin_name": "file_watcher", "config": {"spiffe_trust_bundle_map_file": "m.json"}}}`,
			want: map[string]*CertProviderConfig{"p": {
				PluginName:  "file_watcher",
				Config:      json.RawMessage(`{"spiffe_trust_bundle_map_file": "m.json"}`),
				FileWatcher: &FileWatcherConfig{SPIFFETrustBundleMapFile: "m.json", RefreshInterval: 10 * time.Minute},
			}},
		},
		{
			desc: "file_watcher with a SPIFFE bundle map and a CA file: both kept",
			in: `{"p": {"plugin_name": "file_watcher", "config": {"certificate_file": "c", "private_key_file": "k",
				"ca_certificate_file": "ca", "spiffe_trust_bundle_map_file": "m.json"}}}`,
			want: map[string]*CertProviderConfig{"p": {
				PluginName: "file_watcher",
				Config: json.RawMessage(`{"certificate_file": "c", "private_key_file": "k",
				"ca_certificate_file": "ca", "spiffe_trust_bundle_map_file": "m.json"}`),
				FileWatcher: &FileWatcherConfig{CertificateFile: "c", PrivateKeyFile: "k", CACertificateFile: "ca",
					SPIFFETrustBundleMapFile: "m.json", RefreshInterval: 10 * time.Minute},
			}},
		},
		{
			desc: "unknown plugins kept unparsed",
			in:   `{"a": {"plugin_name": "meshca", "config": {"anything": [1, 2]}}, "b": {"plugin_name": "other"}}`,
			want: map[string]*CertProviderConfig{
				"a": {PluginName: "meshca", Config: json.RawMessage(`{"anything": [1, 2]}`)},
				"b": {PluginName: "other"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := Parse([]byte(withServers(`"certificate_providers": ` + tc.in)))
			if err != nil {
				t.Fatalf("Parse() failed: %v", err)
			}
			if diff := cmp.Diff(got.CertProviders, tc.want, cmpOpts...); diff != "" {
				t.Errorf("Parse().CertProviders returned unexpected diff (-got, +want):\n%s", diff)
			}
		})
	}
}

// TestParse_Copies checks that the Config shares no memory with the input.
func TestParse_Copies(t *testing.T) {
	in := []byte(withServers(`"certificate_providers": {"p": {"plugin_name": "x", "config": {"a": "b"}}}`))
	c, err := Parse(in)
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	for i := range in {
		in[i] = ' '
	}
	if got, want := string(c.CertProviders["p"].Config), `{"a": "b"}`; got != want {
		t.Errorf("Config after overwriting the input = %s, want %s", got, want)
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "600s", want: 10 * time.Minute},
		{in: "0s", want: 0},
		{in: "1.5s", want: 1500 * time.Millisecond},
		{in: "0.000000001s", want: 1},
		{in: "-2.25s", want: -2250 * time.Millisecond},
		{in: "007s", want: 7 * time.Second},
		{in: "9223372036.854775807s", want: time.Duration(1<<63 - 1)},
		{in: "9223372036.854775808s", wantErr: true},
		{in: "315576000000s", wantErr: true}, // valid proto, too long for time.Duration
		{in: "315576000001s", wantErr: true},
		{in: "1000000000000s", wantErr: true},
		{in: "10m", wantErr: true},
		{in: "600", wantErr: true},
		{in: "s", wantErr: true},
		{in: "-s", wantErr: true},
		{in: ".5s", wantErr: true},
		{in: "1.s", wantErr: true},
		{in: "1.0000000001s", wantErr: true},
		{in: "+1s", wantErr: true},
		{in: "1e3s", wantErr: true},
		{in: " 1s", wantErr: true},
		{in: "1 s", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parseDuration(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseDuration(%q) = %v, %v; want error: %v", tc.in, got, err, tc.wantErr)
			continue
		}
		if got != tc.want {
			t.Errorf("parseDuration(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestServersFor(t *testing.T) {
	c, err := Parse([]byte(withServers(`"authorities": {"own": {"xds_servers": [
		{"server_uri": "own:443", "channel_creds": [{"type": "insecure"}]}]}, "shared": {}}`)))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	tests := []struct {
		desc      string
		authority string
		want      []*ServerConfig
		wantOK    bool
	}{
		{desc: "own servers", authority: "own", want: []*ServerConfig{server("own:443")}, wantOK: true},
		{desc: "top-level servers", authority: "shared", want: c.XDSServers, wantOK: true},
		{desc: "unknown authority", authority: "other"},
	}
	for _, tc := range tests {
		got, ok := c.ServersFor(tc.authority)
		if ok != tc.wantOK {
			t.Errorf("%s: ServersFor(%q) ok = %v, want %v", tc.desc, tc.authority, ok, tc.wantOK)
		}
		if diff := cmp.Diff(got, tc.want); diff != "" {
			t.Errorf("%s: ServersFor(%q) returned unexpected diff (-got, +want):\n%s", tc.desc, tc.authority, diff)
		}
	}
}

func TestServerConfigEqual(t *testing.T) {
	parse := func(server string) *ServerConfig {
		t.Helper()
		c, err := Parse([]byte(`{"xds_servers": [` + server + `]}`))
		if err != nil {
			t.Fatalf("Parse() failed: %v", err)
		}
		return c.XDSServers[0]
	}
	a := parse(`{"server_uri": "s", "channel_creds": [{"type": "tls", "config": {"refresh_interval": "600s"}}]}`)
	tests := []struct {
		desc  string
		other *ServerConfig
		want  bool
	}{
		{desc: "same meaning, other spelling",
			other: parse(`{"channel_creds": [{"type": "tls", "config": {"refresh_interval": "600.0s", "x": 1}}], "server_uri": "s"}`),
			want:  true},
		{desc: "other uri", other: parse(`{"server_uri": "t", "channel_creds": [{"type": "tls"}]}`)},
		{desc: "other creds", other: parse(`{"server_uri": "s", "channel_creds": [{"type": "insecure"}]}`)},
		{desc: "other tls", other: parse(`{"server_uri": "s", "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": "c"}}]}`)},
		{desc: "other features", other: parse(`{"server_uri": "s", "channel_creds": [{"type": "tls"}], "server_features": ["xds_v3"]}`)},
		{desc: "with call creds", other: parse(`{"server_uri": "s", "channel_creds": [{"type": "tls"}],
			"call_creds": [{"type": "jwt_token_file", "config": {"jwt_token_file": "/t"}}]}`)},
		{desc: "nil"},
	}
	for _, tc := range tests {
		if got := a.Equal(tc.other); got != tc.want {
			t.Errorf("%s: Equal() = %v, want %v", tc.desc, got, tc.want)
		}
	}
	var nilServer *ServerConfig
	if !nilServer.Equal(nil) {
		t.Errorf("nil.Equal(nil) = false, want true")
	}
}

func TestErrorFormat(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		err  *Error
		want string
	}{
		{err: &Error{Err: cause}, want: "bootstrap: cause"},
		{err: &Error{Field: "node", Err: cause}, want: "bootstrap: node: cause"},
		{err: &Error{Source: "bootstrap option", Field: "xds_servers", Err: cause}, want: "bootstrap: bootstrap option: xds_servers: cause"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if !errors.Is(tc.err, cause) {
			t.Errorf("errors.Is(%v, cause) = false, want true", tc.err)
		}
		if strings.ToLower(tc.err.Error()[:1]) != tc.err.Error()[:1] {
			t.Errorf("Error() = %q, want lowercase", tc.err.Error())
		}
	}
}
