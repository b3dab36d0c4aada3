package accesslog

import accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"

// CommandKinds returns every command operator Envoy knows, each with what
// the server does with it: "supported", "absent" (no value here; prints
// what Envoy prints then) or "notrecorded" (prints "-", with a warning).
func CommandKinds() map[string]string {
	absent := absentCommands()
	kinds := make(map[string]string, len(commands))
	for name, cmd := range commands {
		switch _, isAbsent := absent[name]; {
		case cmd.build == nil:
			kinds[name] = "notrecorded"
		case isAbsent:
			kinds[name] = "absent"
		default:
			kinds[name] = "supported"
		}
	}
	return kinds
}

// CompileWithEnv is Compile with the environment and host name given.
var CompileWithEnv = func(env map[string]string, host string) func(logs []*AccessLogPB) (*Config, error) {
	c := &compiler{
		lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		hostname:  func() (string, error) { return host, nil },
	}
	return c.compile
}

// AccessLogPB is the AccessLog message.
type AccessLogPB = accesslogpb.AccessLog
