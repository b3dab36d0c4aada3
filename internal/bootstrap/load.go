package bootstrap

import (
	"errors"
	"fmt"
	"os"
)

// Environment variables read by Load.
const (
	// EnvBootstrapConfig holds the bootstrap JSON itself.
	EnvBootstrapConfig = "GRPC_XDS_BOOTSTRAP_CONFIG"
	// EnvBootstrapFile holds the path of a file with the bootstrap JSON.
	EnvBootstrapFile = "GRPC_XDS_BOOTSTRAP"
)

// ConfigOf returns the Config behind a public *bootstrap.Config; the public
// package sets it in its init, so that the server can load the bootstrap
// through it (and return its error type) without it exporting this one.
var ConfigOf func(public any) *Config

// SourceOption is the Error.Source of a bootstrap passed to Load as contents.
const SourceOption = "bootstrap option"

// Load finds the bootstrap and parses it with Parse. It looks, in order, at:
//
//  1. contents, when non-nil (an empty non-nil slice is parsed, and fails);
//  2. the file named by GRPC_XDS_BOOTSTRAP, when non-empty;
//  3. the environment variable GRPC_XDS_BOOTSTRAP_CONFIG, when non-empty.
//
// This is the order of every gRPC implementation (grpc-go, grpc-java,
// C-core). The first that is set is used and the others are not examined:
// a file that cannot be read is an error, not a reason to try
// GRPC_XDS_BOOTSTRAP_CONFIG. The environment is read on every call, so a
// program or test may set it at any time before calling Load. The returned
// Config's Source says which of the three was used.
//
// Errors are *Error values whose Source says which of the three was used. When
// none is set, the error wraps ErrNoBootstrap. A file that cannot be read
// gives an error wrapping the os error (e.g. fs.ErrNotExist).
func Load(contents []byte) (*Config, error) {
	return LoadWith(contents, ParseOptions{})
}

// LoadWith is Load with the credential types of opts supported too, as
// ParseWith does. NewGRPCServer uses it with xdsclient.BootstrapOptions.
func LoadWith(contents []byte, opts ParseOptions) (*Config, error) {
	if contents != nil {
		return parseFrom(SourceOption, contents, opts)
	}
	if path := os.Getenv(EnvBootstrapFile); path != "" {
		source := fmt.Sprintf("file %q (%s)", path, EnvBootstrapFile)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, &Error{Source: source, Err: err}
		}
		return parseFrom(source, data, opts)
	}
	if s := os.Getenv(EnvBootstrapConfig); s != "" {
		return parseFrom(EnvBootstrapConfig, []byte(s), opts)
	}
	return nil, &Error{Err: ErrNoBootstrap}
}

// parseFrom parses data and records source in the returned Config or
// *Error.
func parseFrom(source string, data []byte, opts ParseOptions) (*Config, error) {
	c, err := ParseWith(data, opts)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			withSource := *e
			withSource.Source = source
			return nil, &withSource
		}
		return nil, &Error{Source: source, Err: err}
	}
	c.source = source
	return c, nil
}
