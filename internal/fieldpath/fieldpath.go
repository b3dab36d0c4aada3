// Package fieldpath is the one way this module's validators report an
// error in a field of a resource: an Error names the field by its path
// relative to the message being validated ("policies[\"p\"].permissions[0].any"),
// and each level the error travels up puts its own field in front (In), so
// that the NACK names the field from the resource down. filterchain, rbac
// (and the RBAC filter), the matchers and the route compiler report with
// it. It is pure: the standard library only.
package fieldpath

import (
	"fmt"
	"strings"
)

// Error is an error in one field, named by its path.
type Error struct {
	// Path is the field's path, "" for the message itself.
	Path string
	// Err is what is wrong with it.
	Err error
}

// Error returns "<path>: <cause>", or the cause alone for an empty path.
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error for the field at path, its cause formatted as
// fmt.Errorf does (%w wraps).
func Errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Err: fmt.Errorf(format, args...)}
}

// In puts err, found in the message at path prefix, into an *Error whose
// path starts with prefix: an *Error's path is appended to prefix (with a
// "." unless it starts with "["), any other error becomes the cause at
// prefix.
func In(prefix string, err error) *Error {
	fe, ok := err.(*Error)
	if !ok {
		return &Error{Path: prefix, Err: err}
	}
	switch {
	case fe.Path == "":
		return &Error{Path: prefix, Err: fe.Err}
	case prefix == "" || strings.HasPrefix(fe.Path, "["):
		return &Error{Path: prefix + fe.Path, Err: fe.Err}
	}
	return &Error{Path: prefix + "." + fe.Path, Err: fe.Err}
}
