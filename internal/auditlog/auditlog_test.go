package auditlog_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/authz/audit"

	"github.com/proxyless-grpc/xds/internal/auditlog"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestStreamLogger: one line of gRFC A59's JSON per event.
func TestStreamLogger(t *testing.T) {
	var buf bytes.Buffer
	l := auditlog.NewStream(&buf)
	l.Log(&audit.Event{FullMethodName: "/pkg.S/M", Principal: "spiffe://foo/user1", PolicyName: "rbac", MatchedRule: "admin", Authorized: true})
	l.LogShadow(&audit.Event{FullMethodName: "/pkg.S/N", PolicyName: "rbac"})
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var got struct {
		E map[string]any `json:"grpc_audit_log"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("line %q: %v", lines[0], err)
	}
	want := map[string]any{"rpc_method": "/pkg.S/M", "principal": "spiffe://foo/user1", "policy_name": "rbac", "matched_rule": "admin", "authorized": true}
	for k, v := range want {
		if got.E[k] != v {
			t.Errorf("%s = %v, want %v", k, got.E[k], v)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, got.E["timestamp"].(string)); err != nil {
		t.Errorf("timestamp %v is not RFC 3339: %v", got.E["timestamp"], err)
	}
	if _, ok := got.E["shadow"]; ok {
		t.Errorf("enforced decision has a shadow field: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"shadow":true`) {
		t.Errorf("shadow decision %s lacks \"shadow\":true", lines[1])
	}
}

// TestRegistry: the stdout logger is built in; registering replaces by
// name.
func TestRegistry(t *testing.T) {
	b := audit.GetLoggerBuilder(auditlog.StdoutLoggerName)
	if b == nil {
		t.Fatal("no stdout_logger builder")
	}
	if _, err := b.ParseLoggerConfig(json.RawMessage(`{}`)); err != nil {
		t.Errorf("stdout_logger config {}: %v", err)
	}
	if _, err := b.ParseLoggerConfig(json.RawMessage(`[`)); err == nil {
		t.Error("stdout_logger accepted invalid JSON")
	}
	if audit.GetLoggerBuilder("nope") != nil {
		t.Error("GetLoggerBuilder(nope) != nil")
	}
}
