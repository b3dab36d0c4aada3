// Package accesslog compiles an HttpConnectionManager's access_log
// (Envoy's API, envoy.config.accesslog.v3) into loggers that write Envoy's
// access log lines for the RPCs of a gRPC server.
//
// Compile validates the config (an error names the field and NACKs the
// Listener) into an immutable Config: its Loggers, each with the path its
// lines go to, the filter that picks the records it logs (Logger.Match),
// and the format that turns a Record into a line (Logger.AppendLine), with
// Envoy's command operators, their syntax and their output. A Record is
// what the server knows of one RPC when it ends; filling it copies and
// formats nothing. Writing lines, off the RPC's path, is package
// internal/accesslog/sink's.
//
// Supported: the loggers StdoutAccessLog, StderrAccessLog and
// FileAccessLog (its deprecated format fields mapped as Envoy maps them);
// text and JSON formats with omit_empty_values; every filter with a
// meaning on a gRPC server. Envoy's operators are supported, print what
// Envoy prints when they have no value here ("-", or 0 for a count: the
// upstream ones, for a server that is the end of the stream), or print
// "-" with a warning (Config.NotRecorded) when they would have a value
// that the server does not record; docs/observability.md lists them.
//
// The package is pure: no gRPC, no goroutines, no I/O (%HOSTNAME% and
// %ENVIRONMENT(X)% read the process's host name and environment when a
// config is compiled, as Envoy does).
package accesslog
