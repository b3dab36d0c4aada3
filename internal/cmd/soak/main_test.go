package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// TestRun runs a 3-second soak with a report every second and checks that
// it passes (no failed RPC, no NACK, no growth) and printed its reports.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := defaultConfig()
	cfg.Duration = 3 * time.Second
	cfg.Report = time.Second
	cfg.Warmup = time.Second
	cfg.Clients = 2
	// Three seconds are no steady state (the first drain comes at 3 s, and
	// -race inflates the heap): only gross growth fails here. The default
	// thresholds are TestCheckGrowth's business and the real run's.
	cfg.MaxHeapGrowth = 200
	cfg.MaxGoroutineGrowth = 50
	var out strings.Builder
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	got := out.String()
	reports := regexp.MustCompile(`(?m)^\[\s*\d+s\] rpcs ok=[1-9]\d* failed=0 \| heap_inuse=[\d.]+MiB goroutines=\d+ \| pushes lds=\d+ rds=\d+ rbac=\d+ acks=\d+ nacks=0 \| conns opened=\d+$`).FindAllString(got, -1)
	if len(reports) < 2 {
		t.Errorf("got %d report lines, want at least 2; output:\n%s", len(reports), got)
	}
	if !strings.Contains(got, "soak: growth from ") {
		t.Errorf("the output has no growth check; output:\n%s", got)
	}
}

// TestCheckGrowth checks the growth thresholds.
func TestCheckGrowth(t *testing.T) {
	cfg := defaultConfig()
	base := report{heapInuse: 10 << 20, goroutines: 100}
	for _, tc := range []struct {
		name string
		last report
		fail bool
	}{
		{"same", base, false},
		{"heap within 5% + 512 KiB", report{heapInuse: 10<<20 + 1<<20, goroutines: 100}, false},
		{"heap beyond", report{heapInuse: 11<<20 + 1<<10, goroutines: 100}, true},
		{"goroutines within 5% + 5", report{heapInuse: 10 << 20, goroutines: 110}, false},
		{"goroutines beyond", report{heapInuse: 10 << 20, goroutines: 111}, true},
	} {
		if err := checkGrowth(cfg, base, tc.last); (err != nil) != tc.fail {
			t.Errorf("%s: checkGrowth = %v, want failure %v", tc.name, err, tc.fail)
		}
	}
}
