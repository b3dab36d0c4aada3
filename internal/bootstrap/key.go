package bootstrap

import (
	"bytes"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// The canonical form of a Config, encoded as JSON to make its Key. It holds
// the parsed values, not the source text, so the key does not depend on
// whitespace, member order, escapes, unknown fields or equivalent spellings
// (such as "600s" and "600.0s"). Maps are encoded by encoding/json in sorted
// key order. Order of lists is kept: it is meaningful for xds_servers, and
// ServerConfig.Equal treats server_features the same way.
type canonConfig struct {
	Servers        []canonServer             `json:"servers"`
	Node           []byte                    `json:"node"`
	Authorities    map[string]canonAuthority `json:"authorities,omitempty"`
	ServerTemplate string                    `json:"server_template"`
	ClientTemplate string                    `json:"client_template"`
	Providers      map[string]canonProvider  `json:"providers,omitempty"`
	// Allowed is allowed_grpc_services: it changes what the client's
	// decoders accept (gRFC A102).
	Allowed map[string][]canonServer `json:"allowed_grpc_services,omitempty"`
}

type canonServer struct {
	URI       string           `json:"uri"`
	Creds     string           `json:"creds"`
	CredsConf json.RawMessage  `json:"creds_config,omitempty"`
	TLS       *canonCert       `json:"tls,omitempty"`
	Features  []string         `json:"features,omitempty"`
	CallCreds []canonCallCreds `json:"call_creds,omitempty"`
}

type canonCallCreds struct {
	Type         string          `json:"type"`
	JWTTokenFile string          `json:"jwt_token_file,omitempty"`
	Config       json.RawMessage `json:"config,omitempty"`
}

type canonAuthority struct {
	Template string        `json:"template"`
	Servers  []canonServer `json:"servers,omitempty"`
}

type canonProvider struct {
	Plugin      string          `json:"plugin"`
	FileWatcher *canonCert      `json:"file_watcher,omitempty"`
	Config      json.RawMessage `json:"config,omitempty"`
	// Parsed says that a plugin registered with grpc-go parsed Config: a
	// Config parsed before the plugin was registered is not the same.
	Parsed bool `json:"parsed,omitempty"`
}

type canonCert struct {
	CA      string        `json:"ca,omitempty"`
	SPIFFE  string        `json:"spiffe,omitempty"`
	Cert    string        `json:"cert,omitempty"`
	Key     string        `json:"key,omitempty"`
	Refresh time.Duration `json:"refresh"`
}

// canonicalKey returns the value of Key for c.
func (c *Config) canonicalKey() string {
	k := canonConfig{
		Servers:        canonServers(c.XDSServers),
		Node:           canonNode(c.Node),
		ServerTemplate: c.ServerListenerResourceNameTemplate,
		ClientTemplate: c.ClientDefaultListenerResourceNameTemplate,
	}
	if len(c.Authorities) > 0 {
		k.Authorities = make(map[string]canonAuthority, len(c.Authorities))
		for name, a := range c.Authorities {
			if a == nil {
				continue
			}
			k.Authorities[name] = canonAuthority{Template: a.ClientListenerResourceNameTemplate, Servers: canonServers(a.XDSServers)}
		}
	}
	if len(c.CertProviders) > 0 {
		k.Providers = make(map[string]canonProvider, len(c.CertProviders))
		for name, p := range c.CertProviders {
			if p == nil {
				continue
			}
			cp := canonProvider{Plugin: p.PluginName, Parsed: p.buildable != nil}
			if fw := p.FileWatcher; fw != nil {
				cp.FileWatcher = &canonCert{CA: fw.CACertificateFile, SPIFFE: fw.SPIFFETrustBundleMapFile, Cert: fw.CertificateFile, Key: fw.PrivateKeyFile, Refresh: fw.RefreshInterval}
			} else {
				cp.Config = canonJSON(p.Config)
			}
			k.Providers[name] = cp
		}
	}
	if len(c.AllowedGRPCServices) > 0 {
		k.Allowed = make(map[string][]canonServer, len(c.AllowedGRPCServices))
		for target, s := range c.AllowedGRPCServices {
			k.Allowed[target] = canonServers([]*ServerConfig{s})
		}
	}
	b, err := json.Marshal(k)
	if err != nil {
		// Not reached: every field of canonConfig can be encoded.
		panic("bootstrap: encoding the config key: " + err.Error())
	}
	return string(b)
}

// canonServers returns the canonical form of servers. The raw credentials
// configs of the built-in types are left out: they say nothing beyond Type,
// TLS and the parsed call credentials. Another type's config is what its
// credentials are built from: it is kept, in canonical form.
func canonServers(servers []*ServerConfig) []canonServer {
	if len(servers) == 0 {
		return nil
	}
	out := make([]canonServer, 0, len(servers))
	for _, s := range servers {
		if s == nil {
			continue
		}
		cs := canonServer{URI: s.ServerURI, Creds: s.ChannelCreds.Type, Features: s.ServerFeatures}
		if !isBuiltinCreds(s.ChannelCreds.Type) {
			cs.CredsConf = canonJSON(s.ChannelCreds.Config)
		}
		if t := s.ChannelCreds.TLS; t != nil {
			cs.TLS = &canonCert{CA: t.CACertificateFile, Cert: t.CertificateFile, Key: t.PrivateKeyFile, Refresh: t.RefreshInterval}
		}
		for _, c := range s.CallCreds {
			cc := canonCallCreds{Type: c.Type, JWTTokenFile: c.JWTTokenFile}
			if c.Type != CallCredsJWTTokenFile {
				cc.Config = canonJSON(c.Config)
			}
			cs.CallCreds = append(cs.CallCreds, cc)
		}
		out = append(out, cs)
	}
	return out
}

// canonNode returns the deterministic wire encoding of n. Two Nodes that are
// proto.Equal encode alike within one binary, which is all a pool key needs.
func canonNode(n proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(n)
	if err != nil {
		// Only a hand-built Node with invalid UTF-8 gets here; the text
		// format sorts map entries too.
		return []byte(prototext.MarshalOptions{}.Format(n))
	}
	return b
}

// canonJSON re-encodes raw compactly with object members sorted by name and
// numbers kept as written, or returns raw unchanged if it does not decode.
func canonJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// Key returns a string that is equal for two ServerConfigs exactly when they
// describe the same connection to a management server (same URI, channel
// and call credentials, and features), whatever the formatting of their
// source JSON: where gRFC A47 says that authorities share a channel.
func (s *ServerConfig) Key() string {
	if s == nil {
		return ""
	}
	b, err := json.Marshal(canonServers([]*ServerConfig{s})[0])
	if err != nil {
		// Not reached: every field of canonServer can be encoded.
		panic("bootstrap: encoding the server key: " + err.Error())
	}
	return string(b)
}
