package metrics

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// AccessLogDropped counts the access log lines a server did not write: the
// output's buffer was full (ReasonBufferFull: the writer is slower than
// the RPCs), or the output failed (ReasonWriteError: the file could not be
// opened or written). The output is in AttrAccessLogPath.
const AccessLogDropped = "grpc.xds_server.access_log.dropped"

// AttrAccessLogPath is the path of an access log output: a file, or
// /dev/stdout or /dev/stderr. With AccessLogDropped, AttrReason is
// ReasonBufferFull or ReasonWriteError.
const (
	AttrAccessLogPath = "grpc.xds_server.access_log.path"
	ReasonBufferFull  = "buffer_full"
	ReasonWriteError  = "write_error"
)

// AccessLog records the dropped lines of one access log output. Nil-safe
// and safe for concurrent use.
type AccessLog struct {
	c                  metric.Int64Counter
	bufferFull, failed []metric.AddOption
}

// AccessLog returns the recorder of the access log output at path; nil
// (which records nothing) without metrics. Create it once per output, not
// per line.
func (s *Server) AccessLog(path string) *AccessLog {
	if s == nil || s.accessLogDropped == nil {
		return nil
	}
	p := attribute.String(AttrAccessLogPath, path)
	return &AccessLog{
		c:          s.accessLogDropped,
		bufferFull: addWith(p, attribute.String(AttrReason, ReasonBufferFull)),
		failed:     addWith(p, attribute.String(AttrReason, ReasonWriteError)),
	}
}

// DroppedBufferFull counts n lines dropped because the output's buffer was
// full. It allocates nothing.
func (a *AccessLog) DroppedBufferFull(n int64) {
	if a != nil {
		a.c.Add(context.Background(), n, a.bufferFull...)
	}
}

// DroppedWriteError counts n lines dropped because the output could not
// be opened or written. It allocates nothing.
func (a *AccessLog) DroppedWriteError(n int64) {
	if a != nil {
		a.c.Add(context.Background(), n, a.failed...)
	}
}

func newAccessLogDropped(m metric.Meter, keep func(error)) metric.Int64Counter {
	c, err := m.Int64Counter(AccessLogDropped, metric.WithUnit("{line}"),
		metric.WithDescription("Access log lines not written: the output's buffer was full, or the output could not be opened or written."))
	keep(err)
	return c
}
