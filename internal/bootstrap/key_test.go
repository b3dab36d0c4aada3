package bootstrap

import (
	"strings"
	"testing"
)

// keyBase is a bootstrap that uses every field, for the Key tests.
const keyBase = `{
	"xds_servers": [
		{"server_uri": "primary:443", "channel_creds": [{"type": "tls", "config": {
			"ca_certificate_file": "/ca.pem", "certificate_file": "/c.pem", "private_key_file": "/k.pem",
			"refresh_interval": "600s"}}],
		 "server_features": ["xds_v3", "ignore_resource_deletion"]},
		{"server_uri": "fallback:443", "channel_creds": [{"type": "insecure"}]},
		{"server_uri": "jwt:443", "channel_creds": [{"type": "unknown_creds"}, {"config": {}, "type":"tls"}],
		 "call_creds": [{"type": "jwt_token_file", "config": {"jwt_token_file": "/t.jwt"}}]}
	],
	"node": {"id": "n1", "cluster": "c", "metadata": {"a": 1, "b": {"c": [true, "x"]}},
		"locality": {"zone": "z"}},
	"authorities": {
		"a.example.com": {"xds_servers": [{"server_uri": "a:443", "channel_creds": [{"type": "insecure"}]}]},
		"b.example.com": {"client_listener_resource_name_template": "xdstp://b.example.com/l/%s"}
	},
	"server_listener_resource_name_template": "xdstp://a.example.com/envoy.config.listener.v3.Listener/%s",
	"client_default_listener_resource_name_template": "%s",
	"certificate_providers": {
		"fw": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": "/ca.pem", "refresh_interval": "60s"}},
		"spiffe": {"plugin_name": "file_watcher", "config": {"spiffe_trust_bundle_map_file": "/m.json"}},
		"other": {"plugin_name": "other", "config": {"x": 1, "y": [1, 2], "z": "\u00e9"}}
	}
}`

func mustKey(t *testing.T, in string) string {
	t.Helper()
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse() failed: %v\n%s", err, in)
	}
	return c.Key()
}

