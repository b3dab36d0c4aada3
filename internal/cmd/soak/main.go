// Command soak runs an xds.GRPCServer under steady RPC load while its
// control plane changes the configuration every second, and fails if any
// RPC fails or if heap or goroutines grow after a warm-up. It is a
// benchmark-style program, not a CI test (see docs/testing.md):
//
//	go run ./internal/cmd/soak -duration 15m
//
// Everything runs in one process on 127.0.0.1: an embedded go-control-plane
// management server (controlplane.go), the xDS server (the
// grpc.testing.TestService) and the load's gRPC clients. Each client runs a
// unary worker (UnaryCall with a payload, checked) and a streaming worker
// (FullDuplexCall: 10 echoed messages, then the client closes and the
// stream must end OK). Every -change the control plane pushes one change,
// in turn: a Listener change (a filter chain no connection matches comes or
// goes; the main chain's connections stay), an RDS change (a new route
// ahead of the serving one; applied to open connections) and an RBAC change
// (a new RBAC policy in the main chain, which never denies the load's RPCs;
// the chain's connections are drained and the clients reconnect).
//
// Once per -report it prints the RPCs done and failed, the heap in use after
// a GC (runtime.MemStats.HeapInuse; the lowest of the samples taken every
// second since the previous report), the goroutines (the lowest count
// sampled every 100 ms since the previous report), the changes pushed and
// the ACKs/NACKs received. Lowest samples are the floor a leak raises;
// connections being drained while their replacements are up, and RPCs in
// flight, do not count as growth.
//
// It exits 1 if any RPC failed, if the server NACKed a push, or if, between
// the first report at or after -warmup and the last report, the heap grew by
// more than -max-heap-growth percent plus 512 KiB or the goroutines by more
// than -max-goroutine-growth percent plus 5 (the absolute slack keeps short
// runs with a small heap from failing on noise).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof" // served by -pprof
	"os"
	"os/signal"
	"runtime"
	"time"
)

func main() {
	cfg := defaultConfig()
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the load runs")
	flag.DurationVar(&cfg.Report, "report", cfg.Report, "interval between reports")
	flag.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "the first report at or after this time is the baseline for growth checks")
	flag.DurationVar(&cfg.Change, "change", cfg.Change, "interval between configuration changes")
	flag.IntVar(&cfg.Clients, "clients", cfg.Clients, "gRPC clients, each with one unary and one streaming worker")
	flag.DurationVar(&cfg.Pause, "pause", cfg.Pause, "pause of each worker between two RPCs")
	flag.Float64Var(&cfg.MaxHeapGrowth, "max-heap-growth", cfg.MaxHeapGrowth, "allowed heap growth after warm-up, percent (plus 512 KiB)")
	flag.Float64Var(&cfg.MaxGoroutineGrowth, "max-goroutine-growth", cfg.MaxGoroutineGrowth, "allowed goroutine growth after warm-up, percent (plus 5)")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060), to profile a long run")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "soak: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *pprofAddr != "" {
		// The default rate samples one allocation per 512 KiB: too coarse
		// to see a few hundred KiB of slow growth in a heap of a few MiB.
		runtime.MemProfileRate = 4 << 10
		lis, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "soak: -pprof: %v\n", err)
			os.Exit(2)
		}
		fmt.Printf("soak: pprof on http://%s/debug/pprof/\n", lis.Addr())
		go http.Serve(lis, nil) // lives as long as the process
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "soak FAILED: %v\n", err)
		stop()
		os.Exit(1)
	}
	fmt.Println("soak PASSED")
}

// config is the soak's parameters; see the flags in main.
type config struct {
	Duration, Report, Warmup, Change time.Duration
	Clients                          int
	Pause                            time.Duration
	MaxHeapGrowth                    float64 // percent
	MaxGoroutineGrowth               float64 // percent
}

func defaultConfig() config {
	return config{
		Duration:           15 * time.Minute,
		Report:             time.Minute,
		Warmup:             2 * time.Minute,
		Change:             time.Second,
		Clients:            4,
		Pause:              2 * time.Millisecond,
		MaxHeapGrowth:      5,
		MaxGoroutineGrowth: 5,
	}
}

// Absolute slack added to the percentage thresholds.
const (
	heapSlack      = 512 << 10
	goroutineSlack = 5
)

func (c config) validate() error {
	switch {
	case c.Duration <= 0 || c.Report <= 0 || c.Change <= 0:
		return errors.New("-duration, -report and -change must be positive")
	case c.Clients < 1:
		return errors.New("-clients must be at least 1")
	case c.Pause < 0 || c.Warmup < 0 || c.MaxHeapGrowth < 0 || c.MaxGoroutineGrowth < 0:
		return errors.New("-pause, -warmup and the growth limits must not be negative")
	}
	return nil
}

// report is one line of the soak's output.
type report struct {
	elapsed    time.Duration
	ok, failed int64
	heapInuse  uint64
	goroutines int // lowest sample since the previous report
	pushes     [3]int64
	acks       int64
	nacks      int64
	conns      int64
}

func (r report) String() string {
	return fmt.Sprintf("[%8s] rpcs ok=%d failed=%d | heap_inuse=%.2fMiB goroutines=%d | pushes lds=%d rds=%d rbac=%d acks=%d nacks=%d | conns opened=%d",
		r.elapsed.Round(time.Second), r.ok, r.failed, float64(r.heapInuse)/(1<<20), r.goroutines,
		r.pushes[0], r.pushes[1], r.pushes[2], r.acks, r.nacks, r.conns)
}

// checkGrowth compares the last report with the baseline.
func checkGrowth(cfg config, base, last report) error {
	var errs []error
	if limit := float64(base.heapInuse)*(1+cfg.MaxHeapGrowth/100) + heapSlack; float64(last.heapInuse) > limit {
		errs = append(errs, fmt.Errorf("heap in use grew from %.2f MiB (at %v) to %.2f MiB (at %v), more than %.0f%% + 512 KiB",
			float64(base.heapInuse)/(1<<20), base.elapsed.Round(time.Second), float64(last.heapInuse)/(1<<20), last.elapsed.Round(time.Second), cfg.MaxHeapGrowth))
	}
	if limit := float64(base.goroutines)*(1+cfg.MaxGoroutineGrowth/100) + goroutineSlack; float64(last.goroutines) > limit {
		errs = append(errs, fmt.Errorf("goroutines grew from %d (at %v) to %d (at %v), more than %.0f%% + %d",
			base.goroutines, base.elapsed.Round(time.Second), last.goroutines, last.elapsed.Round(time.Second), cfg.MaxGoroutineGrowth, goroutineSlack))
	}
	return errors.Join(errs...)
}

// run runs the soak as cfg says, printing to out, and returns an error if
// it failed (or ctx ended first).
func run(ctx context.Context, cfg config, out io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	e, err := startEnv(ctx, cfg, out)
	if err != nil {
		return err
	}
	defer e.stop()
	return e.soak(ctx)
}
