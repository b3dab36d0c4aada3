package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/accesslog/sink"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

var logs *testutils.Logs

func TestMain(m *testing.M) {
	logs = testutils.InstallLogs(false)
	testutils.VerifyNoLeaks(m)
}

// TestDeps: the writers know the access log formats, the metrics and
// gRPC's logger; no server, listener or xDS client.
func TestDeps(t *testing.T) {
	const mod = testutils.ModulePath
	testutils.CheckDeps(t, mod+"/internal/accesslog/sink", append([]string{
		mod + "$",
		mod + "/internal/xdsclient",
		mod + "/internal/server",
		mod + "/internal/filterchain",
	}, testutils.TestOnly...)...)
}

// fileLog is a config with one FileAccessLog at path whose lines are the
// record's :path and a newline.
func fileLog(t testing.TB, path string) *accesslog.Config {
	t.Helper()
	fl := &filepb.FileAccessLog{Path: path, AccessLogFormat: &filepb.FileAccessLog_LogFormat{LogFormat: &corepb.SubstitutionFormatString{
		Format: &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{
			Specifier: &corepb.DataSource_InlineString{InlineString: "%REQ(:PATH)%\n"},
		}},
	}}}
	a, err := anypb.New(fl)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{{ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: a}}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func rec(method string) *accesslog.Record { return &accesslog.Record{FullMethod: method} }

// logN logs records "/<prefix>/0" ... "/<prefix>/n-1".
func logN(l *sink.Logger, prefix string, n int) {
	for i := range n {
		l.Log(rec(fmt.Sprintf("/%s/%d", prefix, i)))
	}
}

func lines(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "/%s/%d\n", prefix, i)
	}
	return b.String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func closeOutputs(t *testing.T, o *sink.Outputs) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func flush(t *testing.T, o *sink.Outputs) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// Lines logged to a file are in it, in order, once flushed.
func TestWritesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	o := sink.New(sink.Options{})
	defer closeOutputs(t, o)
	l := o.Logger(fileLog(t, path))
	defer l.Close()
	logN(l, "a", 100)
	flush(t, o)
	if got, want := readFile(t, path), lines("a", 100); got != want {
		t.Errorf("file holds %q, want %q", got, want)
	}
}

