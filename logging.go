package xds

import (
	"fmt"

	"google.golang.org/grpc/grpclog"
)

// logger is the package's gRPC logger (component "xds-server").
var logger = grpclog.Component("xds-server")

// prefixLogger prefixes every message with the listener it is about, so that
// an operator can tell the listeners of one process apart.
type prefixLogger struct {
	prefix string // immutable
}

func newPrefixLogger(format string, args ...any) *prefixLogger {
	return &prefixLogger{prefix: fmt.Sprintf(format, args...) + " "}
}

func (l *prefixLogger) Infof(format string, args ...any) {
	logger.InfoDepth(1, l.prefix+fmt.Sprintf(format, args...))
}

func (l *prefixLogger) Warningf(format string, args ...any) {
	logger.WarningDepth(1, l.prefix+fmt.Sprintf(format, args...))
}

func (l *prefixLogger) Errorf(format string, args ...any) {
	logger.ErrorDepth(1, l.prefix+fmt.Sprintf(format, args...))
}
