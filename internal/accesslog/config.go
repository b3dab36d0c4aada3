package accesslog

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	streampb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/matcher"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

var (
	fieldErrorf = fieldpath.Errorf
	inField     = fieldpath.In
	wireBinary  = matcher.WireBinary
)

// grpcCodeOfHTTP is the gRPC code a client infers from an HTTP status,
// which is also Envoy's (Grpc::Utility::httpToGrpcStatus).
func grpcCodeOfHTTP(status uint32) uint32 { return httpfilter.GRPCCodeOfHTTP(int(status)) }

// The logger types supported (AccessLog.typed_config), by type name.
const (
	stdoutType = "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"
	stderrType = "envoy.extensions.access_loggers.stream.v3.StderrAccessLog"
	fileType   = "envoy.extensions.access_loggers.file.v3.FileAccessLog"
)

// The paths of the process's standard output and error: the stream
// loggers write there, and so does a FileAccessLog naming them; neither is
// opened, closed or reopened.
const (
	Stdout = "/dev/stdout"
	Stderr = "/dev/stderr"
)

// DefaultFormat is Envoy's default access log format, used when a logger
// has none (source/common/formatter/http_formatter_context.cc; Envoy 1.37
// spells %REQ% and %RESP% as %REQUEST_HEADER% and %RESPONSE_HEADER%, which
// print the same).
const DefaultFormat = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" ` +
	`%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% ` +
	`%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" ` +
	`"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"` + "\n"

// IstioFormat is Istio's default access log format: what istiod configures
// when meshConfig has accessLogFile and no accessLogFormat (istio/istio
// pilot/pkg/model/telemetry_logging.go, EnvoyTextLogFormat).
const IstioFormat = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% ` +
	`%PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% ` +
	`%RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% ` +
	`"%UPSTREAM_TRANSPORT_FAILURE_REASON%" %BYTES_RECEIVED% %BYTES_SENT% ` +
	`%DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" ` +
	`"%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" ` +
	`%UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% ` +
	`%DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%` + "\n"

// Config is the compiled access_log of an HttpConnectionManager: its
// loggers, in order. A nil *Config logs nothing. Immutable and safe for
// concurrent use.
type Config struct {
	loggers     []*Logger
	key         string
	reads       []string // the request headers the loggers read, sorted
	notRecorded []string // see NotRecorded
}

// NotRecorded returns the operators the config's formats use that Envoy
// knows and would give a value, but that this server does not record, each
// with the reason, sorted: they print "-" (null in a typed JSON format),
// and the server warns of them when it applies the Listener. Shared: do
// not modify.
func (c *Config) NotRecorded() []string {
	if c == nil {
		return nil
	}
	return c.notRecorded
}

// RequestHeaders returns the names of the request headers the config's
// formats and filters read (the pseudo-headers excepted: a Record has them
// in fields), sorted: a server copies only those into a Record's
// RequestHeaders. Shared: do not modify.
func (c *Config) RequestHeaders() []string {
	if c == nil {
		return nil
	}
	return c.reads
}

// setReads computes reads from the loggers.
func (c *Config) setReads() {
	seen := map[string]bool{}
	add := func(name string) {
		name = strings.ToLower(name)
		if strings.HasPrefix(name, ":") || seen[name] {
			return
		}
		seen[name] = true
		c.reads = append(c.reads, name)
	}
	for _, l := range c.loggers {
		l.format.requestHeaders(add)
		if r, ok := l.filter.(headerReader); ok {
			r.requestHeaders(add)
		}
	}
	slices.Sort(c.reads)
}

// Loggers returns the loggers; the slice must not be modified.
func (c *Config) Loggers() []*Logger {
	if c == nil {
		return nil
	}
	return c.loggers
}

// Key identifies the config's content: configs with the same key log
// alike (see Key).
func (c *Config) Key() string {
	if c == nil {
		return ""
	}
	return c.key
}

// Equal reports whether c and o log alike: the same serialized config.
func (c *Config) Equal(o *Config) bool { return c.Key() == o.Key() }

// Join returns a Config with the loggers of cs, in order; nil when none has
// a logger.
func Join(cs ...*Config) *Config {
	var out *Config
	for _, c := range cs {
		if len(c.Loggers()) == 0 {
			continue
		}
		if out == nil {
			out = &Config{}
		}
		out.loggers = append(out.loggers, c.loggers...)
		out.key += "\x00" + c.key
	}
	if out != nil {
		out.setReads()
	}
	return out
}

