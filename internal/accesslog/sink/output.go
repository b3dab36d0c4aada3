package sink

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/metrics"
)

const (
	// stdChunk bounds one write to a standard stream: lines of at most
	// PIPE_BUF bytes a write stay whole on a pipe shared with the
	// program's own output.
	stdChunk = 4096
	// fileChunk bounds one write to a file.
	fileChunk = 64 << 10
	// keepBuffer is the largest formatting buffer kept between batches.
	keepBuffer = 1 << 20
	// flushRecords is the batch that wakes the writer at once; fewer
	// records wait up to Options.FlushInterval, as Envoy's file logs wait
	// for file_flush_interval, so that a steady stream of RPCs costs one
	// wake-up and one write per batch rather than per RPC.
	flushRecords = 512
)

// item is one record to format with one logger's format.
type item struct {
	l *accesslog.Logger
	r *accesslog.Record
}

// ctlKind is a request to a writer.
type ctlKind uint8

const (
	ctlFlush  ctlKind = iota // done once the records logged before are written
	ctlReopen                // write the records held, then reopen the file
)

type ctlRequest struct {
	kind   ctlKind
	target uint64 // ctlFlush: the records enqueued when it was made
	done   chan struct{}
}

// output is one path's buffer and writer goroutine. Records wait in
// pending; the writer takes all of them at once, swapping in the slice it
// wrote last, so that Log and the writer meet once per batch, not per
// record.
type output struct {
	path string
	std  bool // the process's stdout or stderr: never opened or closed
	opts Options
	rec  *metrics.AccessLog

	refs int // guarded by Outputs.mu

	mu       sync.Mutex
	pending  []item // guarded by mu; at most opts.Buffer
	enqueued uint64 // guarded by mu: records accepted
	stopped  bool   // guarded by mu: set by shutdown, no record is accepted after

	wake  chan struct{} // capacity 1: pending has a batch, or waited FlushInterval
	timer *time.Timer   // wakes the writer FlushInterval after pending became non-empty
	ctl   chan ctlRequest
	retry chan struct{} // capacity 1: try a failed open again
	stop  chan struct{} // closed by shutdown
	done  chan struct{} // closed when the writer exits

	// The writer's own state.
	spare     []item // the slice pending is swapped with
	w         io.Writer
	closer    io.Closer // nil for the standard streams
	openErr   error     // the last open's error; lines are dropped while set
	failing   bool      // the last write failed
	processed uint64    // records written or dropped
	flushes   []ctlRequest
	buf       []byte
}

func newOutput(path string, opts Options) *output {
	out := &output{
		path:  path,
		opts:  opts,
		rec:   opts.Metrics.AccessLog(path),
		wake:  make(chan struct{}, 1),
		ctl:   make(chan ctlRequest),
		retry: make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	switch path {
	case accesslog.Stdout:
		out.std, out.w = true, opts.Stdout
	case accesslog.Stderr:
		out.std, out.w = true, opts.Stderr
	}
	out.timer = time.AfterFunc(time.Hour, out.wakeUp)
	out.timer.Stop()
	return out
}

// wakeUp wakes the writer, unless it is already awake.
func (o *output) wakeUp() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// enqueue hands a record to the writer, or drops and counts it when the
// buffer is full. It never blocks (beyond a short critical section).
func (o *output) enqueue(l *accesslog.Logger, r *accesslog.Record) {
	o.mu.Lock()
	if o.stopped {
		o.mu.Unlock()
		return
	}
	if len(o.pending) >= o.opts.Buffer {
		o.mu.Unlock()
		o.rec.DroppedBufferFull(1)
		return
	}
	o.pending = append(o.pending, item{l: l, r: r})
	n := len(o.pending)
	o.enqueued++
	if n == 1 {
		o.timer.Reset(o.opts.FlushInterval)
	}
	o.mu.Unlock()
	if n == flushRecords {
		o.wakeUp()
	}
}

// shutdown tells the writer to write what it holds and exit; no record is
// accepted afterwards.
func (o *output) shutdown() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.stopped {
		o.stopped = true
		close(o.stop)
	}
}

// take returns the records waiting, leaving an empty buffer.
func (o *output) take() []item {
	o.mu.Lock()
	defer o.mu.Unlock()
	batch := o.pending
	o.pending, o.spare = o.spare[:0], nil
	return batch
}

