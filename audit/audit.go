// Package audit is the audit logging of the RBAC HTTP filter (gRFC A59).
//
// Its types and its registry are grpc-go's, google.golang.org/grpc/authz/audit:
// a logger builder registered there (grpc-go's audit.RegisterLoggerBuilder)
// is found by the RBAC configs of this library's servers, and a logger
// written for grpc-go runs here unchanged. New code should use grpc-go's
// package; this one keeps the names of earlier releases as aliases, and the
// built-in stdout logger.
//
// An RBAC config (envoy.config.rbac.v3.RBAC) names its loggers in
// audit_logging_options.logger_configs; each audit_logger is a
// TypedExtensionConfig whose typed_config selects a builder by its type:
// envoy.extensions.rbac.audit_loggers.stream.v3.StdoutAuditLog selects the
// built-in stdout logger; a udpa.type.v1.TypedStruct or
// xds.type.v3.TypedStruct selects the builder registered under the name of
// its type_url (the part after the last '/'), and its value, as JSON, is the
// logger's config. An unknown logger type NACKs the resource unless the
// logger config is marked is_optional.
//
// # Experimental
//
// This package is experimental and may change or be removed in a later
// release.
package audit

import (
	"io"

	grpcaudit "google.golang.org/grpc/authz/audit"

	"github.com/proxyless-grpc/xds/internal/auditlog"
)

// Event is one audited authorization decision: grpc-go's audit.Event.
type Event = grpcaudit.Event

// Logger logs audit events: grpc-go's audit.Logger. Log is called
// synchronously on the RPC's path, so it must not block.
type Logger = grpcaudit.Logger

// LoggerConfig is a parsed logger config: grpc-go's audit.LoggerConfig.
type LoggerConfig = grpcaudit.LoggerConfig

// LoggerBuilder parses logger configs and builds loggers: grpc-go's
// audit.LoggerBuilder.
type LoggerBuilder = grpcaudit.LoggerBuilder

// RegisterLoggerBuilder registers b in grpc-go's registry, as grpc-go's
// audit.RegisterLoggerBuilder does.
//
// Deprecated: call google.golang.org/grpc/authz/audit.RegisterLoggerBuilder.
func RegisterLoggerBuilder(b LoggerBuilder) { grpcaudit.RegisterLoggerBuilder(b) }

// GetLoggerBuilder returns the builder registered in grpc-go's registry
// under name, or nil.
//
// Deprecated: call google.golang.org/grpc/authz/audit.GetLoggerBuilder.
func GetLoggerBuilder(name string) LoggerBuilder { return grpcaudit.GetLoggerBuilder(name) }

// StdoutLoggerName is the registry name of the stdout logger (gRFC A59),
// which writes one JSON line per event to standard output. The typed_config
// envoy.extensions.rbac.audit_loggers.stream.v3.StdoutAuditLog always
// selects this library's; the name is registered in grpc-go's registry
// unless another stdout logger (grpc-go's authz/audit/stdout) already is.
const StdoutLoggerName = "stdout_logger"

// NewStreamLogger returns a logger that writes each event to w as one line
// of JSON, the format of gRFC A59's stdout logger:
//
//	{"grpc_audit_log":{"timestamp":"...","rpc_method":"/pkg.S/M","principal":"spiffe://foo/user1","policy_name":"rbac","matched_rule":"admin","authorized":true}}
//
// with "shadow":true added for the decisions of shadow_rules. Writes are
// serialized; a write error is ignored.
func NewStreamLogger(w io.Writer) Logger { return auditlog.NewStream(w) }
