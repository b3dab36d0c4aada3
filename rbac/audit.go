package rbac

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/authz/audit"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	streampb "github.com/envoyproxy/go-control-plane/envoy/extensions/rbac/audit_loggers/stream/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/auditlog"
	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

// stdoutAuditLogType is the config type of the built-in stdout logger.
var stdoutAuditLogType = string((&streampb.StdoutAuditLog{}).ProtoReflect().Descriptor().FullName())

// auditOptions are compiled audit_logging_options (gRFC A59).
type auditOptions struct {
	onDeny, onAllow bool
	loggers         []audit.Logger
}

func (a *auditOptions) enabled() bool { return len(a.loggers) > 0 && (a.onDeny || a.onAllow) }

// wants reports whether a decision allowing (or not) the RPC is logged.
func (a *auditOptions) wants(allow bool) bool {
	if len(a.loggers) == 0 {
		return false
	}
	if allow {
		return a.onAllow
	}
	return a.onDeny
}

func compileAudit(o *rbacpb.RBAC_AuditLoggingOptions) (auditOptions, error) {
	var a auditOptions
	if o == nil {
		return a, nil
	}
	switch o.GetAuditCondition() {
	case rbacpb.RBAC_AuditLoggingOptions_NONE:
	case rbacpb.RBAC_AuditLoggingOptions_ON_DENY:
		a.onDeny = true
	case rbacpb.RBAC_AuditLoggingOptions_ON_ALLOW:
		a.onAllow = true
	case rbacpb.RBAC_AuditLoggingOptions_ON_DENY_AND_ALLOW:
		a.onDeny, a.onAllow = true, true
	default:
		return a, fieldpath.Errorf("audit_condition", "unknown value %d, want NONE, ON_DENY, ON_ALLOW or ON_DENY_AND_ALLOW", int32(o.GetAuditCondition()))
	}
	for i, lc := range o.GetLoggerConfigs() {
		l, err := buildLogger(lc)
		if err != nil {
			return a, fieldpath.In(fmt.Sprintf("logger_configs[%d]", i), err)
		}
		if l != nil {
			a.loggers = append(a.loggers, l)
		}
	}
	return a, nil
}

// buildLogger builds one logger; nil (and no error) for an unsupported
// optional one. gRFC A59: "The RBAC filter will be NACKed if the configured
// logger types are not supported by gRPC", unless is_optional. Builders are
// looked up in grpc-go's registry (google.golang.org/grpc/authz/audit), so
// a logger registered for grpc-go works here unchanged; Envoy's
// StdoutAuditLog is always this library's stdout logger.
func buildLogger(lc *rbacpb.RBAC_AuditLoggingOptions_AuditLoggerConfig) (audit.Logger, error) {
	tc := lc.GetAuditLogger()
	if tc == nil {
		return nil, fieldpath.Errorf("audit_logger", "unset, want a TypedExtensionConfig")
	}
	name, js, err := loggerConfig(tc.GetTypedConfig())
	if err != nil {
		return nil, fieldpath.Errorf("audit_logger.typed_config", "%w", err)
	}
	if name == stdoutAuditLogType {
		return auditlog.NewStream(os.Stdout), nil
	}
	b := audit.GetLoggerBuilder(name)
	if b == nil {
		if lc.GetIsOptional() {
			return nil, nil
		}
		return nil, fieldpath.Errorf("audit_logger.typed_config", "unsupported audit logger type %q (register it with google.golang.org/grpc/authz/audit.RegisterLoggerBuilder, or mark the logger config is_optional)", name)
	}
	cfg, err := b.ParseLoggerConfig(js)
	if err != nil {
		return nil, fieldpath.Errorf("audit_logger.typed_config", "invalid %q config: %w", name, err)
	}
	return b.Build(cfg), nil
}

// loggerConfig returns the builder name and JSON config of a logger's
// typed_config: a TypedStruct names its builder by its type_url; another
// message by its type, converted to JSON when the type is known.
func loggerConfig(a *anypb.Any) (string, json.RawMessage, error) {
	if a == nil {
		return "", nil, errors.New("unset, want a logger config")
	}
	c, err := typedconfig.Unwrap(a)
	if err != nil {
		return "", nil, err
	}
	name := typedconfig.Name(c.TypeURL)
	if name == stdoutAuditLogType {
		return name, nil, nil
	}
	js, err := c.JSON()
	if err != nil {
		return "", nil, err
	}
	return name, js, nil
}
