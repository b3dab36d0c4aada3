// Command frontend is the greeter's client in Istio's proxyless mode: it
// dials an xds:/// target with grpc-go's own xDS resolver and xDS client
// credentials, so istiod decides where it connects and with which TLS (the
// DestinationRule ISTIO_MUTUAL of examples/kubernetes/security.yaml gives it
// mTLS with its mesh certificate). Every -interval it calls UnaryCall, which
// the greeter's AuthorizationPolicy allows for the frontend service account,
// and EmptyCall, which it denies, and prints one line per call:
//
//	UnaryCall OK: Hello, frontend
//	EmptyCall PermissionDenied: RBAC: access denied
//
// It runs only grpc-go's xDS client: istio-agent keeps one ADS stream per
// pod, so a process that also ran this library's server would need the
// direct connection to istiod of docs/istio.md, section 5.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	// grpc-go's xDS resolver and balancers, for the xds:/// target (this
	// library is a server; it registers no resolver).
	_ "google.golang.org/grpc/xds"
)

func main() {
	target := flag.String("target", "xds:///greeter.greeter.svc.cluster.local:50051", "the greeter's `target`")
	interval := flag.Duration("interval", 5*time.Second, "time between rounds of calls")
	flag.Parse()
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		log.Fatalf("frontend: xDS client credentials: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *target, creds, *interval, os.Stdout); err != nil {
		log.Fatalf("frontend: %v", err)
	}
}

// run calls the greeter at target every interval until ctx is done, and
// writes one line per call to out.
func run(ctx context.Context, target string, creds credentials.TransportCredentials, interval time.Duration, out io.Writer) error {
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("grpc.NewClient(%q): %v", target, err)
	}
	defer cc.Close()
	c := testgrpc.NewTestServiceClient(cc)
	for {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.UnaryCall(callCtx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("frontend")}})
		report(out, "UnaryCall", err, string(resp.GetPayload().GetBody()))
		_, err = c.EmptyCall(callCtx, &testgrpc.Empty{})
		report(out, "EmptyCall", err, "")
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// report writes "<method> <code>: <message>", the message being answer
// when the call succeeded.
func report(out io.Writer, method string, err error, answer string) {
	st := status.Convert(err)
	msg := st.Message()
	if err == nil {
		msg = answer
	}
	fmt.Fprintf(out, "%s %v: %s\n", method, st.Code(), msg)
}
