package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// envRequirePrometheus makes the Prometheus test fail, instead of skip,
// when the prometheus program is missing (CI sets it).
const envRequirePrometheus = "XDS_REQUIRE_PROMETHEUS"

// prometheusServer is a prometheus process the test started.
type prometheusServer struct {
	url string // http://127.0.0.1:port
	log *syncBuffer
}

// startPrometheus starts Debian's prometheus (the prometheus program on
// PATH) on a loopback port, with a configuration written here: it scrapes
// http://target/metrics every second, keeps its data in a temporary
// directory, and writes nowhere else (no remote write, no alerting). It is
// stopped at the test's end. Without the program the test is skipped,
// unless XDS_REQUIRE_PROMETHEUS is set.
func startPrometheus(ctx context.Context, t *testing.T, target string) *prometheusServer {
	t.Helper()
	bin := prometheusBinary(t)
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: greeter
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, target)
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	// A free loopback port: Prometheus does not say which one it took
	// when given port 0.
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := &prometheusServer{url: "http://" + addr, log: &syncBuffer{}}
	cmd := exec.Command(bin,
		"--config.file="+configFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// SIGTERM: Prometheus shuts down cleanly; SIGKILL if it does not
		// within 10s.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("prometheus did not stop on SIGTERM within 10s; log:\n%s", p.log.String())
		}
	})
	pollPrometheus(ctx, t, "prometheus to be ready", func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prometheus exited: %v; log:\n%s", err, p.log.String())
		default:
		}
		resp, err := promClient.Get(p.url + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
	return p
}

// prometheusBinary returns the path of the prometheus program, or skips
// the test without it (fails with XDS_REQUIRE_PROMETHEUS set).
func prometheusBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv(envRequirePrometheus) != "" {
			t.Fatalf("%s is set and prometheus is not installed: %v (Debian: apt-get install prometheus)", envRequirePrometheus, err)
		}
		t.Skipf("prometheus is not installed (Debian's prometheus package; .ci/run installs it): %v", err)
	}
	return bin
}

// pollPrometheus is testutils.WaitFor at the pace of Prometheus, which
// scrapes every second: it asks every 100ms rather than every few.
func pollPrometheus(ctx context.Context, t *testing.T, what string, cond func() error) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s: %v", what, err)
		case <-tick.C:
		}
	}
}

// promSample is one sample of an instant query's vector.
type promSample struct {
	Metric map[string]string
	Value  float64
}

// promClient is the client of Prometheus' API: each query has its own
// deadline, apart from the test's, so that a wait that times out reports
// the last answer rather than its own cancellation.
var promClient = &http.Client{Timeout: 5 * time.Second}

// query runs an instant query through Prometheus' HTTP API
// (/api/v1/query) and returns its vector.
func (p *prometheusServer) query(q string) ([]promSample, error) {
	resp, err := promClient.Get(p.url + "/api/v1/query?" + url.Values{"query": {q}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %v", body, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: %s: %s", q, r.Status, r.Error)
	}
	var out []promSample
	for _, s := range r.Data.Result {
		v, _ := s.Value[1].(string)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("sample %v: %v", s, err)
		}
		out = append(out, promSample{Metric: s.Metric, Value: f})
	}
	return out, nil
}

// istioServerP99 is the query of the "Server Request Duration" panel's P99
// of Istio's service dashboard (istio/istio
// manifests/addons/dashboards/istio-service-dashboard.json, commit
// 86c9f01fd735fb01d8192f5bcaf0d424afb7f14c), in seconds, with its
// variables $service and $__rate_interval replaced (Grafana makes the
// latter 1m with Prometheus' default 15s scrape interval).
func istioServerP99(service, rateInterval string) string {
	r := strings.NewReplacer("$service", service, "$__rate_interval", rateInterval)
	return r.Replace(`(histogram_quantile(0.99, sum(irate(istio_request_duration_milliseconds_bucket{reporter="destination",destination_service="$service"}[$__rate_interval])) by (le)) / 1000) or histogram_quantile(0.99, sum(irate(istio_request_duration_seconds_bucket{reporter="destination",destination_service="$service"}[$__rate_interval])) by (le))`)
}

