// Command extproc shows Envoy's ext_proc HTTP filter (gRFC A93) on an
// xDS-managed gRPC server: an external processor redacts a field of the
// server's responses before they reach the client.
//
//	go run ./examples/extproc
//
// In one process, on 127.0.0.1 only, it starts:
//
//  1. the processor (processor.go): a gRPC server implementing
//     envoy.service.ext_proc.v3.ExternalProcessor, which replaces the
//     username of each UnaryCall response with "[redacted]";
//  2. an xDS management server (go-control-plane, controlplane.go);
//  3. a greeter built with xds.NewGRPCServer, whose bootstrap allows the
//     processor as a side channel (allowed_grpc_services). The control
//     plane sends it a Listener whose HttpConnectionManager runs the
//     ext_proc filter, then the router;
//  4. a client, which calls the greeter and prints the reply: the greeter
//     put the caller's e-mail address in it; the client gets
//     "[redacted]".
//
// It exits 0 when the client got the redacted reply, 1 otherwise.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	extprocpb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/proxyless-grpc/xds"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err := run(ctx, os.Stdout)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "extproc example FAILED:", err)
		os.Exit(1)
	}
}

// run starts the processor, the control plane and the greeter, makes one
// call, prints what happens on out, and stops everything. It fails if the
// client does not get the redacted reply, or when ctx is done first.
// clientOpts are added to the client's dial options (tests watch what
// reaches it).
func run(ctx context.Context, out io.Writer, clientOpts ...grpc.DialOption) error {
	p := &printer{w: out}

	// 1. The processor, a plain gRPC server.
	procLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// WaitForHandlers: Stop returns once every Process stream has ended.
	procSrv := grpc.NewServer(grpc.WaitForHandlers(true))
	extprocpb.RegisterExternalProcessorServer(procSrv, &processor{logf: p.as("processor")})
	procServed := make(chan error, 1)
	go func() { procServed <- procSrv.Serve(procLis) }()
	defer func() { procSrv.Stop(); <-procServed }()
	// The filter's target for it, and the bootstrap's key that allows it.
	procTarget := "dns:///" + procLis.Addr().String()
	p.say("processor", "serving envoy.service.ext_proc.v3.ExternalProcessor at %s", procTarget)

	// 2. The control plane.
	cp, err := startControlPlane(ctx)
	if err != nil {
		return err
	}
	defer cp.stop()
	p.say("control plane", "serving ADS on %s", cp.addr)

	// 3. The greeter, configured by the control plane.
	bootstrap := bootstrapJSON(cp.addr, procTarget)
	modes := make(chan xds.ServingModeChangeArgs, 8)
	srv, err := xds.NewGRPCServer(
		xds.BootstrapContents(bootstrap),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) {
			select {
			case modes <- args:
			default: // only the first change matters here
			}
		}),
	)
	if err != nil {
		return err
	}
	testgrpc.RegisterTestServiceServer(srv, &greeter{logf: p.as("greeter")})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Stop()
		return err
	}
	addr := lis.Addr().(*net.TCPAddr)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()
	p.say("greeter", "xds.NewGRPCServer on %s, with this bootstrap:\n%s", addr, indent(string(bootstrap)))

	l := greeterListener(addr, procTarget)
	cfg, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(extProcConfig(procTarget))
	if err != nil {
		return err
	}
	cp.setListener(l)
	p.say("control plane", "published the Listener %q: its HttpConnectionManager runs the ext_proc filter \"redactor\", then the router. The filter's config:\n%s", l.GetName(), indent(stableJSON(cfg)))
	if err := waitServing(ctx, modes); err != nil {
		return err
	}
	p.say("greeter", "SERVING")

	// 4. The client: a plain gRPC client.
	conn, err := grpc.NewClient(addr.String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, clientOpts...)...)
	if err != nil {
		return err
	}
	defer conn.Close()
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p.say("client", "UnaryCall: payload %q, fill_username", "alice")
	reply, err := testgrpc.NewTestServiceClient(conn).UnaryCall(callCtx, &testgrpc.SimpleRequest{
		Payload:      &testgrpc.Payload{Body: []byte("alice")},
		FillUsername: true,
	}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("UnaryCall: %w", err)
	}
	p.say("client", "got payload %q, username %q", reply.GetPayload().GetBody(), reply.GetUsername())
	if reply.GetUsername() != redacted {
		return fmt.Errorf("the client got username %q, want %q", reply.GetUsername(), redacted)
	}
	return nil
}

// greeter is the service of the xDS server: UnaryCall greets the name in
// the request's payload and, if asked, tells the caller its e-mail
// address (a field the processor redacts).
type greeter struct {
	testgrpc.UnimplementedTestServiceServer
	logf func(format string, args ...any)
}

func (g *greeter) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	name := string(req.GetPayload().GetBody())
	resp := &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte("Hello, " + name)}}
	if req.GetFillUsername() {
		resp.Username = name + "@example.com"
	}
	g.logf("replies payload %q, username %q", resp.GetPayload().GetBody(), resp.GetUsername())
	return resp, nil
}

// waitServing waits for the server to report SERVING.
func waitServing(ctx context.Context, modes <-chan xds.ServingModeChangeArgs) error {
	select {
	case m := <-modes:
		if m.Mode != connectivity.ServingModeServing {
			return fmt.Errorf("the greeter went %v: %v", m.Mode, m.Err)
		}
		return nil
	case <-ctx.Done():
		return errors.New("the greeter did not start serving: did it reject (NACK) the Listener? Run with GRPC_GO_LOG_SEVERITY_LEVEL=warning to see why")
	}
}

// printer writes the lines of the processor, the greeter and the client,
// which run on goroutines of their own, one at a time.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) say(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%-14s "+format+"\n", append([]any{who + ":"}, args...)...)
}

// as returns a logf that says as who.
func (p *printer) as(who string) func(format string, args ...any) {
	return func(format string, args ...any) { p.say(who, format, args...) }
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ")
}

// stableJSON indents b, protojson's output, which varies its spacing from
// one build to the next on purpose.
func stableJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}
