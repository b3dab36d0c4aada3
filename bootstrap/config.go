// Package bootstrap parses and validates the xDS bootstrap configuration
// (gRFC A27, with the additions of A47 federation, A65 mTLS channel
// credentials and A71 fallback) into an immutable Config.
//
// Parsing from bytes (Parse) is the core; Load adds the lookup order used by
// servers: explicit contents, then GRPC_XDS_BOOTSTRAP_CONFIG, then the file
// named by GRPC_XDS_BOOTSTRAP. The environment is read on every call to Load,
// never cached at init.
package bootstrap

import (
	"encoding/json"
	"time"

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
	// Listener names without an authority. Defaults to "%s".
	ClientDefaultListenerResourceNameTemplate string

	// CertProviders maps a certificate provider instance name to its
	// configuration. Nil when absent.
	CertProviders map[string]*CertProviderConfig

	// key is a canonical encoding of the config, see Key.
	key string
}

// Key returns a string that is equal for two Configs exactly when they would
// make identical xDS clients (same servers, node, authorities, templates and
// certificate providers), whatever the formatting of their source JSON. It is
// the key of the process-wide xDS client pool.
func (c *Config) Key() string { return c.key }

// ServerConfig is one management server.
type ServerConfig struct {
	// ServerURI is the target of the gRPC channel to the server. Non-empty.
	ServerURI string

	// ChannelCreds is the first channel credential type of the bootstrap's
	// list that this library supports.
	ChannelCreds ChannelCreds

	// ServerFeatures is the list from the bootstrap, as given.
	ServerFeatures []string

	// IgnoreResourceDeletion is true when ServerFeatures contains
	// "ignore_resource_deletion" (gRFC A53).
	IgnoreResourceDeletion bool
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
		!s.ChannelCreds.equal(o.ChannelCreds) || len(s.ServerFeatures) != len(o.ServerFeatures) {
		return false
	}
	for i := range s.ServerFeatures {
		if s.ServerFeatures[i] != o.ServerFeatures[i] {
			return false
		}
	}
	return true
}

// Channel credential types supported in the bootstrap.
const (
	CredsInsecure = "insecure"
	CredsTLS      = "tls"
)

// ChannelCreds is the selected channel credential of a server.
type ChannelCreds struct {
	// Type is CredsInsecure or CredsTLS.
	Type string
	// Config is the raw "config" object of the entry, or nil.
	Config json.RawMessage
	// TLS is set when Type is CredsTLS: the gRFC A65 configuration. Empty
	// file names mean "use the system roots" (CA) or "no client certificate".
	TLS *TLSCreds
}

func (c ChannelCreds) equal(o ChannelCreds) bool {
	if c.Type != o.Type || string(c.Config) != string(o.Config) {
		return false
	}
	if c.TLS == nil || o.TLS == nil {
		return c.TLS == o.TLS
	}
	return *c.TLS == *o.TLS
}

// TLSCreds is the config of "tls" channel credentials (gRFC A65).
type TLSCreds struct {
	CACertificateFile string
	CertificateFile   string
	PrivateKeyFile    string
	// RefreshInterval is how often the files are re-read; 10 minutes when
	// absent from the bootstrap.
	RefreshInterval time.Duration
}

// Authority is one entry of the bootstrap's "authorities" (gRFC A47).
type Authority struct {
	// ClientListenerResourceNameTemplate; defaults to
	// "xdstp://<authority>/envoy.config.listener.v3.Listener/%s".
	ClientListenerResourceNameTemplate string
	// XDSServers of this authority; empty means "use the top-level
	// XDSServers".
	XDSServers []*ServerConfig
}

// CertProviderConfig is one entry of "certificate_providers".
type CertProviderConfig struct {
	// PluginName as given in the bootstrap, e.g. "file_watcher".
	PluginName string
	// Config is the raw "config" object.
	Config json.RawMessage
	// FileWatcher is the parsed and validated config when PluginName is
	// "file_watcher"; nil for other plugins.
	FileWatcher *FileWatcherConfig
}

// FileWatcherConfig is the config of the "file_watcher" certificate provider.
type FileWatcherConfig struct {
	CertificateFile   string
	PrivateKeyFile    string
	CACertificateFile string
	// RefreshInterval; 10 minutes when absent.
	RefreshInterval time.Duration
}
