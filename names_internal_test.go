package xds

import (
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestListenerResourceName(t *testing.T) {
	tests := []struct {
		desc string
		tmpl string
		addr string
		want string
	}{
		{desc: "ipv4", tmpl: "grpc/server?xds.resource.listening_address=%s", addr: "127.0.0.1:8080", want: "grpc/server?xds.resource.listening_address=127.0.0.1:8080"},
		{desc: "ipv6 bracketed, no escaping (A36)", tmpl: "grpc/server?xds.resource.listening_address=%s", addr: "[::]:80", want: "grpc/server?xds.resource.listening_address=[::]:80"},
		{desc: "ipv4-mapped unmapped", tmpl: "%s", addr: "[::ffff:10.0.0.1]:1", want: "10.0.0.1:1"},
		{desc: "several tokens", tmpl: "a/%s/b/%s", addr: "10.1.2.3:9", want: "a/10.1.2.3:9/b/10.1.2.3:9"},
		{desc: "no token", tmpl: "fixed", addr: "10.1.2.3:9", want: "fixed"},
		{desc: "xdstp ipv4 unchanged (A47 example)", tmpl: "xdstp://xds.authority.com/envoy.config.listener.v3.Listener/grpc/server/%s", addr: "0.0.0.0:8080", want: "xdstp://xds.authority.com/envoy.config.listener.v3.Listener/grpc/server/0.0.0.0:8080"},
		{desc: "xdstp ipv6 brackets encoded", tmpl: "xdstp://a/envoy.config.listener.v3.Listener/%s?project_id=1", addr: "[::1]:443", want: "xdstp://a/envoy.config.listener.v3.Listener/%5B::1%5D:443?project_id=1"},
		{desc: "xdstp zone percent encoded", tmpl: "xdstp://a/t/%s", addr: "[fe80::1%eth0]:1", want: "xdstp://a/t/%5Bfe80::1%25eth0%5D:1"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got := listenerResourceName(tc.tmpl, netip.MustParseAddrPort(tc.addr))
			if got != tc.want {
				t.Errorf("listenerResourceName(%q, %s) = %q, want %q", tc.tmpl, tc.addr, got, tc.want)
			}
		})
	}
}

func TestPercentEncodePathKeepsPathChars(t *testing.T) {
	const keep = "azAZ09-._~!$&'()*+,;=:@/"
	if got := percentEncodePath(keep); got != keep {
		t.Errorf("percentEncodePath(%q) = %q, want it unchanged", keep, got)
	}
	if got, want := percentEncodePath("[ ]%?#"), "%5B%20%5D%25%3F%23"; got != want {
		t.Errorf("percentEncodePath = %q, want %q", got, want)
	}
}

func TestParseOptions(t *testing.T) {
	so, err := parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if so.drainGrace != DefaultDrainGraceTime || so.drainJitter != 0 || so.modeCallback != nil || so.bootstrap != nil {
		t.Errorf("defaults = %+v, want 10m grace, no jitter, no callback, no bootstrap", so)
	}

	creds := grpc.Creds(insecure.NewCredentials())
	so, err = parseOptions([]grpc.ServerOption{
		DrainGraceTime(time.Second), creds, DrainJitter(time.Minute),
		BootstrapContents([]byte("{}")), ClientPool(nil), grpc.MaxRecvMsgSize(1),
		DrainGraceTime(2 * time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	if so.drainGrace != 2*time.Second || so.drainJitter != time.Minute || string(so.bootstrap) != "{}" || so.pool == nil {
		t.Errorf("parsed = %+v", so)
	}
	if len(so.grpcOpts) != 2 || so.grpcOpts[0] != creds {
		t.Errorf("gRPC options passed through = %d (first %v), want 2 in order", len(so.grpcOpts), so.grpcOpts)
	}

	for _, o := range []grpc.ServerOption{DrainGraceTime(-1), DrainJitter(-1)} {
		if _, err := parseOptions([]grpc.ServerOption{o}); err == nil {
			t.Errorf("parseOptions(%T negative) succeeded, want an error", o)
		}
	}
}
