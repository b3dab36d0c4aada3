// Package auditlog is the stdout audit logger of gRFC A59, with the one
// thing grpc-go's audit.Event cannot say: that a decision is a shadow_rules
// decision, evaluated and not enforced. Audit loggers are registered in
// grpc-go's registry (google.golang.org/grpc/authz/audit); this package
// registers the stdout logger there as "stdout_logger" unless grpc-go's own
// (authz/audit/stdout) already is.
package auditlog

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/authz/audit"
)

// StdoutLoggerName is the registry name of the stdout logger (gRFC A59).
const StdoutLoggerName = "stdout_logger"

func init() {
	if audit.GetLoggerBuilder(StdoutLoggerName) == nil {
		audit.RegisterLoggerBuilder(stdoutBuilder{})
	}
}

type stdoutBuilder struct{}

type stdoutConfig struct{ audit.LoggerConfig }

func (stdoutBuilder) Name() string { return StdoutLoggerName }

// ParseLoggerConfig accepts any JSON object: the logger has no settings.
func (stdoutBuilder) ParseLoggerConfig(c json.RawMessage) (audit.LoggerConfig, error) {
	if len(c) > 0 {
		var m map[string]any
		if err := json.Unmarshal(c, &m); err != nil {
			return nil, fmt.Errorf("audit: stdout_logger config: %v", err)
		}
	}
	return stdoutConfig{}, nil
}

func (stdoutBuilder) Build(audit.LoggerConfig) audit.Logger { return NewStream(os.Stdout) }

// ShadowLogger is a logger that can mark shadow_rules decisions. The RBAC
// engine calls LogShadow instead of Log for them on loggers that have it.
type ShadowLogger interface {
	audit.Logger
	LogShadow(*audit.Event)
}

// NewStream returns a logger that writes each event to w as one line of
// JSON, the format of gRFC A59's stdout logger, with "shadow":true added
// for shadow_rules decisions. Writes are serialized; a write error is
// ignored.
func NewStream(w io.Writer) ShadowLogger { return &stream{w: w} }

type stream struct {
	mu sync.Mutex
	w  io.Writer // guarded by mu
}

type jsonEvent struct {
	Timestamp   string `json:"timestamp"`
	RPCMethod   string `json:"rpc_method"`
	Principal   string `json:"principal"`
	PolicyName  string `json:"policy_name"`
	MatchedRule string `json:"matched_rule"`
	Authorized  bool   `json:"authorized"`
	Shadow      bool   `json:"shadow,omitempty"`
}

func (l *stream) Log(e *audit.Event)       { l.log(e, false) }
func (l *stream) LogShadow(e *audit.Event) { l.log(e, true) }

func (l *stream) log(e *audit.Event, shadow bool) {
	b, err := json.Marshal(struct {
		E jsonEvent `json:"grpc_audit_log"`
	}{jsonEvent{
		Timestamp:   time.Now().Format(time.RFC3339Nano),
		RPCMethod:   e.FullMethodName,
		Principal:   e.Principal,
		PolicyName:  e.PolicyName,
		MatchedRule: e.MatchedRule,
		Authorized:  e.Authorized,
		Shadow:      shadow,
	}})
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(b)
}