// Logger is one compiled AccessLog entry: where its lines go, which
// records it logs and how it formats them. Immutable and safe for
// concurrent use.
type Logger struct {
	// Name is the AccessLog's name (for messages only).
	Name string
	// Path is where the lines go: a file, or Stdout or Stderr.
	Path   string
	filter filter // nil: every record
	format format
}

// Match reports whether the logger logs r: its filter lets r through (no
// filter: always). A runtime_filter draws a random number. Match allocates
// nothing, except to match a binary header.
func (l *Logger) Match(r *Record) bool { return l.filter == nil || l.filter.match(r) }

// AppendLine appends r's line to b: exactly what the format makes (JSON
// formats and the default format end with a newline; a text format ends
// with one only if it has one, as in Envoy).
func (l *Logger) AppendLine(b []byte, r *Record) []byte { return l.format.appendLine(b, r) }

// compiler compiles access logs; it reads the process's environment and
// host name for the operators that print them.
type compiler struct {
	lookupEnv func(string) (string, bool)
	hostname  func() (string, error)
	// notRecorded collects, during one compile, the operators this
	// server does not record (Config.NotRecorded); nil in processCompiler.
	notRecorded map[string]string
}

var processCompiler = &compiler{lookupEnv: os.LookupEnv, hostname: os.Hostname}

// Key returns the key of the config logs compile to (Config.Key), so that
// a caller can look up configs compiled before without compiling again.
func Key(logs []*accesslogpb.AccessLog) string {
	var b []byte
	opts := proto.MarshalOptions{Deterministic: true}
	for _, l := range logs {
		m, err := opts.Marshal(l)
		if err != nil {
			// Unreachable for a decoded message; the key then differs from
			// every other.
			return fmt.Sprintf("unmarshalable %p", l)
		}
		b = fmt.Appendf(b, "%d:", len(m))
		b = append(b, m...)
	}
	return string(b)
}

// Compile validates and compiles an HttpConnectionManager's access_log
// (Envoy's API: AccessLog of envoy.config.accesslog.v3). An error, a
// fieldpath.Error whose path starts at the list ("[1].typed_config..."),
// means the Listener must be NACKed. No logger returns nil. It reads
// files of no kind: a format from a file is refused.
func Compile(logs []*accesslogpb.AccessLog) (*Config, error) {
	return processCompiler.compile(logs)
}

func (c *compiler) compile(logs []*accesslogpb.AccessLog) (*Config, error) {
	if len(logs) == 0 {
		return nil, nil
	}
	c = &compiler{lookupEnv: c.lookupEnv, hostname: c.hostname, notRecorded: map[string]string{}}
	out := &Config{key: Key(logs)}
	for i, al := range logs {
		l, err := c.compileLogger(al)
		if err != nil {
			return nil, inField(fmt.Sprintf("[%d]", i), err)
		}
		out.loggers = append(out.loggers, l)
	}
	out.setReads()
	for name, why := range c.notRecorded {
		out.notRecorded = append(out.notRecorded, name+" ("+why+")")
	}
	slices.Sort(out.notRecorded)
	return out, nil
}

// supportedLoggers is said in errors.
const supportedLoggers = stdoutType + ", " + stderrType + " or " + fileType

