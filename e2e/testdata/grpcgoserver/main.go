// Command grpcgoserver is an xDS server program written against grpc-go's
// public xDS server API, as a grpc-go user writes one: grpc-go's xDS
// credentials, a serving-mode callback, CSDS and health on a maintenance
// server, and extensions registered with grpc-go's registries (channel
// credentials for the bootstrap, a certificate provider plugin, an audit
// logger).
//
// It also dials xds:/// targets, with grpc-go's xDS resolver and balancers
// (and grpc-go's xDS client credentials): the blank import of grpc-go's xds
// package marked "kept" is what registers them, and a program moved to this
// library that dials xds:/// must keep it.
//
// The only lines that differ from the grpc-go program are the two imports
// marked "changed". TestDropIn_GRPCGoProgram builds it as it is and with
// those imports put back to grpc-go's, and runs it against a management
// server.
//
// Usage: grpcgoserver [-bootstrap FILE]; without -bootstrap the bootstrap
// is read from GRPC_XDS_BOOTSTRAP or GRPC_XDS_BOOTSTRAP_CONFIG. It prints
// "xds ADDR" and "maintenance ADDR" once listening, one line per serving
// mode change and per audited RPC, and stops gracefully on SIGTERM. For each
// line "dial TARGET" on its standard input it calls EmptyCall on TARGET and
// prints "dialed TARGET CODE".
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	statuspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/authz/audit"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/tls/certprovider"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds/bootstrap"

	// kept: grpc-go's xds:/// resolver and balancers, for the client side.
	_ "google.golang.org/grpc/xds"

	"github.com/proxyless-grpc/xds"      // changed: was google.golang.org/grpc/xds
	"github.com/proxyless-grpc/xds/csds" // changed: was google.golang.org/grpc/xds/csds
)

func main() {
	bootstrapFile := flag.String("bootstrap", "", "bootstrap file, instead of the environment")
	flag.Parse()

	bootstrap.RegisterChannelCredentials(exampleChannelCreds{})
	certprovider.Register(pemBuilder{})
	audit.RegisterLoggerBuilder(printLoggerBuilder{})

	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		log.Fatalf("creating xDS credentials: %v", err)
	}
	var onMode xds.ServingModeCallbackFunc = func(addr net.Addr, args xds.ServingModeChangeArgs) {
		fmt.Printf("mode %v %v\n", addr, args.Mode)
	}
	opts := []grpc.ServerOption{grpc.Creds(creds), xds.ServingModeCallback(onMode)}
	if *bootstrapFile != "" {
		contents, err := os.ReadFile(*bootstrapFile)
		if err != nil {
			log.Fatalf("reading the bootstrap: %v", err)
		}
		opts = append(opts, xds.BootstrapContentsForTesting(contents))
	}
	server, err := xds.NewGRPCServer(opts...)
	if err != nil {
		log.Fatalf("creating the xDS server: %v", err)
	}
	testgrpc.RegisterTestServiceServer(server, testService{})

	maintenance := grpc.NewServer()
	healthgrpc.RegisterHealthServer(maintenance, health.NewServer())
	csdsServer, err := csds.NewClientStatusDiscoveryServer()
	if err != nil {
		log.Fatalf("creating the CSDS service: %v", err)
	}
	defer csdsServer.Close()
	statuspb.RegisterClientStatusDiscoveryServiceServer(maintenance, csdsServer)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	mlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("xds %v\nmaintenance %v\n", lis.Addr(), mlis.Addr())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		server.GracefulStop()
		maintenance.Stop()
	}()
	go maintenance.Serve(mlis)
	go dialFromStdin()
	if err := server.Serve(lis); err != nil {
		log.Fatalf("Serve: %v", err)
	}
	fmt.Println("stopped")
}

// dialFromStdin calls EmptyCall on the target of each "dial TARGET" line of
// standard input, with grpc-go's xDS client credentials.
func dialFromStdin() {
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		log.Fatalf("creating xDS client credentials: %v", err)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		target, ok := strings.CutPrefix(sc.Text(), "dial ")
		if !ok {
			continue
		}
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
		if err != nil {
			fmt.Printf("dialed %s %v\n", target, status.Code(err))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true))
		cancel()
		cc.Close()
		if err != nil {
			log.Printf("EmptyCall on %s: %v", target, err)
		}
		fmt.Printf("dialed %s %v\n", target, status.Code(err))
	}
}

type testService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (testService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// exampleChannelCreds are channel credentials for the bootstrap's
// channel_creds, type "example_insecure": plaintext to the management
// server.
type exampleChannelCreds struct{}

func (exampleChannelCreds) Name() string { return "example_insecure" }

func (exampleChannelCreds) Build(json.RawMessage) (credentials.Bundle, func(), error) {
	return insecure.NewBundle(), func() {}, nil
}

// pemBuilder is a certificate provider plugin, "example_pem": its config
// names PEM files, read on every handshake.
type pemBuilder struct{}

type pemConfig struct {
	Cert string `json:"certificate_file"`
	Key  string `json:"private_key_file"`
	CA   string `json:"ca_certificate_file"`
}

func (pemBuilder) Name() string { return "example_pem" }

func (pemBuilder) ParseConfig(c any) (*certprovider.BuildableConfig, error) {
	raw, ok := c.(json.RawMessage)
	if !ok {
		return nil, fmt.Errorf("example_pem: config of type %T, want JSON", c)
	}
	var cfg pemConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("example_pem: %v", err)
	}
	if cfg.Cert == "" && cfg.CA == "" {
		return nil, errors.New("example_pem: want certificate_file or ca_certificate_file")
	}
	return certprovider.NewBuildableConfig("example_pem", raw, func(certprovider.BuildOptions) certprovider.Provider {
		return pemProvider{cfg: cfg}
	}), nil
}

type pemProvider struct{ cfg pemConfig }

func (p pemProvider) KeyMaterial(context.Context) (*certprovider.KeyMaterial, error) {
	km := &certprovider.KeyMaterial{}
	if p.cfg.Cert != "" {
		pair, err := tls.LoadX509KeyPair(p.cfg.Cert, p.cfg.Key)
		if err != nil {
			return nil, err
		}
		km.Certs = []tls.Certificate{pair}
	}
	if p.cfg.CA != "" {
		pem, err := os.ReadFile(p.cfg.CA)
		if err != nil {
			return nil, err
		}
		km.Roots = x509.NewCertPool()
		if !km.Roots.AppendCertsFromPEM(pem) {
			return nil, errors.New("example_pem: no certificate in ca_certificate_file")
		}
	}
	return km, nil
}

func (pemProvider) Close() {}

// printLoggerBuilder builds the "example_print" audit logger: one line per
// audited decision on standard output.
type printLoggerBuilder struct{}

type printLoggerConfig struct {
	audit.LoggerConfig
	Prefix string `json:"prefix"`
}

func (printLoggerBuilder) Name() string { return "example_print" }

func (printLoggerBuilder) ParseLoggerConfig(c json.RawMessage) (audit.LoggerConfig, error) {
	var cfg printLoggerConfig
	if err := json.Unmarshal(c, &cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (printLoggerBuilder) Build(c audit.LoggerConfig) audit.Logger {
	return printLogger{prefix: c.(printLoggerConfig).Prefix}
}

type printLogger struct{ prefix string }

func (l printLogger) Log(e *audit.Event) {
	fmt.Printf("%s %s authorized=%v principal=%s\n", l.prefix, e.FullMethodName, e.Authorized, e.Principal)
}