// logrotate's move-and-reopen: the lines logged before Reopen stay in the
// moved file (also those logged after the move: the file is still open),
// and those logged after Reopen land in a new file at the path.
func TestReopenAfterRename(t *testing.T) {
	dir := t.TempDir()
	path, rotated := filepath.Join(dir, "access.log"), filepath.Join(dir, "access.log.1")
	o := sink.New(sink.Options{})
	defer closeOutputs(t, o)
	l := o.Logger(fileLog(t, path))
	defer l.Close()
	logN(l, "before", 3)
	flush(t, o)
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	logN(l, "moved", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.Reopen(ctx); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	logN(l, "after", 4)
	flush(t, o)
	if got, want := readFile(t, rotated), lines("before", 3)+lines("moved", 2); got != want {
		t.Errorf("rotated file holds %q, want %q", got, want)
	}
	if got, want := readFile(t, path), lines("after", 4); got != want {
		t.Errorf("new file holds %q, want %q", got, want)
	}
}

// blockingWriter blocks every Write until released, saying when one has
// started.
type blockingWriter struct {
	entered chan struct{} // receives once per Write
	release chan struct{} // closed to let writes through
	mu      sync.Mutex
	buf     bytes.Buffer
}

func newBlockingWriter() *blockingWriter {
	return &blockingWriter{entered: make(chan struct{}, 1024), release: make(chan struct{})}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.entered <- struct{}{}
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *blockingWriter) Close() error { return nil }

func (w *blockingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// With the writer stuck in a write, Log still returns at once: the buffer
// takes what it can hold and the rest is dropped and counted.
func TestFullBufferDrops(t *testing.T) {
	mr := testutils.NewMetricReader(t)
	w := newBlockingWriter()
	o := sink.New(sink.Options{
		Metrics:  metrics.NewServer(mr.Provider),
		Buffer:   2,
		OpenFile: func(string) (io.WriteCloser, error) { return w, nil },
	})
	defer closeOutputs(t, o)
	l := o.Logger(fileLog(t, "/var/log/blocked.log"))
	defer l.Close()

	l.Log(rec("/first"))
	<-w.entered // the writer holds "/first" and is stuck in Write

	const n = 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		logN(l, "x", n)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Log blocked behind a blocked writer")
	}
	attrs := []attribute.KeyValue{
		attribute.String(metrics.AttrAccessLogPath, "/var/log/blocked.log"),
		attribute.String(metrics.AttrReason, metrics.ReasonBufferFull),
	}
	if got, _ := mr.Value(t, metrics.AccessLogDropped, attrs...); got != n-2 {
		t.Errorf("dropped %d lines, want %d (the buffer holds 2)", got, n-2)
	}
	close(w.release)
	flush(t, o)
	if got, want := w.String(), "/first\n"+lines("x", 2); got != want {
		t.Errorf("written %q, want %q", got, want)
	}
}

// A file that cannot be opened is reported and its lines dropped and
// counted, without stopping anything; Reopen tries again.
func TestOpenFailureRetried(t *testing.T) {
	mr := testutils.NewMetricReader(t)
	dir := filepath.Join(t.TempDir(), "missing")
	path := filepath.Join(dir, "access.log")
	o := sink.New(sink.Options{Metrics: metrics.NewServer(mr.Provider)})
	defer closeOutputs(t, o)
	l := o.Logger(fileLog(t, path))
	defer l.Close()
	logN(l, "lost", 3)
	flush(t, o)
	if n := logs.Count("E", path, "cannot open"); n != 1 {
		t.Errorf("%d error lines about opening %s, want 1", n, path)
	}
	attrs := []attribute.KeyValue{
		attribute.String(metrics.AttrAccessLogPath, path),
		attribute.String(metrics.AttrReason, metrics.ReasonWriteError),
	}
	if got, _ := mr.Value(t, metrics.AccessLogDropped, attrs...); got != 3 {
		t.Errorf("dropped %d lines, want 3", got)
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.Reopen(ctx); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	logN(l, "kept", 2)
	flush(t, o)
	if got, want := readFile(t, path), lines("kept", 2); got != want {
		t.Errorf("file holds %q, want %q", got, want)
	}
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
func (failingWriter) Close() error              { return nil }

// A failing write drops and counts its lines and is logged once while it
// keeps failing.
func TestWriteFailureCounted(t *testing.T) {
	mr := testutils.NewMetricReader(t)
	o := sink.New(sink.Options{
		Metrics:  metrics.NewServer(mr.Provider),
		OpenFile: func(string) (io.WriteCloser, error) { return failingWriter{}, nil },
	})
	defer closeOutputs(t, o)
	before := logs.Count("E", "/var/log/full.log", "disk full")
	l := o.Logger(fileLog(t, "/var/log/full.log"))
	defer l.Close()
	for range 5 {
		l.Log(rec("/a"))
		flush(t, o)
	}
	attrs := []attribute.KeyValue{
		attribute.String(metrics.AttrAccessLogPath, "/var/log/full.log"),
		attribute.String(metrics.AttrReason, metrics.ReasonWriteError),
	}
	if got, _ := mr.Value(t, metrics.AccessLogDropped, attrs...); got != 5 {
		t.Errorf("dropped %d lines, want 5", got)
	}
	if n := logs.Count("E", "/var/log/full.log", "disk full") - before; n != 1 {
		t.Errorf("%d error lines, want 1 while the failure lasts", n)
	}
}

// Close writes what the outputs hold before returning.
func TestCloseFlushes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	o := sink.New(sink.Options{})
	l := o.Logger(fileLog(t, path))
	logN(l, "a", 500)
	l.Close()
	closeOutputs(t, o)
	l.Log(rec("/late")) // after Close: nothing, no panic
	if got, want := readFile(t, path), lines("a", 500); got != want {
		t.Errorf("file holds %d bytes, want %d", len(got), len(want))
	}
	if l := o.Logger(fileLog(t, path)); l != nil {
		t.Errorf("Logger after Close = %v, want nil", l)
	}
}

// Close waits for the Loggers still open: what they log until they are
// closed (the RPCs a stopped server cut short, ending) is written.
func TestCloseWaitsForLoggers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	o := sink.New(sink.Options{})
	l := o.Logger(fileLog(t, path))
	logN(l, "a", 10)
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- o.Close(ctx)
	}()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a Logger is open", err)
	case <-time.After(50 * time.Millisecond):
	}
	logN(l, "b", 10)
	l.Close()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the last Logger was closed")
	}
	if got, want := readFile(t, path), lines("a", 10)+lines("b", 10); got != want {
		t.Errorf("file holds %q, want %q", got, want)
	}
}