func (c *compiler) compileLogger(al *accesslogpb.AccessLog) (*Logger, error) {
	l := &Logger{Name: al.GetName()}
	if f := al.GetFilter(); f != nil {
		var err error
		if l.filter, err = c.compileFilter(f); err != nil {
			return nil, inField("filter", err)
		}
	}
	a := al.GetTypedConfig()
	if a == nil {
		return nil, fieldErrorf("typed_config", "missing, want %s", supportedLoggers)
	}
	raw, err := typedconfig.Unwrap(a)
	if err != nil {
		return nil, inField("typed_config", err)
	}
	switch name := typedconfig.Name(raw.TypeURL); name {
	case stdoutType, stderrType:
		l.Path = Stdout
		var m interface {
			proto.Message
			GetLogFormat() *corepb.SubstitutionFormatString
		} = &streampb.StdoutAccessLog{}
		if name == stderrType {
			l.Path, m = Stderr, &streampb.StderrAccessLog{}
		}
		if err := raw.UnmarshalTo(m); err != nil {
			return nil, fieldErrorf("typed_config", "malformed %s: %v", typedconfig.Name(raw.TypeURL), err)
		}
		if l.format, err = c.compileSubstitution(m.GetLogFormat()); err != nil {
			return nil, inField("typed_config.log_format", err)
		}
	case fileType:
		m := &filepb.FileAccessLog{}
		if err := raw.UnmarshalTo(m); err != nil {
			return nil, fieldErrorf("typed_config", "malformed FileAccessLog: %v", err)
		}
		if l.Path, err = filePath(m.GetPath()); err != nil {
			return nil, inField("typed_config.path", err)
		}
		if l.format, err = c.compileFileFormat(m); err != nil {
			return nil, inField("typed_config", err)
		}
	default:
		return nil, fieldErrorf("typed_config", "unsupported access logger type %q, want %s", name, supportedLoggers)
	}
	return l, nil
}

// filePath checks a FileAccessLog path: not empty (Envoy's rule), no NUL.
// It is cleaned (filepath.Clean), so that spellings of one path share one
// output; /dev/stdout and /dev/stderr are the process's standard streams.
func filePath(p string) (string, error) {
	switch {
	case p == "":
		return "", fieldErrorf("", "empty, want a file path")
	case strings.ContainsRune(p, 0):
		return "", fieldErrorf("", "%q contains NUL", p)
	}
	return filepath.Clean(p), nil
}

// compileFileFormat compiles a FileAccessLog's format, deprecated fields
// included, as Envoy maps them: format (a text format; empty is the
// default), json_format (every value a string), typed_json_format (the
// same as log_format.json_format), log_format; none is the default.
func (c *compiler) compileFileFormat(m *filepb.FileAccessLog) (format, error) {
	switch f := m.GetAccessLogFormat().(type) {
	case *filepb.FileAccessLog_Format:
		if f.Format == "" {
			return c.defaultFormat(), nil
		}
		tf, err := c.compileText(f.Format, false)
		if err != nil {
			return nil, inField("format", err)
		}
		return tf, nil
	case *filepb.FileAccessLog_JsonFormat:
		jf, err := c.compileJSON(f.JsonFormat, false, false)
		if err != nil {
			return nil, inField("json_format", err)
		}
		return jf, nil
	case *filepb.FileAccessLog_TypedJsonFormat:
		jf, err := c.compileJSON(f.TypedJsonFormat, true, false)
		if err != nil {
			return nil, inField("typed_json_format", err)
		}
		return jf, nil
	case *filepb.FileAccessLog_LogFormat:
		sf, err := c.compileSubstitution(f.LogFormat)
		if err != nil {
			return nil, inField("log_format", err)
		}
		return sf, nil
	}
	return c.defaultFormat(), nil
}

// compileSubstitution compiles a SubstitutionFormatString; nil is the
// default format. content_type has no effect on an access log (Envoy uses
// it for local replies); json_format_options only holds sort_properties,
// which Envoy ignores (keys are always sorted).
func (c *compiler) compileSubstitution(s *corepb.SubstitutionFormatString) (format, error) {
	if s == nil {
		return c.defaultFormat(), nil
	}
	if n := len(s.GetFormatters()); n > 0 {
		return nil, fieldErrorf("formatters", "formatter extensions are not supported (%d given)", n)
	}
	if strings.ContainsAny(s.GetContentType(), "\x00\r\n") {
		return nil, fieldErrorf("content_type", "%q contains NUL, CR or LF", s.GetContentType())
	}
	omit := s.GetOmitEmptyValues()
	switch f := s.GetFormat().(type) {
	case *corepb.SubstitutionFormatString_TextFormat:
		tf, err := c.compileText(f.TextFormat, omit)
		if err != nil {
			return nil, inField("text_format", err)
		}
		return tf, nil
	case *corepb.SubstitutionFormatString_TextFormatSource:
		text, field, err := c.dataSource(f.TextFormatSource)
		if err != nil {
			return nil, inField("text_format_source", err)
		}
		tf, err := c.compileText(text, omit)
		if err != nil {
			return nil, inField("text_format_source."+field, err)
		}
		return tf, nil
	case *corepb.SubstitutionFormatString_JsonFormat:
		if f.JsonFormat == nil {
			return nil, fieldErrorf("json_format", "missing")
		}
		jf, err := c.compileJSON(f.JsonFormat, true, omit)
		if err != nil {
			return nil, inField("json_format", err)
		}
		return jf, nil
	}
	return nil, fieldErrorf("format", "missing, want text_format_source or json_format")
}