// TestKey_EqualForSameMeaning checks that the key ignores how the bootstrap is
// written.
func TestKey_EqualForSameMeaning(t *testing.T) {
	want := mustKey(t, keyBase)
	tests := []struct {
		desc string
		in   string
	}{
		{desc: "identical", in: keyBase},
		{desc: "compact", in: strings.Join(strings.Fields(keyBase), "")},
		{
			desc: "members reordered, escapes, unknown fields, nulls, equivalent spellings and defaults",
			in: `{"unknown": 1,
	"certificate_providers": {
		"other": {"config": {"z": "é", "y": [1, 2], "x": 1}, "plugin_name": "other"},
		"fw": {"config": {"refresh_interval": "60.000s", "ca_certificate_file": "/ca.pem", "x": 2}, "plugin_name": "file_watcher"},
		"spiffe": {"config": {"refresh_interval": "600s", "spiffe_trust_bundle_map_file": "/m.json"}, "plugin_name": "file_watcher"}
	},
	"client_default_listener_resource_name_template": null,
	"server_listener_resource_name_template": "xdstp://a.example.com/envoy.config.listener.v3.Listener/%s",
	"authorities": {
		"b.example.com": {"client_listener_resource_name_template": "xdstp://b.example.com/l/%s", "xds_servers": []},
		"a.example.com": {"client_listener_resource_name_template": "xdstp://a.example.com/envoy.config.listener.v3.Listener/%s",
			"xds_servers": [{"channel_creds": [{"type": "unknown_creds"}, {"type": "insecure", "config": {"q": 1}}], "server_uri": "a:443"}]}
	},
	"node": {"locality": {"zone": "z"}, "metadata": {"b": {"c": [true, "\u0078"]}, "a": 1.0}, "cluster": "c", "id": "n1",
		"user_agent_name": "ignored", "unknown": 3},
	"xds_servers": [
		{"server_features": ["xds_v3", "ignore_resource_deletion"], "channel_creds": [{"config": {
			"refresh_interval": "600.0s", "private_key_file": "/k.pem", "certificate_file": "/c.pem",
			"ca_certificate_file": "/ca.pem"}, "type": "tls"}, {"type": "insecure"}], "server_uri": "primary:443"},
		{"channel_creds": [{"type": "insecure", "config": {}}], "server_uri": "fallback:443", "server_features": []},
		{"call_creds": [{"type": "future"}, {"config": {"x": 1, "jwt_token_file": "/t.jwt"}, "type": "jwt_token_file"}],
		 "channel_creds": [{"type": "tls"}], "server_uri": "jwt:443"}
	]
}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := mustKey(t, tc.in); got != want {
				t.Errorf("Key() = %s\nwant %s", got, want)
			}
		})
	}
}

// TestKey_DiffersForOtherMeaning checks that a change to any field changes
// the key.
func TestKey_DiffersForOtherMeaning(t *testing.T) {
	base := mustKey(t, keyBase)
	tests := []struct {
		desc     string
		old, new string
	}{
		{desc: "server uri", old: `"primary:443"`, new: `"primary:444"`},
		{desc: "creds type", old: `"type": "tls"`, new: `"type": "insecure"`},
		{desc: "tls ca file", old: `"ca_certificate_file": "/ca.pem", "certificate_file"`, new: `"ca_certificate_file": "/ca2.pem", "certificate_file"`},
		{desc: "tls cert file", old: `"/c.pem"`, new: `"/c2.pem"`},
		{desc: "tls key file", old: `"/k.pem"`, new: `"/k2.pem"`},
		{desc: "tls refresh", old: `"600s"`, new: `"601s"`},
		{desc: "server features", old: `["xds_v3", "ignore_resource_deletion"]`, new: `["xds_v3"]`},
		{desc: "server feature order", old: `["xds_v3", "ignore_resource_deletion"]`, new: `["ignore_resource_deletion", "xds_v3"]`},
		{desc: "node id", old: `"n1"`, new: `"n2"`},
		{desc: "node metadata", old: `"a": 1`, new: `"a": 2`},
		{desc: "node locality", old: `"zone": "z"`, new: `"zone": "y"`},
		{desc: "authority name", old: `"a.example.com": {`, new: `"c.example.com": {`},
		{desc: "authority servers", old: `"a:443"`, new: `"a:444"`},
		{desc: "authority template", old: `"xdstp://b.example.com/l/%s"`, new: `"xdstp://b.example.com/m/%s"`},
		{desc: "server template", old: `"xdstp://a.example.com/envoy.config.listener.v3.Listener/%s"`, new: `"%s"`},
		{desc: "client template", old: `"client_default_listener_resource_name_template": "%s"`,
			new: `"client_default_listener_resource_name_template": "x/%s"`},
		{desc: "provider name", old: `"fw":`, new: `"fw2":`},
		{desc: "file_watcher ca", old: `{"ca_certificate_file": "/ca.pem", "refresh_interval": "60s"}`,
			new: `{"ca_certificate_file": "/ca3.pem", "refresh_interval": "60s"}`},
		{desc: "file_watcher refresh", old: `"60s"`, new: `"61s"`},
		{desc: "file_watcher SPIFFE map", old: `"/m.json"`, new: `"/m2.json"`},
		{desc: "jwt token file", old: `"/t.jwt"`, new: `"/t2.jwt"`},
		{desc: "call creds removed", old: `,
		 "call_creds": [{"type": "jwt_token_file", "config": {"jwt_token_file": "/t.jwt"}}]`, new: ``},
		{desc: "plugin name", old: `"plugin_name": "other"`, new: `"plugin_name": "other2"`},
		{desc: "plugin config", old: `"x": 1`, new: `"x": 2`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if strings.Count(keyBase, tc.old) != 1 {
				t.Fatalf("%q occurs %d times in keyBase, want once", tc.old, strings.Count(keyBase, tc.old))
			}
			in := strings.Replace(keyBase, tc.old, tc.new, 1)
			if got := mustKey(t, in); got == base {
				t.Errorf("Key() is unchanged after replacing %s with %s", tc.old, tc.new)
			}
		})
	}
}

// TestKey_ServerOrder checks that the order of servers counts: the first is
// the primary (gRFC A71).
func TestKey_ServerOrder(t *testing.T) {
	a := `{"server_uri": "a", "channel_creds": [{"type": "insecure"}]}`
	b := `{"server_uri": "b", "channel_creds": [{"type": "insecure"}]}`
	if mustKey(t, `{"xds_servers": [`+a+`, `+b+`]}`) == mustKey(t, `{"xds_servers": [`+b+`, `+a+`]}`) {
		t.Errorf("Key() is the same for servers [a, b] and [b, a]")
	}
}

// TestKey_HandBuilt checks that a Config built without Parse gets the key of
// the parsed Config with the same fields.
func TestKey_HandBuilt(t *testing.T) {
	c, err := Parse([]byte(keyBase))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	built := *c
	built.key = ""
	if got, want := built.Key(), c.Key(); got != want {
		t.Errorf("Key() of a hand-built copy = %s\nwant %s", got, want)
	}
	if (&Config{}).Key() == "" {
		t.Errorf("Key() of an empty Config is empty")
	}
}
