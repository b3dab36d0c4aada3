package accesslog_test

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
)

// FuzzFormat: any text format either compiles or is refused with an
// error; a compiled one formats a full and an empty record without
// panicking, and as a JSON value makes a valid JSON line.
func FuzzFormat(f *testing.F) {
	for _, s := range []string{
		accesslog.DefaultFormat, accesslog.IstioFormat, "%%", "%", "%REQ(a)b)%", "%REQ(x):12%", "%START_TIME(%E*S%3f%s)%",
		"%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT(7)%", "%GRPC_STATUS(SNAKE_STRING)%", "%REQ(", "%A(%B)%:%", "\xff%PROTOCOL%\n",
	} {
		f.Add(s)
	}
	full := fullRecord(f)
	f.Fuzz(func(t *testing.T, format string) {
		if !utf8.ValidString(format) {
			// Protobuf strings are UTF-8; inline_bytes carries the rest.
			text := &corepb.SubstitutionFormatString{Format: &corepb.SubstitutionFormatString_TextFormatSource{
				TextFormatSource: &corepb.DataSource{Specifier: &corepb.DataSource_InlineBytes{InlineBytes: []byte(format)}}}}
			if cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{logOf(t, stdout(text), nil)}); err == nil {
				cfg.Loggers()[0].AppendLine(nil, full)
			}
			return
		}
		cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{
			logOf(t, stdout(accesslogcfg.TextFormat(format)), nil),
			logOf(t, stdout(accesslogcfg.JSONFormat(t, map[string]any{"v": format, "w": []any{format}})), nil),
		})
		if err != nil {
			return
		}
		for _, r := range []*accesslog.Record{full, {}} {
			cfg.Loggers()[0].AppendLine(nil, r)
			line := cfg.Loggers()[1].AppendLine(nil, r)
			if !json.Valid(line) {
				t.Fatalf("format %q: invalid JSON line %q", format, line)
			}
		}
	})
}
