package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// waitLines waits until the file at path has n lines and returns them.
func waitLines(ctx context.Context, t *testing.T, path string, n int) []string {
	t.Helper()
	for {
		b, _ := os.ReadFile(path)
		if lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"); len(b) > 0 && len(lines) >= n {
			return lines
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s does not have %d lines: %q", path, n, b)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestAccessLogFile runs the greeter with -access-log-file: each RPC is a
// line in Istio's default format (what kubectl logs shows with
// -access-log-file=/dev/stdout); after the file is moved, SIGUSR1 makes
// the greeter reopen it, as logrotate's postrotate does, and the next line
// goes to a new file at the path.
func TestAccessLogFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "access.log")
	ms, bs := managementServer(t)
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second, accessLogFile: path})
	g.publish(ctx, t, ms)
	g.hello(ctx, t)
	line := waitLines(ctx, t, path, 1)[0]
	t.Logf("access log line: %s", line)
	// [START_TIME] "METHOD PATH PROTOCOL" RESPONSE_CODE RESPONSE_FLAGS
	// RESPONSE_CODE_DETAILS CONNECTION_TERMINATION_DETAILS
	// "UPSTREAM_TRANSPORT_FAILURE_REASON" BYTES_RECEIVED BYTES_SENT DURATION
	// X-ENVOY-UPSTREAM-SERVICE-TIME "X-FORWARDED-FOR" "USER-AGENT"
	// "X-REQUEST-ID" ":AUTHORITY" "UPSTREAM_HOST" UPSTREAM_CLUSTER_RAW
	// UPSTREAM_LOCAL_ADDRESS DOWNSTREAM_LOCAL_ADDRESS
	// DOWNSTREAM_REMOTE_ADDRESS REQUESTED_SERVER_NAME ROUTE_NAME
	want := regexp.MustCompile(fmt.Sprintf(`^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "POST /grpc\.testing\.TestService/UnaryCall HTTP/2" 200 - via_upstream - "-" 14 21 \d+ - "-" "grpc-go/%s" "-" "%s" "-" - - %s 127\.0\.0\.1:\d+ - \S+$`,
		regexp.QuoteMeta(grpc.Version), regexp.QuoteMeta(g.addr.String()), regexp.QuoteMeta(g.addr.String())))
	if !want.MatchString(line) {
		t.Errorf("access log line:\n%s\ndoes not match\n%s", line, want)
	}

	// logrotate: move the file, then SIGUSR1.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(g.logs.String(), "SIGUSR1: reopened the access log "+path) {
		select {
		case <-ctx.Done():
			t.Fatalf("the greeter did not reopen its access log on SIGUSR1; log:\n%s", g.logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	g.hello(ctx, t)
	if got := waitLines(ctx, t, path, 1); len(got) != 1 || !want.MatchString(got[0]) {
		t.Errorf("the new file at the path has %q, want one line", got)
	}
	g.stop()
	if err := g.waitDone(ctx, t); err != nil {
		t.Fatal(err)
	}
	if old := waitLines(ctx, t, path+".1", 1); len(old) != 1 || old[0] != line {
		t.Errorf("the moved file has %q, want only the first line", old)
	}
}
