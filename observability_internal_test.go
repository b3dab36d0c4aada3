package xds

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/grpclog"

	"github.com/proxyless-grpc/xds/internal/metrics"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"go.opentelemetry.io/otel/attribute"
)

// levelRecorder is a grpclog.DepthLoggerV2 that records info and warning
// lines, prefixed with their level.
type levelRecorder struct {
	mu    sync.Mutex
	lines []string
	v2    bool
}

func (l *levelRecorder) add(level string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, level+": "+fmt.Sprint(args...))
	l.mu.Unlock()
}

func (l *levelRecorder) count(prefix string, words ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.lines {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		for _, w := range words {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		n++
	}
	return n
}

func (l *levelRecorder) Info(args ...any)                { l.add("I", args...) }
func (l *levelRecorder) Infoln(args ...any)              { l.add("I", args...) }
func (l *levelRecorder) Infof(f string, args ...any)     { l.add("I", fmt.Sprintf(f, args...)) }
func (l *levelRecorder) Warning(args ...any)             { l.add("W", args...) }
func (l *levelRecorder) Warningln(args ...any)           { l.add("W", args...) }
func (l *levelRecorder) Warningf(f string, args ...any)  { l.add("W", fmt.Sprintf(f, args...)) }
func (l *levelRecorder) Error(args ...any)               { l.add("E", args...) }
func (l *levelRecorder) Errorln(args ...any)             { l.add("E", args...) }
func (l *levelRecorder) Errorf(f string, args ...any)    { l.add("E", fmt.Sprintf(f, args...)) }
func (l *levelRecorder) Fatal(args ...any)               { panic(fmt.Sprint(args...)) }
func (l *levelRecorder) Fatalln(args ...any)             { panic(fmt.Sprint(args...)) }
func (l *levelRecorder) Fatalf(f string, args ...any)    { panic(fmt.Sprintf(f, args...)) }
func (l *levelRecorder) V(int) bool                      { return l.v2 }
func (l *levelRecorder) InfoDepth(_ int, args ...any)    { l.add("I", args...) }
func (l *levelRecorder) WarningDepth(_ int, args ...any) { l.add("W", args...) }
func (l *levelRecorder) ErrorDepth(_ int, args ...any)   { l.add("E", args...) }
func (l *levelRecorder) FatalDepth(_ int, args ...any)   { panic(fmt.Sprint(args...)) }
func (l *levelRecorder) installFor(t *testing.T) *levelRecorder {
	grpclog.SetLoggerV2(l)
	t.Cleanup(func() { grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr)) })
	return l
}

// handshakeFailed logs the first failure of a filter chain as a warning,
// then at most one warning per interval per chain with the number of
// failures in between; the others go to verbosity 2.
func TestHandshakeFailureLogging(t *testing.T) {
	logs := (&levelRecorder{v2: true}).installFor(t)
	lw := &listenerWrapper{log: newPrefixLogger("[listener test]")}
	src := netip.MustParseAddrPort("127.0.0.1:1234")
	errBad := errors.New("bad certificate")
	for range 5 {
		lw.handshakeFailed("chain-a", src, errBad)
	}
	lw.handshakeFailed("chain-b", src, errBad)
	if n := logs.count("W", "[listener test]", `filter chain "chain-a"`, "bad certificate"); n != 1 {
		t.Errorf("%d warnings for chain-a, want 1; lines: %q", n, logs.lines)
	}
	if n := logs.count("I", `filter chain "chain-a"`); n != 4 {
		t.Errorf("%d info lines for chain-a, want 4; lines: %q", n, logs.lines)
	}
	if n := logs.count("W", `filter chain "chain-b"`); n != 1 {
		t.Errorf("%d warnings for chain-b, want 1; lines: %q", n, logs.lines)
	}
	// After the interval, the next failure is a warning with the count.
	lw.hsLog.mu.Lock()
	lw.hsLog.chains["chain-a"].last = time.Now().Add(-handshakeLogInterval)
	lw.hsLog.mu.Unlock()
	lw.handshakeFailed("chain-a", src, errBad)
	if n := logs.count("W", `filter chain "chain-a"`, "4 more failure(s)"); n != 1 {
		t.Errorf("%d warnings for chain-a with the count of 4, want 1; lines: %q", n, logs.lines)
	}
}

// noteDrain logs one line and counts one drain per configuration change
// with connections to drain, counting only connections not yet draining,
// and nothing when there is none.
func TestNoteDrain(t *testing.T) {
	logs := (&levelRecorder{}).installFor(t)
	mr := testutils.NewMetricReader(t)
	lw := &listenerWrapper{
		log:            newPrefixLogger("[listener test]"),
		listenerParams: listenerParams{opts: &serverOptions{drainGrace: time.Minute}},
		metrics:        metrics.NewServer(mr.Provider).Listener("127.0.0.1:1"),
	}
	cs := &chainServer{lw: lw, conns: map[*trackedConn]struct{}{{}: {}, {}: {}, {draining: true}: {}}}
	empty := &chainServer{lw: lw, conns: map[*trackedConn]struct{}{}}

	lw.noteDrain("test", drainCount([]*chainServer{empty}, nil))
	if n := logs.count("I", "draining"); n != 0 {
		t.Errorf("%d drain lines for nothing to drain, want 0", n)
	}
	lw.noteDrain("Listener update", drainCount([]*chainServer{cs, empty}, map[*chainServer][]*trackedConn{empty: {{}}}))
	if n := logs.count("I", "[listener test]", "draining 3 connection(s) (Listener update)"); n != 1 {
		t.Errorf("%d lines saying 3 connections drain, want 1; lines: %q", n, logs.lines)
	}
	lis := attribute.String(metrics.AttrListener, "127.0.0.1:1")
	if v, _ := mr.Value(t, metrics.Drains, lis); v != 1 {
		t.Errorf("%s = %d, want 1", metrics.Drains, v)
	}
}
