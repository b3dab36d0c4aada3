package ratelimit

// The two child processes of a test: Debian's redis-server and
// envoyproxy/ratelimit, each on loopback ports the test chooses, each
// killed and waited for when the test ends.

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	commonrlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// freePort returns a loopback port no one listens on (the kernel's choice;
// closed again for the child to take).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// child is a running child process whose output is kept for the test's
// log.
type child struct {
	name string
	cmd  *exec.Cmd

	mu      sync.Mutex
	out     bytes.Buffer // guarded by mu
	readers sync.WaitGroup
	stopped bool // guarded by mu: stop ran
}

// start starts cmd, its stdout and stderr copied into c.out; ready, if not
// empty, is a line start waits for, until ctx ends.
func start(ctx context.Context, t *testing.T, name string, cmd *exec.Cmd, ready string) *child {
	t.Helper()
	c := &child{name: name, cmd: cmd}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	pw.Close() // the child holds the write end: EOF when it exits
	seen := make(chan struct{})
	c.readers.Add(1)
	go func() {
		defer c.readers.Done()
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		signalled := ready == ""
		for sc.Scan() {
			c.mu.Lock()
			c.out.Write(sc.Bytes())
			c.out.WriteByte('\n')
			c.mu.Unlock()
			if !signalled && strings.Contains(sc.Text(), ready) {
				signalled = true
				close(seen)
			}
		}
		if !signalled {
			close(seen)
		}
	}()
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, c.output())
		}
	})
	if ready != "" {
		select {
		case <-seen:
		case <-ctx.Done():
			t.Fatalf("%s did not say %q:\n%s", name, ready, c.output())
		}
		if !strings.Contains(c.output(), ready) {
			t.Fatalf("%s exited before it was ready:\n%s", name, c.output())
		}
	}
	return c
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// stop kills the process (continuing it first, should it be stopped),
// waits for it and for its output's reader; once.
func (c *child) stop() {
	c.mu.Lock()
	done := c.stopped
	c.stopped = true
	c.mu.Unlock()
	if done {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	c.readers.Wait()
}

// pause stops the process (SIGSTOP): its sockets stay open, and nothing
// answers.
func (c *child) pause(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// startRedis starts redis-server on a loopback port, with nothing saved to
// disk, and returns its address once it accepts connections.
func startRedis(ctx context.Context, t *testing.T) (string, *child) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (Debian: apt-get install redis-server): %v", err)
	}
	port := freePort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "yes")
	c := start(ctx, t, "redis-server", cmd, "Ready to accept connections")
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), c
}

// startRatelimit runs envoyproxy/ratelimit with config (its YAML, one
// domain) over the Redis at redisAddr, and returns its gRPC address once it
// answers ShouldRateLimit.
func startRatelimit(ctx context.Context, t *testing.T, redisAddr, config string) (string, *child) {
	t.Helper()
	root := t.TempDir()
	confDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcPort, httpPort, debugPort := freePort(t), freePort(t), freePort(t)
	cmd := exec.Command(ratelimitBin)
	cmd.Env = append(os.Environ(),
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(httpPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort),
	)
	c := start(ctx, t, "envoyproxy/ratelimit", cmd, "")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort))
	// Ready when it answers: one call that waits for the connection.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = rlspb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{
		Domain:      "readiness",
		Descriptors: []*commonrlpb.RateLimitDescriptor{{Entries: []*commonrlpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}},
	}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("envoyproxy/ratelimit on %s does not answer: %v\n%s", addr, err, c.output())
	}
	return addr, c
}
