package bootstrap

import (
	"errors"
	"strings"
)

// Sentinel errors, for errors.Is. Parse and Load never return them bare: they
// are always the cause of an *Error, whose message adds the "bootstrap: "
// prefix, the source and the field path.
var (
	// ErrNoBootstrap means Load found no bootstrap: no contents were passed
	// and neither environment variable is set.
	ErrNoBootstrap = errors.New("no xDS bootstrap: set " + EnvBootstrapFile + " or " +
		EnvBootstrapConfig + ", or pass bootstrap contents")

	// ErrMissingField means a required field is absent, null or empty.
	ErrMissingField = errors.New("missing required field")

	// ErrWrongType means a field has the wrong JSON type, e.g. a number where
	// a string is expected.
	ErrWrongType = errors.New("wrong JSON type")

	// ErrNoSupportedCreds means a server's channel_creds list has no type
	// that this library supports.
	ErrNoSupportedCreds = errors.New("no supported type")

	// ErrInvalidValue means a field has the right JSON type but a value that
	// is not allowed, e.g. a malformed duration or a template that does not
	// match its authority.
	ErrInvalidValue = errors.New("invalid value")
)

// Error is the error returned by Parse and Load for a bootstrap that cannot
// be used. Use errors.As to read its fields (or to find a wrapped
// *json.SyntaxError), and errors.Is to test for the sentinels above or for
// fs.ErrNotExist from Load.
type Error struct {
	// Source says where the bootstrap came from: "bootstrap option",
	// "GRPC_XDS_BOOTSTRAP_CONFIG", or `file "<path>" (GRPC_XDS_BOOTSTRAP)`.
	// Empty for errors from Parse, which does not know the source.
	Source string

	// Field is the JSON path of the offending field, e.g.
	// `xds_servers[1].channel_creds` or
	// `authorities["a.example.com"].xds_servers[0].server_uri`. Empty when the
	// problem is the document as a whole (invalid JSON, not an object) or
	// finding it (ErrNoBootstrap, a file that cannot be read).
	Field string

	// Err is the cause. Never nil.
	Err error
}

// Error returns "bootstrap: [<source>: ][<field>: ]<cause>".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("bootstrap: ")
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// fieldError returns an *Error for the field at path.
func fieldError(path string, err error) error {
	return &Error{Field: path, Err: err}
}
