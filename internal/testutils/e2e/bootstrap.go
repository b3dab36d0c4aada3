package e2e

import (
	"encoding/json"
	"testing"
)

// BootstrapOptions describes the bootstrap Bootstrap generates. Zero fields
// are left out of the JSON (except server_features, which always has xds_v3).
type BootstrapOptions struct {
	// ServerURIs are the top-level xds_servers, in order: the first is the
	// primary, the others are fallbacks (gRFC A71). Each gets insecure
	// channel credentials.
	ServerURIs []string
	// NodeID is node.id.
	NodeID string
	// NodeMetadata is node.metadata (left out if nil).
	NodeMetadata map[string]any
	// ServerFeatures are added to every server's server_features after "xds_v3".
	ServerFeatures []string
	// ServerListenerResourceNameTemplate is server_listener_resource_name_template;
	// empty leaves it out. ServerListenerNameTemplate is the usual value.
	ServerListenerResourceNameTemplate string
	// Authorities are the federation authorities (gRFC A47), by name.
	Authorities map[string]AuthorityOptions
	// CertificateProviders are certificate_providers entries, by instance
	// name, copied verbatim.
	CertificateProviders map[string]json.RawMessage
	// AllowedGRPCServices are allowed_grpc_services entries (gRFC A102),
	// by target URI, copied verbatim.
	AllowedGRPCServices map[string]json.RawMessage
}

// AuthorityOptions describes one entry of the bootstrap's authorities.
type AuthorityOptions struct {
	// ServerURIs are the authority's xds_servers; empty leaves the field out
	// (the client then uses the top-level servers).
	ServerURIs []string
	// ClientListenerResourceNameTemplate is client_listener_resource_name_template;
	// empty leaves it out.
	ClientListenerResourceNameTemplate string
}

type jsonChannelCreds struct {
	Type string `json:"type"`
}

type jsonServer struct {
	ServerURI      string             `json:"server_uri"`
	ChannelCreds   []jsonChannelCreds `json:"channel_creds"`
	ServerFeatures []string           `json:"server_features"`
}

type jsonAuthority struct {
	XDSServers                         []jsonServer `json:"xds_servers,omitempty"`
	ClientListenerResourceNameTemplate string       `json:"client_listener_resource_name_template,omitempty"`
}

type jsonNode struct {
	ID       string         `json:"id,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

type jsonBootstrap struct {
	XDSServers                         []jsonServer               `json:"xds_servers,omitempty"`
	Node                               *jsonNode                  `json:"node,omitempty"`
	ServerListenerResourceNameTemplate string                     `json:"server_listener_resource_name_template,omitempty"`
	Authorities                        map[string]jsonAuthority   `json:"authorities,omitempty"`
	CertificateProviders               map[string]json.RawMessage `json:"certificate_providers,omitempty"`
	AllowedGRPCServices                map[string]json.RawMessage `json:"allowed_grpc_services,omitempty"`
}

// Bootstrap returns bootstrap JSON (gRFC A27) built from o. It fails the test
// if o cannot be encoded (a CertificateProviders entry that is not valid JSON).
func Bootstrap(t testing.TB, o BootstrapOptions) []byte {
	t.Helper()
	servers := func(uris []string) []jsonServer {
		var out []jsonServer
		for _, uri := range uris {
			out = append(out, jsonServer{
				ServerURI:      uri,
				ChannelCreds:   []jsonChannelCreds{{Type: "insecure"}},
				ServerFeatures: append([]string{"xds_v3"}, o.ServerFeatures...),
			})
		}
		return out
	}
	b := jsonBootstrap{
		XDSServers:                         servers(o.ServerURIs),
		ServerListenerResourceNameTemplate: o.ServerListenerResourceNameTemplate,
		CertificateProviders:               o.CertificateProviders,
		AllowedGRPCServices:                o.AllowedGRPCServices,
	}
	if o.NodeID != "" || o.NodeMetadata != nil {
		b.Node = &jsonNode{ID: o.NodeID, Metadata: o.NodeMetadata}
	}
	if o.Authorities != nil {
		b.Authorities = make(map[string]jsonAuthority, len(o.Authorities))
		for name, a := range o.Authorities {
			b.Authorities[name] = jsonAuthority{
				XDSServers:                         servers(a.ServerURIs),
				ClientListenerResourceNameTemplate: a.ClientListenerResourceNameTemplate,
			}
		}
	}
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		t.Fatalf("e2e: encoding bootstrap: %v", err)
	}
	return out
}
