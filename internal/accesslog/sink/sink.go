// Package sink writes access log lines off the RPC's path: Logger.Log
// hands a record to a bounded buffer per output and returns at once; one
// goroutine per output formats the records (package internal/accesslog)
// and writes the lines, in batches.
//
// Outputs are shared by path: every Logger of an Outputs that writes to a
// path uses one open file and one goroutine, held while some Logger uses
// it (reference counted, across Listener updates) and closed, its
// goroutine stopped, when the last one is closed. /dev/stdout and
// /dev/stderr are the process's standard streams, never opened or closed.
//
// Nothing here blocks an RPC: a full buffer drops the line and counts it
// (metrics.AccessLogDropped, reason buffer_full); a file that cannot be
// opened or written is logged and its lines dropped and counted (reason
// write_error), and the server keeps serving; the open is tried again on
// Reopen, and when a new Logger takes the output.
//
// Reopen reopens every file, for logrotate's move-and-reopen (logrotate's
// postrotate calls it through the program, or an admin endpoint like
// Envoy's /reopen_logs); the server installs no signal handler of its
// own: a library must not take SIGUSR1 from the program that links it.
package sink

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/grpclog"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/metrics"
)

var logger = grpclog.Component("xds-server")

// DefaultBuffer is the number of records an output holds for its writer
// when Options.Buffer is 0.
const DefaultBuffer = 4096

// Options configures Outputs. The zero value is ready to use.
type Options struct {
	// Metrics counts the lines dropped; nil counts nothing.
	Metrics *metrics.Server
	// Buffer is the number of records each output holds waiting for its
	// writer; 0 means DefaultBuffer.
	Buffer int
	// OpenFile opens a file for appending lines; nil opens it with
	// os.OpenFile, append-only, created 0644 if missing.
	OpenFile func(path string) (io.WriteCloser, error)
	// Stdout and Stderr receive the lines for /dev/stdout and /dev/stderr;
	// nil means os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// FlushInterval is how long a line may wait to be written while fewer
	// than a batch wait with it; 0 means DefaultFlushInterval. Flush,
	// Reopen and Close write at once.
	FlushInterval time.Duration
}

// DefaultFlushInterval is Envoy's default file_flush_interval: lines are
// written at least once a second.
const DefaultFlushInterval = time.Second

// Outputs are the access log outputs of a server, shared by path by its
// Loggers. Safe for concurrent use.
type Outputs struct {
	opts Options

	// mu is taken before an output's own mu (releasing a Logger stops
	// outputs under it), never after; nothing does I/O under either.
	mu      sync.Mutex
	outputs map[string]*output // by path; guarded by mu
	closed  bool               // guarded by mu
	loggers int                // Loggers not closed; guarded by mu
	// noLoggers is closed when loggers drops to 0 after Close began;
	// guarded by mu.
	noLoggers chan struct{}

	wg sync.WaitGroup // the writers
}

// New returns an empty set of outputs.
func New(opts Options) *Outputs {
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.OpenFile == nil {
		opts.OpenFile = openAppend
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	return &Outputs{opts: opts, outputs: make(map[string]*output)}
}

func openAppend(path string) (io.WriteCloser, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
}

// Logger binds cfg's loggers to outputs, opening (on their writers'
// goroutines) the files not open yet; the Logger holds them until Close. A
// nil or empty cfg, or Outputs already closed, gives a Logger that logs
// nothing. The returned Logger must be closed when its config is replaced.
func (o *Outputs) Logger(cfg *accesslog.Config) *Logger {
	loggers := cfg.Loggers()
	if len(loggers) == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	l := &Logger{outputs: o, entries: make([]entry, len(loggers))}
	o.loggers++
	for i, al := range loggers {
		l.entries[i] = entry{l: al, out: o.acquireLocked(al.Path)}
	}
	return l
}

// acquireLocked returns the output of path with one more reference,
// starting it if it is new, or asking it to retry a failed open.
func (o *Outputs) acquireLocked(path string) *output {
	if out, ok := o.outputs[path]; ok {
		out.refs++
		select {
		case out.retry <- struct{}{}:
		default:
		}
		return out
	}
	out := newOutput(path, o.opts)
	out.refs = 1
	o.outputs[path] = out
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		out.run()
	}()
	return out
}

