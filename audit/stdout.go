package audit

import (
	"encoding/json"
	"fmt"
	"os"

	grpcaudit "google.golang.org/grpc/authz/audit"
)

func init() {
	if grpcaudit.GetLoggerBuilder(StdoutLoggerName) == nil {
		grpcaudit.RegisterLoggerBuilder(stdoutBuilder{})
	}
}

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
