package node

// Running client.js and reading its JSON lines.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// rpcLine is one line of client.js's output: an RPC, or the summary of a
// loop.
type rpcLine struct {
	Seq               int               `json:"seq"`
	Method            string            `json:"method"`
	Code              codes.Code        `json:"code"`
	Status            string            `json:"status"`
	Details           string            `json:"details"`
	TransportSecurity string            `json:"transport_security"`
	ServerCertSHA256  string            `json:"server_cert_sha256"`
	ServerCertCN      string            `json:"server_cert_cn"`
	Reply             map[string]string `json:"reply"`
	Summary           *loopSummary      `json:"summary"`
}

func (l rpcLine) String() string {
	return fmt.Sprintf("%s #%d: %v (%q)", l.Method, l.Seq, l.Code, l.Details)
}

// loopSummary is the last line of `client.js loop`.
type loopSummary struct {
	OK      int     `json:"ok"`
	Failed  int     `json:"failed"`
	Seconds float64 `json:"seconds"`
}

// nodeClient runs client.js with one bootstrap.
type nodeClient struct {
	bin, dir  string // the node binary; the directory of client.js
	bootstrap string // path of the bootstrap file (GRPC_XDS_BOOTSTRAP)
}

// command is `node client.js args...` with the client's bootstrap, killed
// when ctx ends.
func (c *nodeClient) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"client.js"}, args...)...)
	cmd.Dir = c.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRPC_XDS_BOOTSTRAP") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GRPC_XDS_BOOTSTRAP="+c.bootstrap)
	// Once node is killed, do not wait long for its pipes.
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// calls runs `client.js calls` for methods and returns its lines, one per
// method, in order. It fails the test if node fails or prints anything else.
func (c *nodeClient) calls(ctx context.Context, t *testing.T, methods ...string) []rpcLine {
	t.Helper()
	var stderr bytes.Buffer
	cmd := c.command(ctx, "calls", targetName, strings.Join(methods, ","))
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("node client.js calls %s: %v, exit %v", strings.Join(methods, ","), time.Since(start).Round(time.Millisecond), cmd.ProcessState)
	if err != nil {
		t.Fatalf("node client.js calls: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.Bytes())
	}
	lines := parseLines(t, out)
	if len(lines) != len(methods) {
		t.Fatalf("node client.js printed %d lines, want %d (one per RPC):\n%s\nstderr:\n%s", len(lines), len(methods), out, stderr.Bytes())
	}
	for i, l := range lines {
		if l.Method != methods[i] {
			t.Fatalf("line %d is about %q, want %q:\n%s", i+1, l.Method, methods[i], out)
		}
	}
	return lines
}

func parseLines(t *testing.T, out []byte) []rpcLine {
	t.Helper()
	var lines []rpcLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		lines = append(lines, parseLine(t, sc.Bytes()))
	}
	return lines
}

func parseLine(t *testing.T, b []byte) rpcLine {
	t.Helper()
	var l rpcLine
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("client.js printed %q, not a result line: %v", b, err)
	}
	return l
}

// nodeLoop is a running `client.js loop`.
type nodeLoop struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
	done   chan struct{} // closed when stdout reached EOF

	mu      sync.Mutex
	lines   []rpcLine     // guarded by mu; every line read so far
	added   chan struct{} // guarded by mu; closed and replaced when lines grows
	readErr error         // guarded by mu; why reading stopped early
}

// loop starts `client.js loop` with workers concurrent workers. The loop
// runs until stop (or until ctx ends, which kills node).
func (c *nodeClient) loop(ctx context.Context, t *testing.T, workers int) *nodeLoop {
	t.Helper()
	l := &nodeLoop{t: t, stderr: &lockedBuffer{}, done: make(chan struct{}), added: make(chan struct{})}
	l.cmd = c.command(ctx, "loop", targetName, fmt.Sprintf("--workers=%d", workers), fmt.Sprintf("--max-seconds=%d", int(testTimeout/time.Second)))
	l.cmd.Stderr = l.stderr
	stdout, err := l.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if l.stdin, err = l.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Start(); err != nil {
		t.Fatalf("starting node client.js loop: %v", err)
	}
	// The reader never blocks on the test: node writes its stdout
	// synchronously, so a full pipe would stall its RPCs.
	go l.read(stdout)
	t.Cleanup(l.kill)
	return l
}

func (l *nodeLoop) read(stdout io.Reader) {
	defer close(l.done)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var line rpcLine
		err := json.Unmarshal(sc.Bytes(), &line)
		l.mu.Lock()
		if err != nil {
			l.readErr = fmt.Errorf("client.js printed %q, not a result line: %v", sc.Bytes(), err)
		} else {
			l.lines = append(l.lines, line)
			close(l.added)
			l.added = make(chan struct{})
		}
		l.mu.Unlock()
	}
	if err := sc.Err(); err != nil {
		l.mu.Lock()
		l.readErr = err
		l.mu.Unlock()
	}
	io.Copy(io.Discard, stdout) // after a scan error, let node finish writing
}

// waitFor waits until pred, given every line so far, returns true, and
// fails the test if node ends or ctx ends before.
func (l *nodeLoop) waitFor(ctx context.Context, what string, pred func([]rpcLine) bool) {
	l.t.Helper()
	for {
		l.mu.Lock()
		ok, added, readErr := pred(l.lines), l.added, l.readErr
		l.mu.Unlock()
		switch {
		case ok:
			return
		case readErr != nil:
			l.t.Fatalf("waiting for %s: %v", what, readErr)
		}
		select {
		case <-added:
		case <-l.done:
			l.mu.Lock()
			ok = pred(l.lines)
			l.mu.Unlock()
			if !ok {
				l.t.Fatalf("client.js ended before %s; stderr:\n%s", what, l.stderr.String())
			}
			return
		case <-ctx.Done():
			l.t.Fatalf("timeout waiting for %s", what)
		}
	}
}

// stop tells the loop to end (closes its stdin), waits for node to exit
// and returns every RPC line and the summary.
func (l *nodeLoop) stop(ctx context.Context) ([]rpcLine, loopSummary) {
	l.t.Helper()
	l.stdin.Close()
	select {
	case <-l.done:
	case <-ctx.Done():
		l.t.Fatal("client.js loop did not end after its stdin was closed")
	}
	if err := l.cmd.Wait(); err != nil {
		l.t.Fatalf("client.js loop: %v; stderr:\n%s", err, l.stderr.String())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.readErr != nil {
		l.t.Fatal(l.readErr)
	}
	n := len(l.lines)
	if n == 0 || l.lines[n-1].Summary == nil {
		l.t.Fatalf("client.js loop printed no summary line last; stderr:\n%s", l.stderr.String())
	}
	return l.lines[:n-1], *l.lines[n-1].Summary
}

// kill ends node if the test ended without stop, and waits for it.
func (l *nodeLoop) kill() {
	if l.cmd.ProcessState != nil {
		return
	}
	l.cmd.Process.Kill()
	<-l.done
	l.cmd.Wait()
}

// lockedBuffer is a bytes.Buffer safe for the writes of exec's copying
// goroutine and reads of the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