// dataSource reads a text_format_source: inline_string, inline_bytes, or
// environment_variable (read now, as Envoy reads it when it loads the
// config). filename is refused: the server would read a file of its own
// disk that the control plane names, once, into its logs; formats come
// from the control plane inline. It returns the text and the field it
// came from.
func (c *compiler) dataSource(d *corepb.DataSource) (string, string, error) {
	switch s := d.GetSpecifier().(type) {
	case *corepb.DataSource_InlineString:
		return s.InlineString, "inline_string", nil
	case *corepb.DataSource_InlineBytes:
		return string(s.InlineBytes), "inline_bytes", nil
	case *corepb.DataSource_EnvironmentVariable:
		if s.EnvironmentVariable == "" {
			return "", "", fieldErrorf("environment_variable", "empty, want a variable name")
		}
		v, ok := c.lookupEnv(s.EnvironmentVariable)
		if !ok {
			return "", "", fieldErrorf("environment_variable", "%q is not set in the server's environment", s.EnvironmentVariable)
		}
		return v, "environment_variable", nil
	case *corepb.DataSource_Filename:
		return "", "", fieldErrorf("filename", "is not supported: the server does not read formats from its disk, want inline_string or inline_bytes")
	case nil:
		return "", "", fieldErrorf("specifier", "missing, want inline_string or inline_bytes")
	default:
		return "", "", fieldErrorf("specifier", "unsupported %T", s)
	}
}

func (c *compiler) compileText(s string, omitEmpty bool) (*textFormat, error) {
	pieces, err := c.parseFormat(s)
	if err != nil {
		return nil, err
	}
	return &textFormat{pieces: pieces, omitEmpty: omitEmpty}, nil
}

// defaultFormat returns Envoy's default format, compiled once.
func (c *compiler) defaultFormat() format { return defaultText() }

var defaultText = sync.OnceValue(func() *textFormat {
	tf, err := processCompiler.compileText(DefaultFormat, false)
	if err != nil {
		panic(fmt.Sprintf("accesslog: the default format does not compile: %v", err))
	}
	return tf
})

// IstioFile returns the access log Istio configures on a sidecar when
// meshConfig's accessLogFile is path and it has no accessLogFormat: a
// FileAccessLog on path with IstioFormat (istio/istio
// pilot/pkg/model/telemetry_logging.go, FileAccessLogFromMeshConfig). An
// error says why path cannot be a log's.
func IstioFile(path string) (*Config, error) {
	al, err := istioAccessLog(path)
	if err != nil {
		return nil, err // a path that is not UTF-8
	}
	return Compile([]*accesslogpb.AccessLog{al})
}

// IstioDefault is IstioFile("/dev/stdout"), compiled once: Istio's
// meshConfig accessLogFile /dev/stdout. Istio sends no access log to
// proxyless nodes; a server that wants the sidecar's log uses this. The
// value is shared: do not modify it.
func IstioDefault() *Config { return istioDefault() }

var istioDefault = sync.OnceValue(func() *Config {
	cfg, err := IstioFile(Stdout)
	if err != nil {
		panic(fmt.Sprintf("accesslog: Istio's default access log does not compile: %v", err))
	}
	return cfg
})

// istioAccessLog is the AccessLog istiod builds for meshConfig
// accessLogFile path with the default (TEXT) encoding.
func istioAccessLog(path string) (*accesslogpb.AccessLog, error) {
	fl := &filepb.FileAccessLog{
		Path: path,
		AccessLogFormat: &filepb.FileAccessLog_LogFormat{LogFormat: &corepb.SubstitutionFormatString{
			Format: &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{
				Specifier: &corepb.DataSource_InlineString{InlineString: IstioFormat},
			}},
		}},
	}
	a, err := anypb.New(fl)
	if err != nil {
		return nil, err
	}
	return &accesslogpb.AccessLog{Name: "envoy.access_loggers.file", ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: a}}, nil
}
