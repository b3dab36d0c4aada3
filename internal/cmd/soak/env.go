package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/proxyless-grpc/xds"
)

// rpcTimeout bounds each RPC of the load; a drain never takes that long.
const rpcTimeout = 10 * time.Second

// env is one soak: control plane, xDS server, clients, counters.
type env struct {
	cfg  config
	out  io.Writer
	cp   *controlPlane
	srv  *xds.GRPCServer
	lis  net.Listener
	addr *net.TCPAddr

	served  chan error
	clients []*grpc.ClientConn
	conns   connCounter

	ok, failed atomic.Int64
	errMu      sync.Mutex
	errs       []string // the first failures of the current report interval
	pushes     [3]atomic.Int64

	// Lowest samples since the last report; 0: no sample yet.
	minMu         sync.Mutex
	minGoroutines int
	minHeap       uint64
}

func startEnv(ctx context.Context, cfg config, out io.Writer) (_ *env, err error) {
	e := &env{cfg: cfg, out: out, served: make(chan error, 1)}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	if e.cp, err = startControlPlane(); err != nil {
		return e, err
	}
	bootstrap, err := bootstrapJSON(e.cp.Address)
	if err != nil {
		return e, err
	}
	serving := make(chan struct{})
	var once sync.Once
	e.srv, err = xds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
		grpc.StatsHandler(&e.conns),
		xds.BootstrapContents(bootstrap),
		xds.ServingModeCallback(func(_ net.Addr, a xds.ServingModeChangeArgs) {
			if a.Mode == connectivity.ServingModeServing {
				once.Do(func() { close(serving) })
			} else {
				fmt.Fprintf(out, "soak: server is %v: %v\n", a.Mode, a.Err)
			}
		}),
		// The load's streams last milliseconds; a drain that takes longer
		// than this means RPCs are stuck, and they fail.
		xds.DrainGraceTime(30*time.Second),
	)
	if err != nil {
		return e, err
	}
	testgrpc.RegisterTestServiceServer(e.srv, echoService{})
	if e.lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return e, err
	}
	e.addr = e.lis.Addr().(*net.TCPAddr)
	go func() { e.served <- e.srv.Serve(e.lis) }()

	if err := e.cp.push(ctx, serverListener(e.addr, listenerState{}), routeConfig(0)); err != nil {
		return e, err
	}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-serving:
	case <-t.C:
		return e, errors.New("the server did not start serving within 30 s")
	case <-ctx.Done():
		return e, ctx.Err()
	}
	for range cfg.Clients {
		cc, err := grpc.NewClient("passthrough:///"+e.addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return e, err
		}
		e.clients = append(e.clients, cc)
	}
	fmt.Fprintf(out, "soak: server on %v, control plane on %s, %d clients, a change every %v, a report every %v for %v (baseline: first report at or after %v)\n",
		e.addr, e.cp.Address, cfg.Clients, cfg.Change, cfg.Report, cfg.Duration, cfg.Warmup)
	return e, nil
}

// stop stops whatever startEnv started.
func (e *env) stop() {
	for _, cc := range e.clients {
		cc.Close()
	}
	if e.srv != nil {
		e.srv.Stop()
		if e.lis != nil {
			<-e.served
		}
	}
	if e.cp != nil {
		e.cp.Stop()
	}
}

