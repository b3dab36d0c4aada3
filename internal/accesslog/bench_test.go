package accesslog_test

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
)

// The cost of formatting one line, which the log's writer goroutine pays
// (never the RPC).
func BenchmarkAppendLine(b *testing.B) {
	r := fullRecord(b)
	for _, bc := range []struct {
		name string
		l    *accesslog.Logger
	}{
		{"EnvoyDefault", compileOne(b, accesslogcfg.TextFormat(accesslog.DefaultFormat), nil)},
		{"IstioDefault", accesslog.IstioDefault().Loggers()[0]},
		{"JSON", compileOne(b, accesslogcfg.JSONFormat(b, map[string]any{
			"start_time": "%START_TIME%", "method": "%REQ(:METHOD)%", "path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
			"protocol": "%PROTOCOL%", "response_code": "%RESPONSE_CODE%", "grpc_status": "%GRPC_STATUS%",
			"response_flags": "%RESPONSE_FLAGS%", "bytes_received": "%BYTES_RECEIVED%", "bytes_sent": "%BYTES_SENT%",
			"duration": "%DURATION%", "user_agent": "%REQ(USER-AGENT)%", "authority": "%REQ(:AUTHORITY)%",
			"downstream_remote_address": "%DOWNSTREAM_REMOTE_ADDRESS%", "peer": "%DOWNSTREAM_PEER_URI_SAN%",
		}), nil)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				buf = bc.l.AppendLine(buf[:0], r)
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}