// A Logger never closed holds Close only until its context ends; the
// outputs stop all the same, and the Logger logs nothing after.
func TestCloseBoundedByContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	o := sink.New(sink.Options{})
	l := o.Logger(fileLog(t, path))
	defer l.Close()
	logN(l, "a", 10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := o.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want %v", err, context.DeadlineExceeded)
	}
	l.Log(rec("/late"))
	// The writer exits (goleak, in TestMain), having written what it held.
	deadline := time.Now().Add(10 * time.Second)
	for readFile(t, path) != lines("a", 10) {
		if time.Now().After(deadline) {
			t.Fatalf("file holds %q, want %q", readFile(t, path), lines("a", 10))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingOpener opens real files and counts opens and closes per path.
type countingOpener struct {
	mu            sync.Mutex
	opens, closes map[string]int
}

func (c *countingOpener) open(path string) (io.WriteCloser, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opens[path]++
	return &countedFile{File: f, c: c, path: path}, nil
}

func (c *countingOpener) counts(path string) (opens, closes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opens[path], c.closes[path]
}

type countedFile struct {
	*os.File
	c    *countingOpener
	path string
}

func (f *countedFile) Close() error {
	f.c.mu.Lock()
	f.c.closes[f.path]++
	f.c.mu.Unlock()
	return f.File.Close()
}

// Loggers of one path share one open file, which stays open while any of
// them is open and closes with the last, its writer stopping.
func TestOutputsShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	c := &countingOpener{opens: map[string]int{}, closes: map[string]int{}}
	o := sink.New(sink.Options{OpenFile: c.open})
	defer closeOutputs(t, o)
	l1 := o.Logger(fileLog(t, path))
	l2 := o.Logger(fileLog(t, path)) // another Listener's config, same path
	logN(l1, "one", 2)
	l1.Close()
	logN(l2, "two", 2)
	flush(t, o)
	if opens, closes := c.counts(path); opens != 1 || closes != 0 {
		t.Errorf("after closing one of two loggers: %d opens, %d closes, want 1, 0", opens, closes)
	}
	l2.Close()
	testutils.WaitFor(testutils.Context(t), t, "the file to close with its last logger", func() error {
		if _, closes := c.counts(path); closes != 1 {
			return fmt.Errorf("%d closes", closes)
		}
		return nil
	})
	if got, want := readFile(t, path), lines("one", 2)+lines("two", 2); got != want {
		t.Errorf("file holds %q, want %q", got, want)
	}
	// A new logger of the path opens it again.
	l3 := o.Logger(fileLog(t, path))
	defer l3.Close()
	logN(l3, "three", 1)
	flush(t, o)
	if opens, _ := c.counts(path); opens != 2 {
		t.Errorf("%d opens, want 2", opens)
	}
}

// Many goroutines log at once (run with -race): every line is written
// once, whole.
func TestConcurrentLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	o := sink.New(sink.Options{})
	defer closeOutputs(t, o)
	l := o.Logger(fileLog(t, path))
	defer l.Close()
	const goroutines, each = 8, 400 // within the buffer: nothing dropped
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			logN(l, fmt.Sprintf("g%d", g), each)
		}()
	}
	wg.Wait()
	flush(t, o)
	got := strings.Split(strings.TrimSuffix(readFile(t, path), "\n"), "\n")
	if len(got) != goroutines*each {
		t.Fatalf("%d lines, want %d", len(got), goroutines*each)
	}
	seen := map[string]bool{}
	for _, line := range got {
		if seen[line] || !strings.HasPrefix(line, "/g") {
			t.Fatalf("line %q repeated or torn", line)
		}
		seen[line] = true
	}
}

// writeRecorder records each write to a standard stream.
type writeRecorder struct {
	mu     sync.Mutex
	writes []string
}

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// The stream loggers write to the standard streams, never opened, in
// writes of whole lines of at most 4096 bytes (PIPE_BUF), so that a pipe
// shared with the program's own output does not interleave within a line.
func TestStdoutWholeLines(t *testing.T) {
	var stdout writeRecorder
	o := sink.New(sink.Options{
		Stdout:   &stdout,
		OpenFile: func(p string) (io.WriteCloser, error) { return nil, fmt.Errorf("opened %s", p) },
	})
	defer closeOutputs(t, o)
	l := o.Logger(fileLog(t, accesslog.Stdout))
	defer l.Close()
	long := "/" + strings.Repeat("x", 300)
	for range 100 {
		l.Log(rec(long))
	}
	flush(t, o)
	stdout.mu.Lock()
	defer stdout.mu.Unlock()
	total := 0
	for _, w := range stdout.writes {
		if len(w) > 4096 || !strings.HasSuffix(w, "\n") {
			t.Errorf("a write of %d bytes, ending in %q: want at most 4096, whole lines", len(w), w[len(w)-1:])
		}
		total += strings.Count(w, "\n")
	}
	if total != 100 {
		t.Errorf("%d lines written, want 100", total)
	}
}

// A nil Logger, and the Logger of no config, log nothing.
func TestNoConfig(t *testing.T) {
	o := sink.New(sink.Options{})
	defer closeOutputs(t, o)
	l := o.Logger(nil)
	if l != nil {
		t.Fatalf("Logger(nil) = %v, want nil", l)
	}
	l.Log(rec("/a"))
	l.Close()
}

// Close is bounded: with a writer stuck in a write, it returns ctx's error
// when ctx ends, and the writer finishes once the write returns.
func TestCloseBounded(t *testing.T) {
	w := newBlockingWriter()
	o := sink.New(sink.Options{OpenFile: func(string) (io.WriteCloser, error) { return w, nil }})
	l := o.Logger(fileLog(t, "/var/log/stuck.log"))
	l.Log(rec("/a"))
	<-w.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := o.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with a stuck writer = %v, want DeadlineExceeded", err)
	}
	close(w.release)
	l.Close()
	closeOutputs(t, o) // waits for the writer to exit
	if got := w.String(); got != "/a\n" {
		t.Errorf("written %q, want the line held", got)
	}
}