// release drops one reference to each output of l, stopping the outputs no
// Logger uses any more.
func (o *Outputs) release(l *Logger) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.loggers--; o.loggers == 0 && o.noLoggers != nil {
		close(o.noLoggers)
		o.noLoggers = nil
	}
	for _, e := range l.entries {
		out := e.out
		if out.refs--; out.refs == 0 {
			if o.outputs[out.path] == out {
				delete(o.outputs, out.path)
			}
			out.shutdown()
		}
	}
}

// live returns the outputs in use.
func (o *Outputs) live() []*output {
	o.mu.Lock()
	defer o.mu.Unlock()
	outs := make([]*output, 0, len(o.outputs))
	for _, out := range o.outputs {
		outs = append(outs, out)
	}
	return outs
}

// Flush waits until every record logged before it was called has been
// written (or dropped), or ctx is done; it then returns ctx's error.
func (o *Outputs) Flush(ctx context.Context) error {
	var errs []error
	for _, out := range o.live() {
		errs = append(errs, out.request(ctx, ctlFlush))
	}
	return errors.Join(errs...)
}

// Reopen closes and reopens every file output, after writing to it the
// records logged before the call: with logrotate's move-and-reopen, the
// lines logged after Reopen returns go to a new file at the path. A file
// that cannot be opened again is logged and its lines dropped and counted
// until the next Reopen. It returns when every file is reopened, or ctx is
// done (with ctx's error).
func (o *Outputs) Reopen(ctx context.Context) error {
	var errs []error
	for _, out := range o.live() {
		if !out.std {
			errs = append(errs, out.request(ctx, ctlReopen))
		}
	}
	return errors.Join(errs...)
}

// Close stops every output: each writes the records it holds, closes its
// file and stops its goroutine. It first waits for the Loggers still open
// to be closed (a chain's Logger is closed once the RPCs its server cut
// short have been logged), then for the writers. It returns when they all
// have, or when ctx is done (with ctx's error; the outputs are then
// stopped anyway, and a writer stuck in a write to a blocked output is
// left to finish on its own). No Logger is made afterwards, and those
// still open log nothing once it returns.
func (o *Outputs) Close(ctx context.Context) error {
	o.mu.Lock()
	o.closed = true
	var waitLoggers chan struct{}
	if o.loggers > 0 {
		if o.noLoggers == nil {
			o.noLoggers = make(chan struct{})
		}
		waitLoggers = o.noLoggers
	}
	o.mu.Unlock()
	var ctxErr error
	if waitLoggers != nil {
		select {
		case <-waitLoggers:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
	}
	o.mu.Lock()
	outs := make([]*output, 0, len(o.outputs))
	for path, out := range o.outputs {
		outs = append(outs, out)
		delete(o.outputs, path)
	}
	o.mu.Unlock()
	for _, out := range outs {
		out.shutdown()
	}
	if ctxErr != nil {
		return ctxErr
	}
	done := make(chan struct{})
	go func() {
		o.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Logger logs records to the outputs of a Config's loggers. A nil Logger
// logs nothing. Safe for concurrent use.
type Logger struct {
	outputs *Outputs
	entries []entry // immutable
	closed  atomic.Bool
}

// entry is one of the config's loggers and its output.
type entry struct {
	l   *accesslog.Logger
	out *output
}

// Log hands r to every logger whose filter lets it through and returns at
// once: it never blocks on an output. A logger whose output's buffer is
// full drops the line and counts it. Log takes ownership of r: nothing may
// change it afterwards. It logs nothing after Close (a record logged while
// Close runs may be lost).
func (l *Logger) Log(r *accesslog.Record) {
	if l == nil || l.closed.Load() {
		return
	}
	for i := range l.entries {
		e := &l.entries[i]
		if e.l.Match(r) {
			e.out.enqueue(e.l, r)
		}
	}
}

// Close releases the Logger's outputs: an output no Logger uses any more
// writes what it holds and closes. Close does not wait for that (Outputs'
// Flush and Close do). Closing twice does nothing.
func (l *Logger) Close() {
	if l == nil || l.closed.Swap(true) {
		return
	}
	l.outputs.release(l)
}
