package e2e_test

import (
	"context"
	"fmt"
	"net"
	"sort"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// BenchmarkConfigPush measures the configuration path of this library and
// of grpc-go's xDS server side by side, each with a management server of
// its own in this process: one operation is the Listener deleted (until the
// NOT_SERVING callback) and published again (until the SERVING callback),
// the signal both implementations give for "applied". It reports the
// latency of the add (add-p50-ns, add-p99-ns), and the CPU of the process
// per operation (cpu-ns/op; the management servers' share is the same for
// both implementations, so compare the ratio).
//
//	go test -run '^$' -bench BenchmarkConfigPush -benchtime 200x ./e2e
func BenchmarkConfigPush(b *testing.B) {
	for _, impl := range []xdsImpl{thisLibrary, grpcGoXDS} {
		for _, tc := range []struct {
			name         string
			chains, rbac int
		}{
			{"1chain", 1, 0},
			{"1000chains", 1000, 0},
			{"1000chains-rbac", 1000, 10},
		} {
			b.Run(impl.name+"-"+tc.name, func(b *testing.B) {
				benchConfigPush(b, impl, tc.chains, tc.rbac)
			})
		}
	}
}

func benchConfigPush(b *testing.B, impl xdsImpl, chains, rbacPolicies int) {
	ms := e2e.StartManagementServer(b, e2e.ManagementServerOptions{})
	modes := make(chan bool, 16)
	addr, stop := serveBench(b, impl, ms, "bench-config-"+impl.name, func(up bool) { modes <- up })
	defer stop()
	l := benchListener(uint32(addr.(*net.TCPAddr).Port), chains, 1, rbacPolicies)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	push := func(ls []*listenerpb.Listener, wantUp bool) time.Duration {
		start := time.Now()
		if err := ms.Update(ctx, e2e.Resources{Listeners: ls}); err != nil {
			b.Fatal(err)
		}
		for {
			select {
			case up := <-modes:
				if up == wantUp {
					return time.Since(start)
				}
			case <-ctx.Done():
				b.Fatalf("%s: no serving-mode change to serving=%v", impl.name, wantUp)
			}
		}
	}
	push([]*listenerpb.Listener{l}, true) // warm up: first Listener, connection to the management server
	adds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	startCPU := cpuTime(b)
	for b.Loop() {
		push([]*listenerpb.Listener{}, false)
		adds = append(adds, push([]*listenerpb.Listener{l}, true))
	}
	cpu := cpuTime(b) - startCPU
	b.StopTimer()
	sort.Slice(adds, func(i, j int) bool { return adds[i] < adds[j] })
	b.ReportMetric(float64(adds[len(adds)/2].Nanoseconds()), "add-p50-ns")
	b.ReportMetric(float64(adds[len(adds)*99/100].Nanoseconds()), "add-p99-ns")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(len(adds)), "cpu-ns/op")
}

// BenchmarkFleetPush measures the configuration path per server in a fleet:
// 50 servers of one implementation in this process, each with an xDS client
// of its own (its own node ID and bootstrap), one management server. One
// operation deletes every server's Listener (until every NOT_SERVING
// callback) and publishes them again (until every SERVING callback). It
// reports the CPU of the process per server and operation
// (cpu-ns/server/op; the management server's share is the same for both
// implementations) and the time until the last server serves again
// (converged-p50-ns).
//
// In the "same" case every Listener comes back with the bytes it had: this
// library's xDS client finds them unchanged and does not decode them again,
// grpc-go's decodes them. In the "changed" case the RBAC config of every
// Listener changes on every publication (10 or 11 policies, serialized for
// each server apart, as the shared bench's fleet scenario does), so both
// decode and apply a new configuration.
//
//	go test -run '^$' -bench BenchmarkFleetPush -benchtime 20x ./e2e
func BenchmarkFleetPush(b *testing.B) {
	for _, changed := range []bool{false, true} {
		name := "same"
		if changed {
			name = "changed"
		}
		for _, impl := range []xdsImpl{thisLibrary, grpcGoXDS} {
			b.Run(name+"/"+impl.name, func(b *testing.B) { benchFleetPush(b, impl, 50, changed) })
		}
	}
}

func benchFleetPush(b *testing.B, impl xdsImpl, n int, changed bool) {
	ms := e2e.StartManagementServer(b, e2e.ManagementServerOptions{})
	modes := make(chan bool, 4*n)
	var listeners, others []*listenerpb.Listener
	for i := range n {
		addr, stop := serveBench(b, impl, ms, fmt.Sprintf("fleet-%s-%d", impl.name, i), func(up bool) { modes <- up })
		b.Cleanup(stop)
		port := uint32(addr.(*net.TCPAddr).Port)
		listeners = append(listeners, benchListener(port, 1, 1, 10))
		others = append(others, benchListener(port, 1, 1, 11))
	}
	if !changed {
		others = listeners
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	push := func(ls []*listenerpb.Listener, wantUp bool) time.Duration {
		start := time.Now()
		if err := ms.Update(ctx, e2e.Resources{Listeners: ls}); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < n; {
			select {
			case up := <-modes:
				if up == wantUp {
					got++
				}
			case <-ctx.Done():
				b.Fatalf("%s: %d of %d servers changed to serving=%v", impl.name, got, n, wantUp)
			}
		}
		return time.Since(start)
	}
	push(listeners, true)
	var converged []time.Duration
	b.ResetTimer()
	startCPU := cpuTime(b)
	for b.Loop() {
		push([]*listenerpb.Listener{}, false)
		listeners, others = others, listeners
		converged = append(converged, push(listeners, true))
	}
	cpu := cpuTime(b) - startCPU
	b.StopTimer()
	sort.Slice(converged, func(i, j int) bool { return converged[i] < converged[j] })
	b.ReportMetric(float64(converged[len(converged)/2].Nanoseconds()), "converged-p50-ns")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(len(converged)*n), "cpu-ns/server/op")
}
