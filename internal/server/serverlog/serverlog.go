// Package serverlog is the logger of the xDS server's machinery: gRPC's
// component logger "xds-server", with every message of a listener prefixed
// by it, so that an operator can tell the listeners of one process apart.
// Its output follows gRPC's log settings (GRPC_GO_LOG_SEVERITY_LEVEL,
// GRPC_GO_LOG_VERBOSITY_LEVEL).
package serverlog

import (
	"fmt"

	"google.golang.org/grpc/grpclog"
)

// Component is the server's gRPC logger (component "xds-server").
var Component = grpclog.Component("xds-server")

// Logger prefixes every message with what it is about, e.g. "[listener
// 127.0.0.1:50051]". Immutable; safe for concurrent use.
type Logger struct {
	prefix string
}

// New returns a Logger whose prefix is fmt.Sprintf(format, args...).
func New(format string, args ...any) *Logger {
	return &Logger{prefix: fmt.Sprintf(format, args...) + " "}
}

// V reports whether verbosity level l is logged.
func (l *Logger) V(level int) bool { return Component.V(level) }

// Infof logs at info level.
func (l *Logger) Infof(format string, args ...any) {
	Component.InfoDepth(1, l.prefix+fmt.Sprintf(format, args...))
}

// Warningf logs at warning level.
func (l *Logger) Warningf(format string, args ...any) {
	Component.WarningDepth(1, l.prefix+fmt.Sprintf(format, args...))
}

// Errorf logs at error level.
func (l *Logger) Errorf(format string, args ...any) {
	Component.ErrorDepth(1, l.prefix+fmt.Sprintf(format, args...))
}
