package e2e_test

// End-to-end tests of the access log's files through the server: rotation
// (a renamed file, then GRPCServer.ReopenAccessLogs), a writer that falls
// behind (lines dropped and counted, RPCs unaffected) and a file that
// cannot be opened.

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/internal/accesslog/sink"
	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

// droppedAttrs are the attributes of the dropped lines of path for reason.
func droppedAttrs(path, reason string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String(metrics.AttrAccessLogPath, path), attribute.String(metrics.AttrReason, reason)}
}

// TestAccessLog_Reopen: logrotate's move-and-reopen through the server.
// After the files (the HttpConnectionManager's and xds.AccessLogFile's)
// are renamed and ReopenAccessLogs returns, new lines land in new files at
// the paths, and the renamed files keep the old lines and get no more.
func TestAccessLog_Reopen(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	dir := t.TempDir()
	path, istio := filepath.Join(dir, "access.log"), filepath.Join(dir, "istio.log")
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return loggingListener(t, simpleListener(a), fileLog(t, path, "%REQ(X-CASE)%\n"))
	}, nil, xds.AccessLogFile(istio))
	c := connected(ctx, t, addr)
	call := func(name string) {
		t.Helper()
		if err := rpcResult(withCase(ctx, name, chainHeader, "A"), c, "EmptyCall"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	call("before-1")
	call("before-2")
	logLines(ctx, t, path, 2)
	logLines(ctx, t, istio, 2)
	for _, p := range []string{path, istio} {
		if err := os.Rename(p, p+".1"); err != nil {
			t.Fatal(err)
		}
	}
	// The server still writes to the renamed files until it reopens them.
	call("moved")
	if err := s.ReopenAccessLogs(ctx); err != nil {
		t.Fatalf("ReopenAccessLogs: %v", err)
	}
	call("after-1")
	call("after-2")
	s.GracefulStop()
	read := func(p string) []string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return linesOf(string(b))
	}
	if got, want := read(path+".1"), []string{"before-1", "before-2", "moved"}; !slices.Equal(got, want) {
		t.Errorf("renamed file: %q, want %q", got, want)
	}
	if got, want := read(path), []string{"after-1", "after-2"}; !slices.Equal(got, want) {
		t.Errorf("new file at the path: %q, want %q", got, want)
	}
	if old, cur := read(istio+".1"), read(istio); len(old) != 3 || len(cur) != 2 {
		t.Errorf("xds.AccessLogFile: %d lines in the renamed file, %d in the new one, want 3 and 2:\n%s\n--\n%s", len(old), len(cur), strings.Join(old, "\n"), strings.Join(cur, "\n"))
	}
}

// TestAccessLog_FullBuffer: a writer that falls behind costs RPCs nothing:
// the lines past the output's buffer are dropped and counted
// (grpc.xds_server.access_log.dropped, reason buffer_full), and the lines
// it holds are written once the writer can go on. The slow writer is
// real: the log's path is a FIFO that nobody reads yet, so the writer
// blocks opening it. The server has no seam for the buffer's size
// (sink.DefaultBuffer, 4096 records): 64 loggers on the one path fill it
// with 64 RPCs.
func TestAccessLog_FullBuffer(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	fifo := filepath.Join(t.TempDir(), "fifo.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	const loggers, rpcs = 64, 80
	var logs []*accesslogpb.AccessLog
	for range loggers {
		logs = append(logs, fileLog(t, fifo, "%REQ(X-CASE)%\n"))
	}
	mr := testutils.NewMetricReader(t)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return loggingListener(t, simpleListener(a), logs...)
	}, nil, xds.MeterProvider(mr.Provider))
	c := connected(ctx, t, addr)
	start := time.Now()
	for i := range rpcs {
		rctx, cancel := context.WithTimeout(withCase(ctx, "rpc", chainHeader, "A"), 5*time.Second)
		code, msg := statusOf(rpcResult(rctx, c, "EmptyCall"))
		cancel()
		if code != codes.OK {
			t.Fatalf("RPC %d with the log's writer blocked: %v %q", i, code, msg)
		}
	}
	t.Logf("%d RPCs with the writer blocked took %v", rpcs, time.Since(start))
	kept := int64(sink.DefaultBuffer)
	mr.WaitForValue(ctx, t, metrics.AccessLogDropped, loggers*rpcs-kept, droppedAttrs(fifo, metrics.ReasonBufferFull)...)

	// A reader unblocks the writer, which writes what it held.
	got := make(chan int, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- -1
			return
		}
		defer f.Close()
		n := 0
		for sc := bufio.NewScanner(f); sc.Scan(); {
			n++
		}
		got <- n
	}()
	s.GracefulStop() // closes the FIFO once the held lines are written
	select {
	case n := <-got:
		if n != int(kept) {
			t.Errorf("the reader got %d lines, want the %d the buffer held", n, kept)
		}
	case <-ctx.Done():
		t.Fatal("the FIFO's reader did not get to its end")
	}
	if v, _ := mr.Value(t, metrics.AccessLogDropped, droppedAttrs(fifo, metrics.ReasonWriteError)...); v != 0 {
		t.Errorf("%d lines counted as write errors, want 0", v)
	}
}

// TestAccessLog_CannotOpen: a log file that cannot be opened (its
// directory does not exist) costs RPCs nothing: the server serves, says so
// once in an error, and drops and counts the lines (reason write_error);
// once the directory exists, ReopenAccessLogs opens the file and the next
// lines are written.
func TestAccessLog_CannotOpen(t *testing.T) {
	ctx := testContext(t)
	env := newTestEnv(t)
	dir := filepath.Join(t.TempDir(), "missing")
	path := filepath.Join(dir, "access.log")
	mr := testutils.NewMetricReader(t)
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return loggingListener(t, simpleListener(a), fileLog(t, path, "%REQ(X-CASE)%\n"))
	}, nil, xds.MeterProvider(mr.Provider))
	c := connected(ctx, t, addr)
	for _, name := range []string{"lost-1", "lost-2", "lost-3"} {
		if err := rpcResult(withCase(ctx, name, chainHeader, "A"), c, "EmptyCall"); err != nil {
			t.Fatalf("%s with the log's file missing: %v", name, err)
		}
	}
	mr.WaitForValue(ctx, t, metrics.AccessLogDropped, 3, droppedAttrs(path, metrics.ReasonWriteError)...)
	logs.WaitCount(ctx, t, 1, "E", "access log "+path, "cannot open the file")

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.ReopenAccessLogs(ctx); err != nil {
		t.Fatalf("ReopenAccessLogs: %v", err)
	}
	if err := rpcResult(withCase(ctx, "written", chainHeader, "A"), c, "EmptyCall"); err != nil {
		t.Fatal(err)
	}
	s.GracefulStop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := linesOf(string(b)); !slices.Equal(got, []string{"written"}) {
		t.Errorf("the file has %q, want [written]", got)
	}
	if n := logs.Count("E", "access log "+path, "cannot open the file"); n != 1 {
		t.Errorf("%d errors about the file, want 1", n)
	}
}
