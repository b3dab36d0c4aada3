package e2e

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBootstrap(t *testing.T) {
	tests := []struct {
		desc string
		opts BootstrapOptions
		want string
	}{
		{
			desc: "minimal",
			opts: BootstrapOptions{ServerURIs: []string{"127.0.0.1:1"}, NodeID: "node-1"},
			want: `{
				"xds_servers": [{"server_uri": "127.0.0.1:1", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
				"node": {"id": "node-1"}
			}`,
		},
		{
			desc: "everything",
			opts: BootstrapOptions{
				ServerURIs:                         []string{"127.0.0.1:1", "127.0.0.1:2"},
				NodeID:                             "node-1",
				ServerFeatures:                     []string{"ignore_resource_deletion"},
				ServerListenerResourceNameTemplate: ServerListenerNameTemplate,
				Authorities: map[string]AuthorityOptions{
					"auth-a": {ServerURIs: []string{"127.0.0.1:3"}, ClientListenerResourceNameTemplate: "xdstp://auth-a/envoy.config.listener.v3.Listener/%s"},
					"auth-b": {},
				},
				CertificateProviders: map[string]json.RawMessage{
					"files": json.RawMessage(`{"plugin_name": "file_watcher", "config": {"certificate_file": "/a"}}`),
				},
			},
			want: `{
				"xds_servers": [
					{"server_uri": "127.0.0.1:1", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3", "ignore_resource_deletion"]},
					{"server_uri": "127.0.0.1:2", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3", "ignore_resource_deletion"]}
				],
				"node": {"id": "node-1"},
				"server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s",
				"authorities": {
					"auth-a": {
						"xds_servers": [{"server_uri": "127.0.0.1:3", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3", "ignore_resource_deletion"]}],
						"client_listener_resource_name_template": "xdstp://auth-a/envoy.config.listener.v3.Listener/%s"
					},
					"auth-b": {}
				},
				"certificate_providers": {"files": {"plugin_name": "file_watcher", "config": {"certificate_file": "/a"}}}
			}`,
		},
		{
			desc: "empty",
			opts: BootstrapOptions{},
			want: `{}`,
		},
	}
	for _, test := range tests {
		t.Run(test.desc, func(t *testing.T) {
			var got, want any
			b := Bootstrap(t, test.opts)
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("Bootstrap() returned invalid JSON %s: %v", b, err)
			}
			if err := json.Unmarshal([]byte(test.want), &want); err != nil {
				t.Fatalf("bad test JSON: %v", err)
			}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("Bootstrap() (-got, +want):\n%s", diff)
			}
		})
	}
}

// Two servers sharing feature slices must not share backing arrays.
func TestBootstrap_FeaturesNotAliased(t *testing.T) {
	features := make([]string, 1, 10)
	features[0] = "a"
	var got struct {
		XDSServers []struct {
			ServerFeatures []string `json:"server_features"`
		} `json:"xds_servers"`
	}
	if err := json.Unmarshal(Bootstrap(t, BootstrapOptions{ServerURIs: []string{"x", "y"}, ServerFeatures: features}), &got); err != nil {
		t.Fatal(err)
	}
	for i, s := range got.XDSServers {
		if diff := cmp.Diff(s.ServerFeatures, []string{"xds_v3", "a"}); diff != "" {
			t.Errorf("server %d features (-got, +want):\n%s", i, diff)
		}
	}
}
