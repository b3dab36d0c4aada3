package extauthz

// Open Policy Agent with its Envoy plugin, in the test process: an OPA plugin
// manager holding policy.rego, with the plugin's envoy_ext_authz_grpc server
// (envoy.service.auth.v3.Authorization) registered and listening on
// 127.0.0.1. This is what the plugin's own binary (opa-envoy-plugin's
// cmd/opa-envoy-plugin: OPA's runtime with the plugin registered) does, less
// OPA's REST API and command line, which the test does not need.

import (
	"context"
	_ "embed"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	envoyplugin "github.com/open-policy-agent/opa-envoy-plugin/plugin"
	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

//go:embed policy.rego
var policy string

// Decision paths of policy.rego, as the plugin's "path" setting.
const (
	pathResult = "envoy/authz/result" // the test's policy
	pathEcho   = "envoy/authz/echo"   // allows, and returns its input as dynamic_metadata
	// allows, and adds its input to the request as the header x-opa-input
	pathEchoHeader = "envoy/authz/echo_header"
)

// opaServer is one running OPA with the Envoy plugin.
type opaServer struct {
	// Addr is the plugin's gRPC address, "127.0.0.1:port".
	Addr string

	m        *plugins.Manager
	stopOnce sync.Once
}

// startOPA starts OPA with policy.rego and the Envoy plugin answering with
// the decision at path, on a loopback port, and waits until the plugin
// listens. It stops when the test ends.
//
// The plugin listens on the address of its configuration and does not say
// which port it got, so ":0" cannot be used: startOPA takes a free port from
// the kernel, closes it and gives it to the plugin, and starts over with
// another port if the plugin could not listen on it (another process took it
// in between).
func startOPA(t *testing.T, path string) *opaServer {
	t.Helper()
	var lastErr error
	for range 3 {
		o, err := tryStartOPA(t, path)
		if err == nil {
			t.Cleanup(o.Stop)
			return o
		}
		lastErr = err
		t.Logf("starting OPA: %v; trying another port", err)
	}
	t.Fatalf("starting OPA: %v", lastErr)
	return nil
}

func tryStartOPA(t *testing.T, path string) (*opaServer, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()

	store := inmem.New()
	if err := storage.Txn(ctx, store, storage.WriteParams, func(txn storage.Transaction) error {
		return store.UpsertPolicy(ctx, txn, "policy.rego", []byte(policy))
	}); err != nil {
		return nil, fmt.Errorf("storing the policy: %w", err)
	}

	logger := newOPALogger(t)
	m, err := plugins.New([]byte("{}"), "extauthz-interop", store, plugins.Logger(logger), plugins.ConsoleLogger(logger))
	if err != nil {
		return nil, fmt.Errorf("plugins.New: %w", err)
	}

	// The plugin's configuration, as under plugins.envoy_ext_authz_grpc in
	// OPA's configuration file.
	var factory envoyplugin.Factory
	cfg, err := factory.Validate(m, fmt.Appendf(nil, `{"addr": %q, "path": %q}`, addr, path))
	if err != nil {
		return nil, fmt.Errorf("the plugin's configuration: %w", err)
	}
	m.Register(envoyplugin.PluginName, factory.New(m, cfg))

	// The plugin reports OK once it listens; if it cannot listen it logs an
	// error and its goroutine ends.
	ready := make(chan struct{})
	var readyOnce sync.Once
	m.RegisterPluginStatusListener("extauthz-interop", func(status map[string]*plugins.Status) {
		if s := status[envoyplugin.PluginName]; s != nil && s.State == plugins.StateOK {
			readyOnce.Do(func() { close(ready) })
		}
	})

	o := &opaServer{Addr: addr, m: m}
	if err := m.Start(ctx); err != nil {
		o.Stop()
		return nil, fmt.Errorf("starting the plugin manager: %w", err)
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-ready:
		return o, nil
	case err := <-logger.errs:
		o.Stop()
		return nil, fmt.Errorf("the plugin did not start on %s: %s", addr, err)
	case <-timer.C:
		o.Stop()
		return nil, fmt.Errorf("the plugin did not listen on %s within 10s", addr)
	}
}

// Stop stops the plugin (a graceful stop of its gRPC server) and the
// manager. It may be called more than once.
func (o *opaServer) Stop() {
	o.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		o.m.Stop(ctx)
	})
}

// freeLoopbackAddr returns "127.0.0.1:port" with a port nothing listened on
// a moment ago.
func freeLoopbackAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		return "", err
	}
	return addr, nil
}

// opaLogger is OPA's logger for a test: it writes to the test's log and
// hands the plugin's errors to errs (without blocking).
type opaLogger struct {
	t      *testing.T
	fields map[string]any
	errs   chan string

	mu    *sync.Mutex
	ended *bool // the test ended: t.Logf must not be called any more
	level logging.Level
}

func newOPALogger(t *testing.T) *opaLogger {
	l := &opaLogger{t: t, errs: make(chan string, 10), mu: &sync.Mutex{}, ended: new(bool), level: logging.Info}
	t.Cleanup(func() {
		l.mu.Lock()
		*l.ended = true
		l.mu.Unlock()
	})
	return l
}

func (l *opaLogger) log(level, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if len(l.fields) > 0 {
		var b strings.Builder
		for k, v := range l.fields {
			fmt.Fprintf(&b, " %s=%v", k, v)
		}
		msg += b.String()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !*l.ended {
		l.t.Logf("opa %s: %s", level, msg)
	}
}

func (l *opaLogger) Debug(format string, a ...any) {
	if l.level >= logging.Debug {
		l.log("debug", format, a...)
	}
}

func (l *opaLogger) Info(format string, a ...any) {
	if l.level >= logging.Info {
		l.log("info", format, a...)
	}
}

func (l *opaLogger) Warn(format string, a ...any) { l.log("warn", format, a...) }

func (l *opaLogger) Error(format string, a ...any) {
	l.log("error", format, a...)
	select {
	case l.errs <- fmt.Sprintf(format, a...) + fmt.Sprint(l.fields):
	default:
	}
}

func (l *opaLogger) WithFields(fields map[string]any) logging.Logger {
	n := *l
	n.fields = make(map[string]any, len(l.fields)+len(fields))
	for k, v := range l.fields {
		n.fields[k] = v
	}
	for k, v := range fields {
		n.fields[k] = v
	}
	return &n
}

func (l *opaLogger) GetLevel() logging.Level   { return l.level }
func (l *opaLogger) SetLevel(lv logging.Level) { l.level = lv }