// soak runs the load, the changes and the reports for cfg.Duration.
func (e *env) soak(ctx context.Context) error {
	start := time.Now()
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for i, cc := range e.clients {
		c := testgrpc.NewTestServiceClient(cc)
		wg.Go(func() { e.unaryWorker(ctx, stopLoad, c, i) })
		wg.Go(func() { e.streamWorker(ctx, stopLoad, c, i) })
	}
	wg.Go(func() { e.changer(stopLoad) })
	wg.Go(func() { e.sampler(stopLoad) })

	var reports []report
	var loopErr error
	reportT := time.NewTicker(e.cfg.Report)
	end := time.NewTimer(e.cfg.Duration)
loop:
	for {
		select {
		case <-reportT.C:
			reports = append(reports, e.report(start))
		case <-end.C:
			if len(reports) == 0 || time.Since(start)-reports[len(reports)-1].elapsed > e.cfg.Report/2 {
				reports = append(reports, e.report(start))
			}
			break loop
		case <-ctx.Done():
			loopErr = ctx.Err()
			break loop
		}
	}
	reportT.Stop()
	end.Stop()
	close(stopLoad)
	wg.Wait()

	var errs []error
	if loopErr != nil {
		errs = append(errs, fmt.Errorf("stopped early: %w", loopErr))
	}
	// RPCs that ended after the last report count too.
	if f := e.failed.Load(); f > 0 {
		errs = append(errs, fmt.Errorf("%d of %d RPCs failed", f, f+e.ok.Load()))
		e.printErrors()
	}
	if n := e.cp.nacks.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("the server NACKed %d pushes; the first: %s", n, e.cp.firstNACK()))
	}
	var base *report
	for i := range reports {
		if reports[i].elapsed >= e.cfg.Warmup {
			base = &reports[i]
			break
		}
	}
	switch last := reports[len(reports)-1]; {
	case base == nil || base.elapsed == last.elapsed:
		fmt.Fprintf(e.out, "soak: fewer than two reports after the %v warm-up: no growth check\n", e.cfg.Warmup)
	default:
		fmt.Fprintf(e.out, "soak: growth from %v to %v: heap %+.1f%%, goroutines %+d\n", base.elapsed.Round(time.Second), last.elapsed.Round(time.Second),
			100*(float64(last.heapInuse)/float64(base.heapInuse)-1), last.goroutines-base.goroutines)
		if err := checkGrowth(e.cfg, *base, last); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// heapAfterGC returns HeapInuse after two GCs (the second frees what the
// first one's finalizers released).
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// report measures and prints one report: the lowest heap and goroutine
// samples since the previous report, this moment's included.
func (e *env) report(start time.Time) report {
	e.sample(true)
	e.minMu.Lock()
	g, h := e.minGoroutines, e.minHeap
	e.minGoroutines, e.minHeap = 0, 0
	e.minMu.Unlock()
	r := report{
		elapsed:    time.Since(start),
		ok:         e.ok.Load(),
		failed:     e.failed.Load(),
		heapInuse:  h,
		goroutines: g,
		acks:       e.cp.acks.Load(),
		nacks:      e.cp.nacks.Load(),
		conns:      e.conns.n.Load(),
	}
	for i := range e.pushes {
		r.pushes[i] = e.pushes[i].Load()
	}
	fmt.Fprintln(e.out, r)
	e.printErrors()
	return r
}

// printErrors prints (and forgets) the failures recorded since the last call.
func (e *env) printErrors() {
	e.errMu.Lock()
	errs := e.errs
	e.errs = nil
	e.errMu.Unlock()
	for _, s := range errs {
		fmt.Fprintf(e.out, "           failed RPC: %s\n", s)
	}
}

// sampler records the lowest goroutine count, every 100 ms, and the lowest
// heap in use after a GC, every second. The lowest values are the floor a
// leak raises; connections being drained while their replacements are up,
// or RPCs in flight, do not.
func (e *env) sampler(stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		e.sample(n%10 == 0)
	}
}

// sample takes a goroutine sample and, if heap, a heap sample.
func (e *env) sample(heap bool) {
	var h uint64
	if heap {
		h = heapAfterGC()
	}
	g := runtime.NumGoroutine()
	e.minMu.Lock()
	defer e.minMu.Unlock()
	if e.minGoroutines == 0 || g < e.minGoroutines {
		e.minGoroutines = g
	}
	if heap && (e.minHeap == 0 || h < e.minHeap) {
		e.minHeap = h
	}
}