// request sends a request to the writer and waits for it to be done, or
// for ctx. An output whose writer has exited has nothing left to do.
func (o *output) request(ctx context.Context, kind ctlKind) error {
	o.mu.Lock()
	req := ctlRequest{kind: kind, target: o.enqueued, done: make(chan struct{})}
	o.mu.Unlock()
	select {
	case o.ctl <- req:
	case <-o.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req.done:
		return nil
	case <-o.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the writer goroutine: it opens the file, then formats and writes
// the records as they come, until shutdown.
func (o *output) run() {
	defer close(o.done)
	defer o.timer.Stop()
	if !o.std {
		o.open()
	}
	for {
		select {
		case <-o.wake:
			o.writePending()
		case req := <-o.ctl:
			o.handle(req)
		case <-o.retry:
			if o.openErr != nil {
				o.open()
			}
		case <-o.stop:
			o.writePending()
			o.closeFile()
			for _, f := range o.flushes {
				close(f.done)
			}
			return
		}
	}
}

// handle serves a flush or reopen request.
func (o *output) handle(req ctlRequest) {
	switch req.kind {
	case ctlFlush:
		o.writePending()
		o.flushes = append(o.flushes, req)
		o.notifyFlushes()
	case ctlReopen:
		// The records held when Reopen was called go to the file being
		// rotated out.
		o.writePending()
		o.closeFile()
		o.open()
		close(req.done)
	}
}

// writePending writes the records waiting, batch after batch, until none
// is.
func (o *output) writePending() {
	for {
		batch := o.take()
		if len(batch) == 0 {
			o.spare = batch
			return
		}
		o.writeBatch(batch)
		clear(batch) // the records may be collected
		o.spare = batch[:0]
	}
}

// writeBatch formats and writes a batch of records, in writes of at most
// a chunk (whole lines; a longer line alone).
func (o *output) writeBatch(batch []item) {
	chunk := fileChunk
	if o.std {
		chunk = stdChunk
	}
	buf, lines := o.buf[:0], 0
	for _, it := range batch {
		start := len(buf)
		buf = it.l.AppendLine(buf, it.r)
		if start > 0 && len(buf) > chunk {
			// Write what came before this line; it starts the next chunk.
			o.write(buf[:start], lines)
			buf, lines = append(buf[:0], buf[start:]...), 0
		}
		lines++
	}
	o.write(buf, lines)
	if cap(buf) <= keepBuffer {
		o.buf = buf[:0]
	} else {
		o.buf = nil
	}
	o.processed += uint64(len(batch))
	o.notifyFlushes()
}

// write writes the lines in b (n records), or drops and counts them when
// the file is not open or the write fails. A failure is logged when it
// starts, and the recovery when it ends.
func (o *output) write(b []byte, n int) {
	if n == 0 {
		return
	}
	if o.w == nil {
		o.rec.DroppedWriteError(int64(n))
		return
	}
	if len(b) == 0 {
		return
	}
	_, err := o.w.Write(b)
	switch {
	case err != nil:
		o.rec.DroppedWriteError(int64(n))
		if !o.failing {
			logger.Errorf("xds: access log %s: write failed, dropping lines until a write succeeds (counted in %s): %v", o.path, metrics.AccessLogDropped, err)
		}
		o.failing = true
	case o.failing:
		logger.Infof("xds: access log %s: writes succeed again", o.path)
		o.failing = false
	}
}

// open opens the file; a failure is logged, and lines are dropped and
// counted until an open succeeds.
func (o *output) open() {
	f, err := o.opts.OpenFile(o.path)
	if err != nil {
		o.w, o.closer, o.openErr = nil, nil, err
		logger.Errorf("xds: access log %s: cannot open the file, dropping its lines until Reopen or a new config opens it (counted in %s): %v", o.path, metrics.AccessLogDropped, err)
		return
	}
	o.w, o.closer, o.openErr, o.failing = f, f, nil, false
}

// closeFile closes the file, if one is open.
func (o *output) closeFile() {
	if o.closer == nil {
		return
	}
	if err := o.closer.Close(); err != nil {
		logger.Warningf("xds: access log %s: closing the file: %v", o.path, err)
	}
	o.w, o.closer = nil, nil
}

// notifyFlushes ends the flush requests whose records are all processed.
func (o *output) notifyFlushes() {
	kept := o.flushes[:0]
	for _, f := range o.flushes {
		if o.processed >= f.target {
			close(f.done)
		} else {
			kept = append(kept, f)
		}
	}
	clear(o.flushes[len(kept):])
	o.flushes = kept
}
