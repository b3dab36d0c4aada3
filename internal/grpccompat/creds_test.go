package grpccompat_test

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcxdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"

	"github.com/proxyless-grpc/xds/internal/grpccompat"
	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

// otherOption is an option of another package, shaped as gRPC asks.
type otherOption struct{ grpc.EmptyServerOption }

type nopStats struct{ stats.Handler }

// TestServerCreds pins what ServerCreds reads against the grpc-go this
// module builds with. If it fails after a grpc-go upgrade, grpc-go changed
// how it lays out its server options: adapt internal/grpcopts, or the
// server can no longer tell grpc-go's xDS credentials (which would serve
// plaintext) from any other.
func TestServerCreds(t *testing.T) {
	tlsCreds := credentials.NewTLS(&tls.Config{})
	ins := insecure.NewCredentials()
	xdsCreds, err := grpcxdscreds.NewServerCredentials(grpcxdscreds.ServerOptions{FallbackCreds: ins})
	if err != nil {
		t.Fatal(err)
	}
	// Options of every kind grpc-go builds, around the credentials.
	noise := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(1 << 20),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute}),
		grpc.ChainUnaryInterceptor(),
		grpc.StatsHandler(nopStats{}),
		grpc.EmptyServerOption{},
		otherOption{},
		grpc.MaxConcurrentStreams(10),
	}
	tests := []credsCase{
		{name: "none", opts: nil, want: nil},
		{name: "no creds among others", opts: noise, want: nil},
		{name: "TLS", opts: []grpc.ServerOption{grpc.Creds(tlsCreds)}, want: tlsCreds},
		{name: "grpc-go xDS creds among others", opts: append(append([]grpc.ServerOption{}, noise...), grpc.Creds(xdsCreds)), want: xdsCreds},
		{name: "the last wins", opts: []grpc.ServerOption{grpc.Creds(ins), grpc.MaxRecvMsgSize(1), grpc.Creds(xdsCreds)}, want: xdsCreds},
		{name: "the last wins, back", opts: []grpc.ServerOption{grpc.Creds(xdsCreds), grpc.Creds(ins)}, want: ins},
		{name: "set to nil", opts: []grpc.ServerOption{grpc.Creds(tlsCreds), grpc.Creds(nil)}, want: nil},
	}
	runCredsCases(t, tests)
}

