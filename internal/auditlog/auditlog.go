// Package auditlog is the stdout audit logger of gRFC A59, with the one
// thing grpc-go's audit.Event cannot say: that a decision is a shadow_rules
// decision, evaluated and not enforced.
package auditlog

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/authz/audit"
)

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
