package testutils

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/grpclog"
)

// Logs records every line gRPC's loggers (grpclog, and so this module's
// component loggers) write in a test binary, prefixed with its level ("I: ",
// "W: ", "E: "), and still prints errors to stderr. Install it once, in
// TestMain, before any test starts: grpclog's logger is a process-wide value
// that cannot be swapped safely while other goroutines log (grpc-go's own
// goroutines can outlive a test). Tests then read the lines that concern
// them by content, such as a listener's address.
//
// Info lines are recorded only when Verbose is set; V(2) is then true.
type Logs struct {
	mu    sync.Mutex
	lines []string
	// Verbose is read at install time.
	verbose bool
}

// InstallLogs makes a new Logs the gRPC logger of the process and returns
// it. verbose records info lines and turns verbosity 2 on.
func InstallLogs(verbose bool) *Logs {
	l := &Logs{verbose: verbose}
	grpclog.SetLoggerV2(l)
	return l
}

func (l *Logs) add(level string, args ...any) {
	line := level + ": " + fmt.Sprint(args...)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	if level == "E" {
		fmt.Fprintln(os.Stderr, line)
	}
}

// Count returns how many lines start with level ("I", "W" or "E"; "" for
// any) and contain every one of words.
func (l *Logs) Count(level string, words ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.lines {
		if level != "" && !strings.HasPrefix(line, level+": ") {
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

// Matching returns the lines that contain every one of words.
func (l *Logs) Matching(words ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, w := range words {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// WaitCount waits until Count(level, words...) >= n, failing t when ctx
// ends first.
func (l *Logs) WaitCount(ctx context.Context, t testing.TB, n int, level string, words ...string) {
	t.Helper()
	WaitFor(ctx, t, fmt.Sprintf("%d %q line(s) containing %q", n, level, words), func() error {
		if got := l.Count(level, words...); got < n {
			return fmt.Errorf("%d such lines; lines with %q: %q", got, words[:min(1, len(words))], l.Matching(words[:min(1, len(words))]...))
		}
		return nil
	})
}

func (l *Logs) Info(args ...any) {
	if l.verbose {
		l.add("I", args...)
	}
}
func (l *Logs) Infoln(args ...any)             { l.Info(args...) }
func (l *Logs) Infof(f string, args ...any)    { l.Info(fmt.Sprintf(f, args...)) }
func (l *Logs) Warning(args ...any)            { l.add("W", args...) }
func (l *Logs) Warningln(args ...any)          { l.add("W", args...) }
func (l *Logs) Warningf(f string, args ...any) { l.add("W", fmt.Sprintf(f, args...)) }
func (l *Logs) Error(args ...any)              { l.add("E", args...) }
func (l *Logs) Errorln(args ...any)            { l.add("E", args...) }
func (l *Logs) Errorf(f string, args ...any)   { l.add("E", fmt.Sprintf(f, args...)) }
func (l *Logs) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (l *Logs) Fatalln(args ...any)            { panic(fmt.Sprint(args...)) }
func (l *Logs) Fatalf(f string, args ...any)   { panic(fmt.Sprintf(f, args...)) }
func (l *Logs) V(level int) bool               { return l.verbose && level <= 2 }
func (l *Logs) InfoDepth(_ int, args ...any)   { l.Info(args...) }
func (l *Logs) WarningDepth(_ int, args ...any) {
	l.add("W", args...)
}
func (l *Logs) ErrorDepth(_ int, args ...any) { l.add("E", args...) }
func (l *Logs) FatalDepth(_ int, args ...any) { panic(fmt.Sprint(args...)) }

var _ grpclog.DepthLoggerV2 = (*Logs)(nil)

var (
	runNamesMu sync.Mutex
	runNames   = map[string]int{}
)

// RunName returns t's name with "/" replaced by "-", made unique in the
// test binary: a test run again (go test -count N) gets "-2", "-3", and so
// on. Tests pick their lines of the process-wide log by names such as an
// xDS node ID built from it, which must not match an earlier run's lines.
func RunName(t testing.TB) string {
	name := strings.ReplaceAll(t.Name(), "/", "-")
	runNamesMu.Lock()
	defer runNamesMu.Unlock()
	runNames[name]++
	if n := runNames[name]; n > 1 {
		return fmt.Sprintf("%s-%d", name, n)
	}
	return name
}