// TestKialiPrometheus: a real Prometheus (Debian's) scrapes the greeter
// while three callers call it: an Envoy sidecar's header over mTLS,
// grpc-go's CSM plugin off Google Cloud over mTLS (its canonical service
// only: the caller whose series Kiali dropped before), and a plaintext
// caller without a header. Through Prometheus' HTTP API, Kiali's namespace
// graph query, with Kiali's drop rules applied to what it returns
// (kialiEdge), draws one edge per caller to the greeter; the P99 of
// Istio's service dashboard is a duration.
func TestKialiPrometheus(t *testing.T) {
	prometheusBinary(t) // skip early without it
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pki := newMeshPKI(t)
	md := startMetadataStandIn(t)
	csm := csmCallers(ctx, t, pki, md, false, 1)[0][slices.Index(connKinds, connMTLS)]
	ms, bs := managementServerFor(t, pilotAgentMetadata, pki.providers)
	g := runGreeter(ctx, t, greeterOptions{bootstrapFile: bs, shutdownTimeout: 5 * time.Second})
	g.publishListener(ctx, t, ms, meshListener(t, uint32(g.addr.Port)))
	g.waitServing(ctx, t)
	csm.point(g)
	callers := []*caller{newCaller(t, pki, g, hdrIstio, connMTLS), csm, newCaller(t, pki, g, hdrNone, connPlain)}
	wantEdges := []string{
		"wl_Kubernetes_client-ns_sleep -> wl_Kubernetes_default_greeter",
		// Workload unknown, canonical service csm-client: Kiali's
		// workload graph names the node by namespace.
		"svc_Kubernetes_client-ns_unknown -> wl_Kubernetes_default_greeter",
		"unknown_unknown_source -> wl_Kubernetes_default_greeter",
	}
	for _, c := range callers {
		if err := c.call(ctx); err != nil {
			t.Fatalf("%v, %v: %v", c.hdr, c.conn, err)
		}
	}

	// Traffic until the queries have their answers: rate and irate need
	// two samples of a counter that grew between them.
	traffic, stopTraffic := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopTraffic(); wg.Wait() }()
	for _, c := range callers {
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-traffic.Done():
					return
				case <-tick.C:
					c.call(traffic)
				}
			}
		})
	}

	start := time.Now()
	prom := startPrometheus(ctx, t, strings.TrimPrefix(g.adminHTTP, "http://"))
	// Scrapes every second: the answers come within seconds.
	wait, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	queries := []string{
		// Kiali's defaults: ambient traffic "total", the last 10m.
		kialiNamespaceQuery(`reporter=~"waypoint|destination"`, "default", "600s"),
		// Ambient traffic "none": reporter="destination".
		kialiNamespaceQuery(`reporter="destination"`, "default", "600s"),
	}
	for _, q := range queries {
		pollPrometheus(wait, t, "Kiali's edges from Prometheus: "+q, func() error {
			samples, err := prom.query(q)
			if err != nil {
				return err
			}
			var edges []string
			for _, s := range samples {
				if s.Value <= 0 {
					return fmt.Errorf("series %v with rate %v", s.Metric, s.Value)
				}
				edge, err := kialiEdge(s.Metric)
				if err != nil {
					return fmt.Errorf("Kiali skips series %v: %v", s.Metric, err)
				}
				edges = append(edges, edge)
			}
			slices.Sort(edges)
			if want := slices.Sorted(slices.Values(wantEdges)); !slices.Equal(edges, want) {
				return fmt.Errorf("edges %q, want %q (one per caller)", edges, want)
			}
			return nil
		})
	}
	t.Logf("Kiali's %d edges after %v", len(wantEdges), time.Since(start).Round(time.Millisecond))

	p99 := istioServerP99(svcHost, "1m")
	pollPrometheus(wait, t, "the service dashboard's P99: "+p99, func() error {
		samples, err := prom.query(p99)
		if err != nil {
			return err
		}
		if len(samples) != 1 {
			return fmt.Errorf("%d samples: %v", len(samples), samples)
		}
		// Seconds: an RPC on loopback takes far less than one.
		if v := samples[0].Value; math.IsNaN(v) || v <= 0 || v >= 1 {
			return fmt.Errorf("P99 %v s", v)
		}
		t.Logf("P99 %v s", samples[0].Value)
		return nil
	})
	t.Logf("Prometheus answered Kiali's query and the dashboard's in %v", time.Since(start).Round(time.Millisecond))
}
