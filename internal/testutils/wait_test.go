package testutils

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMain(m *testing.M) { VerifyNoLeaks(m) }

// fatalTB records Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with f on a goroutine of its own, so that Fatalf can end it.
func (f *fatalTB) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

func TestWaitForReturnsOnceTrue(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	WaitFor(Context(t), t, "n = 3", func() error {
		if got := n.Load(); got != 3 {
			return fmt.Errorf("n = %d", got)
		}
		return nil
	})
}

func TestWaitForFailsSayingWhat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	f := &fatalTB{TB: t}
	f.run(func() {
		WaitFor(ctx, f, "the impossible", func() error { return errors.New("still possible") })
	})
	if !strings.Contains(f.msg, "the impossible") || !strings.Contains(f.msg, "still possible") {
		t.Fatalf("WaitFor failed with %q, want what it waited for and the last state", f.msg)
	}
}

func TestContextEndsAtCleanup(t *testing.T) {
	var ctx context.Context
	t.Run("inner", func(t *testing.T) {
		ctx = Context(t)
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > DefaultTimeout {
			t.Errorf("Context deadline = %v, %v; want one within %v", d, ok, DefaultTimeout)
		}
	})
	if ctx.Err() == nil {
		t.Fatal("Context not cancelled when its test ended")
	}
}

func TestCheckGoroutinesNamesTheLeak(t *testing.T) {
	stop := make(chan struct{})
	// A subtest's cleanup runs when the subtest ends, before Run returns;
	// the failure it reports is the subtest's, so check it from a fake.
	f := &recordTB{}
	t.Run("leaky", func(t *testing.T) {
		f.TB = t
		CheckGoroutines(f)
		go func() { <-stop }()
	})
	close(stop)
	if !strings.Contains(f.errs, "still running") {
		t.Fatalf("CheckGoroutines reported %q, want the leaked goroutine", f.errs)
	}
}

// recordTB records Errorf instead of failing the test.
type recordTB struct {
	testing.TB
	errs string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Errorf(format string, args ...any) {
	r.errs += fmt.Sprintf(format, args...)
}