// changer pushes one configuration change every cfg.Change: Listener, RDS,
// RBAC, in turn.
func (e *env) changer(stop <-chan struct{}) {
	t := time.NewTicker(e.cfg.Change)
	defer t.Stop()
	var st listenerState
	rdsGen := 0
	// Pushes only fail for a malformed resource (a bug of the soak) or a
	// done context; neither happens while stop is open.
	ctx := context.Background()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var err error
		switch n % 3 {
		case 0: // Listener: the unmatched chain comes or goes.
			if st.extra != 0 {
				st.extra = 0
			} else {
				st.extra = n + 1
			}
			err = e.cp.push(ctx, serverListener(e.addr, st), nil)
		case 1: // RDS
			rdsGen++
			err = e.cp.push(ctx, nil, routeConfig(rdsGen))
		case 2: // RBAC, in the Listener's main chain
			st.rbac++
			err = e.cp.push(ctx, serverListener(e.addr, st), nil)
		}
		if err != nil {
			e.fail("pushing a configuration: %v", err)
			return
		}
		e.pushes[n%3].Add(1)
	}
}

func (e *env) fail(format string, args ...any) {
	e.failed.Add(1)
	e.errMu.Lock()
	if len(e.errs) < 5 {
		e.errs = append(e.errs, fmt.Sprintf(format, args...))
	}
	e.errMu.Unlock()
}

// pause waits cfg.Pause; false if stop was closed.
func (e *env) pause(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return false
	default:
	}
	if e.cfg.Pause > 0 {
		time.Sleep(e.cfg.Pause)
	}
	return true
}

func (e *env) unaryWorker(ctx context.Context, stop <-chan struct{}, c testgrpc.TestServiceClient, id int) {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-soak-client", fmt.Sprint(id))
	body := bytes.Repeat([]byte{byte('a' + id%26)}, 128)
	for e.pause(stop) {
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := c.UnaryCall(rctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}}, grpc.WaitForReady(true))
		cancel()
		switch {
		case err != nil:
			e.fail("client %d UnaryCall: %v", id, err)
		case !bytes.Equal(resp.GetPayload().GetBody(), body):
			e.fail("client %d UnaryCall: wrong payload echoed", id)
		default:
			e.ok.Add(1)
		}
	}
}

func (e *env) streamWorker(ctx context.Context, stop <-chan struct{}, c testgrpc.TestServiceClient, id int) {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-soak-client", fmt.Sprint(id))
	for e.pause(stop) {
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		err := oneStream(rctx, c, id)
		cancel()
		if err != nil {
			e.fail("client %d FullDuplexCall: %v", id, err)
		} else {
			e.ok.Add(1)
		}
	}
}

// oneStream opens a FullDuplexCall, exchanges 10 messages, closes its side
// and expects the stream to end OK.
func oneStream(ctx context.Context, c testgrpc.TestServiceClient, id int) error {
	s, err := c.FullDuplexCall(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	for i := range 10 {
		body := fmt.Appendf(nil, "client %d message %d", id, i)
		if err := s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}}); err != nil {
			if errors.Is(err, io.EOF) {
				_, err = s.Recv() // how the stream ended
			}
			return fmt.Errorf("Send %d: %v", i, err)
		}
		resp, err := s.Recv()
		if err != nil {
			return fmt.Errorf("Recv %d: %v", i, err)
		}
		if !bytes.Equal(resp.GetPayload().GetBody(), body) {
			return fmt.Errorf("Recv %d: wrong payload echoed", i)
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("stream ended with %v, want OK", err)
	}
	return nil
}

// echoService is the load's server: UnaryCall and FullDuplexCall echo.
type echoService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echoService) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (echoService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// connCounter is a server stats handler that counts the connections gRPC
// served (each drain makes the clients open new ones).
type connCounter struct{ n atomic.Int64 }

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                       {}
func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnBegin); ok {
		c.n.Add(1)
	}
}
