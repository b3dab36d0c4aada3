package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// StdoutLoggerName is the name of the built-in logger that writes one JSON
// line per event to standard output (gRFC A59), selected in xDS by a
// typed_config of type
// envoy.extensions.rbac.audit_loggers.stream.v3.StdoutAuditLog.
const StdoutLoggerName = "stdout_logger"

func init() { RegisterLoggerBuilder(stdoutBuilder{}) }

type stdoutBuilder struct{}

type stdoutConfig struct{ LoggerConfig }

func (stdoutBuilder) Name() string { return StdoutLoggerName }

// ParseLoggerConfig accepts any JSON object: the logger has no settings.
func (stdoutBuilder) ParseLoggerConfig(c json.RawMessage) (LoggerConfig, error) {
	if len(c) > 0 {
		var m map[string]any
		if err := json.Unmarshal(c, &m); err != nil {
			return nil, fmt.Errorf("audit: stdout_logger config: %v", err)
		}
	}
	return stdoutConfig{}, nil
}

func (stdoutBuilder) Build(LoggerConfig) Logger { return NewStreamLogger(os.Stdout) }

// NewStreamLogger returns a logger that writes each event to w as one line
// of JSON, the format of gRFC A59's stdout logger:
//
//	{"grpc_audit_log":{"timestamp":"...","rpc_method":"/pkg.S/M","principal":"spiffe://foo/user1","policy_name":"rbac","matched_rule":"admin","authorized":true}}
//
// with "shadow":true added for shadow_rules decisions. Writes are
// serialized; a write error is ignored.
func NewStreamLogger(w io.Writer) Logger { return &streamLogger{w: w} }

type streamLogger struct {
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

func (l *streamLogger) Log(e *Event) {
	b, err := json.Marshal(struct {
		E jsonEvent `json:"grpc_audit_log"`
	}{jsonEvent{
		Timestamp:   time.Now().Format(time.RFC3339Nano),
		RPCMethod:   e.FullMethodName,
		Principal:   e.Principal,
		PolicyName:  e.PolicyName,
		MatchedRule: e.MatchedRule,
		Authorized:  e.Authorized,
		Shadow:      e.Shadow,
	}})
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(b)
}
