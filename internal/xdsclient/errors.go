package xdsclient

import (
	"errors"
	"fmt"
	"strings"
)

// ErrResourceDoesNotExist is matched (errors.Is) by the errors given to
// ResourceWatcher.ResourceError when a resource does not exist: its
// does-not-exist timer fired, or a State-of-the-World response no longer
// carries it.
var ErrResourceDoesNotExist = errors.New("xdsclient: resource does not exist")

// errClientClosed ends the stream of a client being closed.
var errClientClosed = errors.New("xdsclient: client is closed")

// ErrorKind classifies an *Error.
type ErrorKind int

const (
	// KindDoesNotExist: the resource does not exist (timer fired, or deleted
	// by absence from a State-of-the-World response). Matches
	// ErrResourceDoesNotExist.
	KindDoesNotExist ErrorKind = iota + 1
	// KindNACK: the resource was received but failed validation and was
	// NACKed (gRFC A46).
	KindNACK
	// KindConnection: the ADS stream to a management server failed before
	// it received a response (gRFC A57).
	KindConnection
	// KindBadName: the resource name cannot be used: an xdstp name that does
	// not parse, or whose type does not match the watched type.
	KindBadName
	// KindUnknownAuthority: an xdstp name names an authority that the
	// bootstrap does not list (gRFC A47).
	KindUnknownAuthority
	// KindTimeout: the resource did not arrive before its timer fired and
	// the server has the gRFC A88 resource_timer_is_transient_error
	// feature: the server is slow rather than the resource missing.
	KindTimeout
	// KindReceivedError: the management server sent an error for the
	// resource instead of the resource (xRFC TP3 resource_errors, gRFC A88).
	// Err is the status it sent (read it with status.FromError).
	KindReceivedError
)

// String returns the kind's name.
func (k ErrorKind) String() string {
	switch k {
	case KindDoesNotExist:
		return "does-not-exist"
	case KindNACK:
		return "nack"
	case KindConnection:
		return "connection"
	case KindBadName:
		return "bad-name"
	case KindUnknownAuthority:
		return "unknown-authority"
	case KindTimeout:
		return "timeout"
	case KindReceivedError:
		return "received-error"
	default:
		return fmt.Sprintf("ErrorKind(%d)", int(k))
	}
}

// Error is the error type given to watchers. Read it with errors.As; its
// Kind says what happened, the other fields say to what. Fields that do not
// apply are empty.
type Error struct {
	Kind ErrorKind
	// TypeName and Name identify the resource.
	TypeName, Name string
	// Server is the URI of the management server involved.
	Server string
	// NodeID is the xDS node ID of the client, for operators.
	NodeID string
	// Err is the cause (the validation error of a NACK, the stream error of
	// a connection failure), or nil.
	Err error
}

// Error formats the error for people: lowercase, package-prefixed, with the
// node ID and the cause last.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("xdsclient: ")
	switch e.Kind {
	case KindDoesNotExist:
		fmt.Fprintf(&b, "%s resource %q does not exist", e.TypeName, e.Name)
	case KindNACK:
		fmt.Fprintf(&b, "%s resource %q was rejected", e.TypeName, e.Name)
	case KindConnection:
		fmt.Fprintf(&b, "connection to management server %q failed", e.Server)
	case KindBadName:
		fmt.Fprintf(&b, "invalid %s resource name %q", e.TypeName, e.Name)
	case KindUnknownAuthority:
		fmt.Fprintf(&b, "%s resource name %q names an authority missing from the bootstrap", e.TypeName, e.Name)
	case KindTimeout:
		fmt.Fprintf(&b, "%s resource %q was not received in time", e.TypeName, e.Name)
	case KindReceivedError:
		fmt.Fprintf(&b, "management server reported an error for %s resource %q", e.TypeName, e.Name)
	default:
		fmt.Fprintf(&b, "%s resource %q: %v", e.TypeName, e.Name, e.Kind)
	}
	if e.Server != "" && e.Kind != KindConnection {
		fmt.Fprintf(&b, " (server %q)", e.Server)
	}
	if e.NodeID != "" {
		fmt.Fprintf(&b, " [xds node id %q]", e.NodeID)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrResourceDoesNotExist) true for KindDoesNotExist.
func (e *Error) Is(target error) bool {
	return target == ErrResourceDoesNotExist && e.Kind == KindDoesNotExist
}

// decodeTypeError is reported by Watch when a decoded value is not of the
// watcher's type: a programming error in a ResourceType.
type decodeTypeError struct {
	typeName string
	got      ResourceData
}

func (e *decodeTypeError) Error() string {
	return fmt.Sprintf("xdsclient: %s resource decoded to unexpected type %T", e.typeName, e.got)
}
