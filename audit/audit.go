// Package audit is the audit logging API of the RBAC HTTP filter (gRFC A59):
// the event an authorization decision produces, the Logger interface, and
// the registry of logger builders that xDS RBAC configs refer to.
//
// An RBAC config (envoy.config.rbac.v3.RBAC) names its loggers in
// audit_logging_options.logger_configs; each audit_logger is a
// TypedExtensionConfig whose typed_config selects a builder by its type:
// envoy.extensions.rbac.audit_loggers.stream.v3.StdoutAuditLog selects the
// built-in "stdout_logger"; a udpa.type.v1.TypedStruct or
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
	"encoding/json"
	"sync"
)

// Event is one audited authorization decision.
type Event struct {
	// FullMethodName is the RPC's method, "/pkg.Service/Method".
	FullMethodName string
	// Principal is the identity of the peer: the first URI SAN of its
	// certificate, else the first DNS SAN, else its subject; "" without a
	// certificate.
	Principal string
	// PolicyName is the name of the RBAC HTTP filter instance.
	PolicyName string
	// MatchedRule is the name of the RBAC policy that matched; "" if none
	// did.
	MatchedRule string
	// Authorized reports whether the decision allows the RPC.
	Authorized bool
	// Shadow reports that the decision is that of the filter's shadow_rules:
	// it was evaluated and not enforced.
	Shadow bool
}

// Logger logs audit events.
type Logger interface {
	// Log logs one event. It is called synchronously on the RPC's path, in
	// gRPC's tap handle, so it must not block: long work must be handed off.
	// The Event is only valid during the call.
	Log(*Event)
}

// LoggerConfig is a parsed logger config. Concrete configs embed this
// interface to implement it.
type LoggerConfig interface {
	loggerConfig()
}

// LoggerBuilder parses logger configs and builds loggers.
type LoggerBuilder interface {
	// ParseLoggerConfig validates a logger config, given as JSON (an empty
	// object when the config has none). An error NACKs the resource.
	ParseLoggerConfig(config json.RawMessage) (LoggerConfig, error)
	// Build builds a logger from a config ParseLoggerConfig returned. It
	// cannot fail: runtime problems are the logger's to handle.
	Build(LoggerConfig) Logger
	// Name is the name the builder is registered and selected by.
	Name() string
}

var (
	mu       sync.RWMutex
	builders = map[string]LoggerBuilder{}
)

// RegisterLoggerBuilder registers b under b.Name(), replacing any builder
// registered under that name. Call it at initialization, before servers
// receive configuration.
func RegisterLoggerBuilder(b LoggerBuilder) {
	mu.Lock()
	defer mu.Unlock()
	builders[b.Name()] = b
}

// GetLoggerBuilder returns the builder registered under name, or nil.
func GetLoggerBuilder(name string) LoggerBuilder {
	mu.RLock()
	defer mu.RUnlock()
	return builders[name]
}
