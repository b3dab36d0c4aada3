// Package bootstrap validates an xDS bootstrap (gRFC A27, with A47
// federation, A65 and A97 credentials, A71 fallback, A87 SPIFFE) as this
// library's server does, and says what is wrong with it.
//
// Parse and Load apply every rule by which NewGRPCServer accepts or refuses
// a bootstrap, with the extensions registered in this process: channel and
// call credentials registered with grpc-go's xds/bootstrap package and
// certificate provider plugins registered with grpc-go's certprovider
// package. A deployment tool or a CI check can so test a bootstrap before a
// server starts with it, and learn the Listener name a server will ask for.
//
// # Stability
//
// Stable: Parse, Load, Config's methods, Error and the sentinel errors keep
// their meaning; Config may gain methods.
package bootstrap

import (
	"errors"
	"net/netip"

	internal "github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// The environment variables Load reads, in the order every gRPC reads
// them after the contents given to it: the file first.
const (
	// EnvBootstrapFile names a file holding the bootstrap JSON.
	EnvBootstrapFile = internal.EnvBootstrapFile
	// EnvBootstrapConfig holds the bootstrap JSON itself.
	EnvBootstrapConfig = internal.EnvBootstrapConfig
)

// Errors that Parse and Load wrap, for errors.Is; an *Error says where.
var (
	// ErrNoBootstrap: no contents were given and neither environment
	// variable is set.
	ErrNoBootstrap = internal.ErrNoBootstrap
	// ErrMissingField: a required field is absent or empty.
	ErrMissingField = internal.ErrMissingField
	// ErrWrongType: a field has the wrong JSON type.
	ErrWrongType = internal.ErrWrongType
	// ErrInvalidValue: a field's value is not allowed.
	ErrInvalidValue = internal.ErrInvalidValue
	// ErrNoSupportedCreds: no channel_creds entry has a type this process
	// supports.
	ErrNoSupportedCreds = internal.ErrNoSupportedCreds
	// ErrNoServerListenerTemplate: the bootstrap has no
	// server_listener_resource_name_template, which a server needs.
	ErrNoServerListenerTemplate = internal.ErrNoServerListenerTemplate
	// ErrUnknownAuthority: an xdstp:// template names an authority the
	// bootstrap does not list (gRFC A47).
	ErrUnknownAuthority = internal.ErrUnknownAuthority
)

// Error says why a bootstrap is refused. It wraps one of the sentinel
// errors above, or an I/O error when a file cannot be read.
type Error struct {
	// Source is where the bootstrap came from: "bootstrap option", the
	// file named by GRPC_XDS_BOOTSTRAP, or GRPC_XDS_BOOTSTRAP_CONFIG;
	// empty for Parse.
	Source string
	// Field is the JSON path of the offending field, such as
	// `xds_servers[0].channel_creds`; empty when the problem is the whole
	// document.
	Field string
	// Err says what is wrong.
	Err error
}

func (e *Error) Error() string {
	return (&internal.Error{Source: e.Source, Field: e.Field, Err: e.Err}).Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Config is a valid bootstrap. Immutable.
type Config struct {
	c *internal.Config
}

// Parse validates the bootstrap JSON data.
func Parse(data []byte) (*Config, error) {
	c, err := internal.ParseWith(data, xdsclient.BootstrapOptions())
	return wrap(c, err)
}

// Load finds the bootstrap as NewGRPCServer does and validates it: contents
// when not nil, else the file named by GRPC_XDS_BOOTSTRAP, else
// GRPC_XDS_BOOTSTRAP_CONFIG. The environment is read on every call.
func Load(contents []byte) (*Config, error) {
	c, err := internal.LoadWith(contents, xdsclient.BootstrapOptions())
	return wrap(c, err)
}

func wrap(c *internal.Config, err error) (*Config, error) {
	if err != nil {
		var e *internal.Error
		if errors.As(err, &e) {
			return nil, &Error{Source: e.Source, Field: e.Field, Err: e.Err}
		}
		return nil, err
	}
	return &Config{c: c}, nil
}

// Source says where Load found the bootstrap ("bootstrap option", the file
// named by GRPC_XDS_BOOTSTRAP, or GRPC_XDS_BOOTSTRAP_CONFIG); empty after
// Parse.
func (c *Config) Source() string { return c.c.Source() }

// NodeID is the node.id the server identifies itself with to the control
// plane.
func (c *Config) NodeID() string { return c.c.Node.GetId() }

// ServerListenerName returns the name of the Listener resource a server
// listening on addr asks the control plane for: the bootstrap's
// server_listener_resource_name_template with every "%s" replaced by addr
// ("ip:port"; an xdstp:// name has the address percent-encoded). It fails
// when the bootstrap has no template, or names an authority it does not
// list.
func (c *Config) ServerListenerName(addr netip.AddrPort) (string, error) {
	return c.c.ServerListenerName(addr)
}

func init() {
	internal.ConfigOf = func(public any) *internal.Config { return public.(*Config).c }
}