// TestGRPCGoXDSCredsRecognisable: grpc-go's xDS credentials say so with a
// public method, the one grpc-go's own code asks.
func TestGRPCGoXDSCredsRecognisable(t *testing.T) {
	c, err := grpcxdscreds.NewServerCredentials(grpcxdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := grpccompat.ServerCreds([]grpc.ServerOption{grpc.Creds(c)})
	if err != nil {
		t.Fatal(err)
	}
	u, ok := got.(interface{ UsesXDS() bool })
	if !ok || !u.UsesXDS() {
		t.Fatalf("grpc-go's credentials/xds (%T) no longer report UsesXDS() == true", got)
	}
}

// TestNilOptions: nil options set nothing (grpc.NewServer would fail on
// them, not this package).
func TestNilOptions(t *testing.T) {
	var e *grpc.EmptyServerOption
	got, err := grpccompat.ServerCreds([]grpc.ServerOption{nil, e})
	if err != nil || got != nil {
		t.Fatalf("ServerCreds = %v, %v; want nil, nil", got, err)
	}
}

// Option types of a program that wrap gRPC's options, as Go lets them:
// gRPC's unexported method is promoted from the field they embed.
type (
	// embedded wraps one option.
	embedded struct{ grpc.ServerOption }
	// outer wraps a wrapper, by value or by pointer.
	outer    struct{ embedded }
	outerPtr struct{ *embedded }
	// hidden embeds an unexported type.
	hidden      struct{ hiddenInner }
	hiddenInner struct{ grpc.ServerOption }
	// named embeds an interface of its own that embeds grpc.ServerOption.
	named    struct{ namedOpt }
	namedOpt interface{ grpc.ServerOption }
	// shallower has the method at two depths: the shallower is the one Go
	// (and so gRPC) calls.
	shallower struct {
		grpc.ServerOption
		outer
	}
	// unembedded holds an option in a named field: gRPC never applies it.
	unembedded struct {
		grpc.EmptyServerOption
		opt grpc.ServerOption
	}
)

// TestServerCredsWrapped: credentials set by grpc.Creds inside the
// program's own option types, however they embed it, are found, as gRPC
// applies them: grpc-go's xDS credentials included.
func TestServerCredsWrapped(t *testing.T) {
	ins := insecure.NewCredentials()
	tlsCreds := credentials.NewTLS(&tls.Config{})
	xdsCreds, err := grpcxdscreds.NewServerCredentials(grpcxdscreds.ServerOptions{FallbackCreds: ins})
	if err != nil {
		t.Fatal(err)
	}
	x := grpc.Creds(xdsCreds)
	tests := []credsCase{
		{name: "embedded", opts: []grpc.ServerOption{embedded{x}}, want: xdsCreds},
		{name: "embedded, pointer", opts: []grpc.ServerOption{&embedded{x}}, want: xdsCreds},
		{name: "two wrappers", opts: []grpc.ServerOption{outer{embedded{x}}}, want: xdsCreds},
		{name: "two wrappers, pointers", opts: []grpc.ServerOption{&outerPtr{&embedded{x}}}, want: xdsCreds},
		{name: "unexported embedded type", opts: []grpc.ServerOption{hidden{hiddenInner{x}}}, want: xdsCreds},
		{name: "embedded interface type", opts: []grpc.ServerOption{named{x}}, want: xdsCreds},
		{name: "the shallower wins", opts: []grpc.ServerOption{shallower{ServerOption: x, outer: outer{embedded{grpc.Creds(tlsCreds)}}}}, want: xdsCreds},
		{name: "the last wins", opts: []grpc.ServerOption{embedded{x}, grpc.Creds(ins)}, want: ins},
		{name: "the last wins, wrapped", opts: []grpc.ServerOption{grpc.Creds(ins), &embedded{x}}, want: xdsCreds},
		{name: "a named field is not applied", opts: []grpc.ServerOption{unembedded{opt: x}}, want: nil},
		{name: "nil embedded option", opts: []grpc.ServerOption{embedded{}, (*embedded)(nil)}, want: nil},
	}
	runCredsCases(t, tests)
}

// TestServerCredsUnreadable: an option that cannot be followed to the end
// (wrapped too deep, or wrapping itself) is an ErrUnreadable, never a
// guess.
func TestServerCredsUnreadable(t *testing.T) {
	var deep grpc.ServerOption = grpc.Creds(insecure.NewCredentials())
	for range 64 {
		deep = embedded{deep}
	}
	loop := &embedded{}
	loop.ServerOption = loop
	for name, o := range map[string]grpc.ServerOption{"64 deep": deep, "wraps itself": loop} {
		t.Run(name, func(t *testing.T) {
			got, err := grpccompat.ServerCreds([]grpc.ServerOption{o})
			if !errors.Is(err, grpccompat.ErrUnreadable) {
				t.Fatalf("ServerCreds = %v, %v; want an ErrUnreadable", got, err)
			}
		})
	}
}

// credsCase is an option list and the credentials ServerCreds must find in
// it.
type credsCase struct {
	name string
	opts []grpc.ServerOption
	want credentials.TransportCredentials
}

func runCredsCases(t *testing.T, tests []credsCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := grpccompat.ServerCreds(tc.opts)
			if err != nil {
				t.Fatalf("ServerCreds: %v", err)
			}
			if got != tc.want {
				t.Fatalf("ServerCreds = %T %p, want %T %p", got, got, tc.want, tc.want)
			}
		})
	}
}

// TestHasUnknownServiceHandler pins what HasUnknownServiceHandler reads
// against the grpc-go this module builds with: the mesh metrics count an
// RPC for an unregistered method in the tap only when gRPC refuses it
// without running the interceptors (no UnknownServiceHandler).
func TestHasUnknownServiceHandler(t *testing.T) {
	type wrapped struct{ grpc.ServerOption }
	handler := func(any, grpc.ServerStream) error { return nil }
	for _, c := range []struct {
		name string
		opts []grpc.ServerOption
		want bool
	}{
		{"none", nil, false},
		{"other options", []grpc.ServerOption{grpc.MaxRecvMsgSize(1), grpc.EmptyServerOption{}, otherOption{}}, false},
		{"set", []grpc.ServerOption{grpc.MaxRecvMsgSize(1), grpc.UnknownServiceHandler(handler)}, true},
		{"set in an option of another package", []grpc.ServerOption{wrapped{grpc.UnknownServiceHandler(handler)}}, true},
	} {
		got, err := grpccompat.HasUnknownServiceHandler(c.opts)
		if err != nil || got != c.want {
			t.Errorf("%s: HasUnknownServiceHandler = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}
