// Package bootstrap parses and validates the xDS bootstrap configuration
// (gRFC A27, with the additions of A47 federation, A65 mTLS channel
// credentials and A71 fallback) into an immutable Config.
//
// Parsing from bytes (Parse) is the core; Load adds the lookup order used by
// servers and by every gRPC implementation: explicit contents, then the file
// named by GRPC_XDS_BOOTSTRAP, then GRPC_XDS_BOOTSTRAP_CONFIG. The environment
// is read on every call to Load, never cached at init. ParseWith and LoadWith
// also accept the credential types a caller can build beyond the built-in
// ones (for the xDS servers of this module: those registered with grpc-go's
// google.golang.org/grpc/xds/bootstrap, see xdsclient.BootstrapOptions);
// the package itself does not depend on gRPC.
package bootstrap

import (
	"bytes"
	"encoding/json"
	"time"

	"google.golang.org/grpc/credentials/tls/certprovider"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Config is a validated bootstrap. It is immutable after Parse returns: callers
// must not modify it or anything it points to (Node included; clone it with
// proto.Clone before changing it).
type Config struct {
	// XDSServers lists the management servers in order of preference (gRFC
	// A71: the first is the primary, later ones are fallbacks). Never empty.
	XDSServers []*ServerConfig

	// Node is the Node to send to the management servers: the bootstrap's
	// "node" with user_agent_name, user_agent_version and client_features set
	// by this library. Never nil.
	Node *corepb.Node

	// Authorities maps an authority name (gRFC A47) to its configuration.
	// Nil when the bootstrap has no "authorities".
	Authorities map[string]*Authority

	// ServerListenerResourceNameTemplate is the template used by xDS servers to
	// name their Listener resource; every "%s" is replaced by the listening
	// address. Empty when absent; servers refuse to start without it.
	ServerListenerResourceNameTemplate string

	// ClientDefaultListenerResourceNameTemplate is the template for client
	// Listener names without an authority. "%s" when absent, null or empty.
	ClientDefaultListenerResourceNameTemplate string

	// CertProviders maps a certificate provider instance name to its
	// configuration. Nil when absent.
	CertProviders map[string]*CertProviderConfig

	// AllowedGRPCServices is "allowed_grpc_services" (gRFC A102): the side
	// channels (an ext_authz server) a management server that is not
	// trusted may name, by target URI, with the credentials to reach each.
	// An entry's ServerURI is its target, and it has ChannelCreds and
	// CallCreds as an xds_servers entry has (no ServerFeatures). Nil when
	// absent.
	AllowedGRPCServices map[string]*ServerConfig

	// key is a canonical encoding of the config, see Key.
	key string
	// source is where Load found the config, see Source. Not part of key.
	source string
}

// Source says where Load found the bootstrap: SourceOption,
// EnvBootstrapConfig, or `file "<path>" (GRPC_XDS_BOOTSTRAP)`, as the Source
// of its errors does. Empty for a Config from Parse or built by hand. Configs
// from different sources with the same Key share an xDS client.
func (c *Config) Source() string { return c.source }

// Key returns a string that is equal for two Configs exactly when they would
// make identical xDS clients (same servers, node, authorities, templates and
// certificate providers), whatever the formatting of their source JSON. It is
// the key of the process-wide xDS client pool.
//
// Configs from Parse carry their key. For a Config built by hand (in tests),
// Key computes it on each call from the exported fields.
func (c *Config) Key() string {
	if c.key != "" {
		return c.key
	}
	return c.canonicalKey()
}

// ServersFor returns the management servers for resources of the named
// authority (gRFC A47): the authority's own XDSServers, or the top-level
// XDSServers when it lists none. ok is false when the bootstrap has no such
// authority, which gRFC A47 makes an error for xdstp:// resource names. Names
// without an authority (not xdstp://) use c.XDSServers directly.
func (c *Config) ServersFor(authority string) (servers []*ServerConfig, ok bool) {
	a, ok := c.Authorities[authority]
	if !ok || a == nil {
		return nil, false
	}
	if len(a.XDSServers) > 0 {
		return a.XDSServers, true
	}
	return c.XDSServers, true
}

// ServerConfig is one management server.
type ServerConfig struct {
	// ServerURI is the target of the gRPC channel to the server. Non-empty.
	ServerURI string

	// ChannelCreds is the first channel credential type of the bootstrap's
	// list that is supported: built in, or by the ParseOptions of ParseWith.
	ChannelCreds ChannelCreds

	// ServerFeatures is the list from the bootstrap, as given.
	ServerFeatures []string

	// IgnoreResourceDeletion is true when ServerFeatures contains
	// "ignore_resource_deletion" (gRFC A53).
	IgnoreResourceDeletion bool

	// Trusted is true when ServerFeatures contains "trusted_xds_server"
	// (gRFC A81, A102): the server may name side channels and their
	// credentials itself.
	Trusted bool

	// CallCreds are the entries of the bootstrap's call_creds list whose
	// type is supported (the built-in CallCredsJWTTokenFile, or by the
	// ParseOptions of ParseWith), in order (gRFC A97: every supported entry
	// applies; others are ignored). Nil when there are none. Never holds
	// CallCredsJWTTokenFile with CredsInsecure channel credentials.
	CallCreds []CallCreds
}

// String returns the server URI, for logs and errors.
func (s *ServerConfig) String() string { return s.ServerURI }

// Equal reports whether s and o describe the same server connection (same
// URI, credentials and features).
func (s *ServerConfig) Equal(o *ServerConfig) bool {
	if s == nil || o == nil {
		return s == o
	}
	if s.ServerURI != o.ServerURI || s.IgnoreResourceDeletion != o.IgnoreResourceDeletion ||
		!s.ChannelCreds.equal(o.ChannelCreds) || len(s.ServerFeatures) != len(o.ServerFeatures) ||
		len(s.CallCreds) != len(o.CallCreds) {
		return false
	}
	for i := range s.CallCreds {
		if !s.CallCreds[i].equal(o.CallCreds[i]) {
			return false
		}
	}
	for i := range s.ServerFeatures {
		if s.ServerFeatures[i] != o.ServerFeatures[i] {
			return false
		}
	}
	return true
}

// Channel credential types built into Parse. They win over a type of the
// same name that ParseOptions.ChannelCreds would support.
const (
	// CredsInsecure is plaintext.
	CredsInsecure = "insecure"
	// CredsTLS is TLS as gRFC A65 describes it, see TLSCreds.
	CredsTLS = "tls"
	// CredsGoogleDefault is Google's default credentials (TLS or ALTS, with
	// the application default credentials as call credentials), as grpc-go
	// builds them; used by Traffic Director. Its config is ignored.
	CredsGoogleDefault = "google_default"
)

// ChannelCreds is the selected channel credential of a server.
type ChannelCreds struct {
	// Type is one of CredsInsecure, CredsTLS and CredsGoogleDefault, or a
	// type supported by the ParseOptions of ParseWith.
	Type string
	// Config is the raw "config" of the entry as written in the bootstrap,
	// or nil when absent or null. For the built-in types it is
	// informational (Type and TLS say everything this library uses); for
	// another type it is what the credentials are built from.
	Config json.RawMessage
	// TLS is set when Type is CredsTLS: the gRFC A65 configuration. Empty
	// file names mean "use the system roots" (CA) or "no client certificate".
	TLS *TLSCreds
}

// equal compares Type and TLS, and for a type that is not built in the
// canonical form of Config. The Config of a built-in type is not compared:
// it holds nothing beyond Type and TLS (only spelling, unknown members), and
// Config.Key ignores it in the same way.
func (c ChannelCreds) equal(o ChannelCreds) bool {
	if c.Type != o.Type {
		return false
	}
	if !isBuiltinCreds(c.Type) {
		return bytes.Equal(canonJSON(c.Config), canonJSON(o.Config))
	}
	if c.TLS == nil || o.TLS == nil {
		return c.TLS == o.TLS
	}
	return *c.TLS == *o.TLS
}

// TLSCreds is the config of "tls" channel credentials (gRFC A65).
type TLSCreds struct {
	// CACertificateFile is the PEM file of roots that verify the server;
	// empty means the system roots.
	CACertificateFile string
	// CertificateFile is the PEM file of the client certificate chain. Set
	// together with PrivateKeyFile (mTLS) or both empty (TLS only).
	CertificateFile string
	// PrivateKeyFile is the PEM file of the client private key.
	PrivateKeyFile string
	// RefreshInterval is how often the files are re-read; 10 minutes when
	// absent from the bootstrap. Always positive.
	RefreshInterval time.Duration
}

// Call credential types supported in the bootstrap's call_creds (gRFC A97).
const (
	// CallCredsJWTTokenFile sends the JWT read from a file as
	// "authorization: Bearer <token>" on every stream to the server.
	CallCredsJWTTokenFile = "jwt_token_file"
)

// CallCreds is one supported entry of a server's call_creds (gRFC A97).
type CallCreds struct {
	// Type is CallCredsJWTTokenFile, or a type supported by the
	// ParseOptions of ParseWith.
	Type string
	// Config is the raw "config" of the entry as written, or nil when absent
	// or null. For CallCredsJWTTokenFile it is informational (the fields
	// below say everything this library uses); for another type it is what
	// the credentials are built from.
	Config json.RawMessage
	// JWTTokenFile is the file holding the JWT, for CallCredsJWTTokenFile.
	// Non-empty.
	JWTTokenFile string
}

// equal compares Type and the parsed fields, and for a type that is not
// built in the canonical form of Config.
func (c CallCreds) equal(o CallCreds) bool {
	if c.Type != o.Type || c.JWTTokenFile != o.JWTTokenFile {
		return false
	}
	return c.Type == CallCredsJWTTokenFile || bytes.Equal(canonJSON(c.Config), canonJSON(o.Config))
}

// Authority is one entry of the bootstrap's "authorities" (gRFC A47).
type Authority struct {
	// ClientListenerResourceNameTemplate is the template for client Listener
	// names of this authority. It starts with "xdstp://<authority>/" (raw or
	// percent-encoded name); when absent, null or empty in the bootstrap it
	// is "xdstp://<percent-encoded authority>/envoy.config.listener.v3.Listener/%s".
	ClientListenerResourceNameTemplate string
	// XDSServers of this authority, in order of preference (gRFC A71); nil
	// (also for an empty list) means "use the top-level XDSServers", see
	// Config.ServersFor.
	XDSServers []*ServerConfig
}

// CertProviderConfig is one entry of "certificate_providers" (gRFC A29).
// Parse validates the config of file_watcher itself (FileWatcher), and the
// config of a plugin registered with grpc-go with that plugin's ParseConfig
// (Buildable); the config of any other plugin is kept as written.
type CertProviderConfig struct {
	// PluginName as given in the bootstrap, e.g. "file_watcher".
	PluginName string
	// Config is the raw "config" object as written, or nil when absent or
	// null.
	Config json.RawMessage
	// FileWatcher is the parsed and validated config when PluginName is
	// "file_watcher"; nil for other plugins.
	FileWatcher *FileWatcherConfig

	// buildable is the config as parsed by the plugin registered with
	// grpc-go under PluginName; nil for file_watcher and for plugins not
	// registered when the bootstrap was parsed.
	buildable *certprovider.BuildableConfig
}

// Buildable returns the config of a plugin registered with grpc-go's
// registry (google.golang.org/grpc/credentials/tls/certprovider.Register), as
// the plugin's ParseConfig returned it when the bootstrap was parsed. It is
// nil for file_watcher, which this library runs itself whether or not
// grpc-go's pemfile package is linked in, for plugins that were not
// registered then (a Listener naming such an instance is NACKed), and for
// a CertProviderConfig not made by Parse.
func (c *CertProviderConfig) Buildable() *certprovider.BuildableConfig { return c.buildable }

// FileWatcherConfig is the config of the "file_watcher" certificate provider.
//
// At least one of CertificateFile (with PrivateKeyFile), CACertificateFile
// and SPIFFETrustBundleMapFile is set.
type FileWatcherConfig struct {
	// CertificateFile is the PEM identity certificate chain; set together
	// with PrivateKeyFile, or both empty.
	CertificateFile string
	// PrivateKeyFile is the PEM private key of CertificateFile.
	PrivateKeyFile string
	// CACertificateFile is the PEM trust bundle; empty when the provider
	// only supplies an identity. Not used when SPIFFETrustBundleMapFile is
	// set (gRFC A87), but kept as written.
	CACertificateFile string
	// SPIFFETrustBundleMapFile is the SPIFFE trust bundle map (gRFC A87):
	// JSON mapping each trust domain to its bundle. When set, peers are
	// verified against the bundle of the trust domain of their SPIFFE ID,
	// never against CACertificateFile.
	SPIFFETrustBundleMapFile string
	// RefreshInterval is how often the files are re-read; 10 minutes when
	// absent. Always positive.
	RefreshInterval time.Duration
}
