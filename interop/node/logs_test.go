package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/grpclog"
)

// warningRecorder is a grpclog.LoggerV2 (and DepthLoggerV2) that keeps the
// warnings it is given and drops everything else but fatal messages.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string // guarded by mu
}

// recordWarnings makes a warningRecorder the process's gRPC logger until
// the end of the test. Call it before anything that logs starts: the cleanup
// that restores the default logger then runs after they all stopped
// (grpclog's logger must not be swapped while other goroutines log), and
// tests that call it must not be parallel.
func recordWarnings(t *testing.T) *warningRecorder {
	r := &warningRecorder{}
	grpclog.SetLoggerV2(r)
	t.Cleanup(func() { grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr)) })
	return r
}

func (r *warningRecorder) add(s string) {
	r.mu.Lock()
	r.warnings = append(r.warnings, s)
	r.mu.Unlock()
}

// find returns the first warning that contains every one of words.
func (r *warningRecorder) find(words ...string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
next:
	for _, w := range r.warnings {
		for _, word := range words {
			if !strings.Contains(w, word) {
				continue next
			}
		}
		return w, true
	}
	return "", false
}

// waitFor waits for a warning that contains every one of words and returns
// it, failing the test if there is none before ctx ends.
func (r *warningRecorder) waitFor(ctx context.Context, t *testing.T, words ...string) string {
	t.Helper()
	for {
		if w, ok := r.find(words...); ok {
			return w
		}
		if ctx.Err() != nil {
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("no warning containing %q was logged; warnings: %q", words, r.warnings)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *warningRecorder) Info(...any)                         {}
func (r *warningRecorder) Infoln(...any)                       {}
func (r *warningRecorder) Infof(string, ...any)                {}
func (r *warningRecorder) Warning(args ...any)                 { r.add(fmt.Sprint(args...)) }
func (r *warningRecorder) Warningln(args ...any)               { r.add(fmt.Sprint(args...)) }
func (r *warningRecorder) Warningf(format string, args ...any) { r.add(fmt.Sprintf(format, args...)) }
func (r *warningRecorder) Error(...any)                        {}
func (r *warningRecorder) Errorln(...any)                      {}
func (r *warningRecorder) Errorf(string, ...any)               {}
func (r *warningRecorder) Fatal(args ...any)                   { panic(fmt.Sprint(args...)) }
func (r *warningRecorder) Fatalln(args ...any)                 { panic(fmt.Sprint(args...)) }
func (r *warningRecorder) Fatalf(format string, args ...any)   { panic(fmt.Sprintf(format, args...)) }
func (r *warningRecorder) V(int) bool                          { return false }
func (r *warningRecorder) InfoDepth(int, ...any)               {}
func (r *warningRecorder) WarningDepth(_ int, args ...any)     { r.add(fmt.Sprint(args...)) }
func (r *warningRecorder) ErrorDepth(int, ...any)              {}
func (r *warningRecorder) FatalDepth(_ int, args ...any)       { panic(fmt.Sprint(args...)) }
