package routing_test

import (
	"fmt"
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/proxyless-grpc/xds/internal/routing"
)

// FuzzCompile checks that any RouteConfiguration either fails to compile or
// yields a Router whose Match does not panic.
func FuzzCompile(f *testing.F) {
	m := withHeaders(prefixMatch("/svc/"), headerExact("k", "v"))
	m.RuntimeFraction = fraction(50, 0)
	seeds := []*routepb.RouteConfiguration{
		routeConfig(vhost("vh", []string{"*"}, route("r", prefixMatch("/")))),
		routeConfig(
			vhost("a", []string{"a.com", "*.b.com", "c.*"}, route("r", m), route("x", regexMatch("/x/.*"))),
			vhost("b", []string{"*", "**", "a*b"}, route("r", caseInsensitive(pathMatch("/S/M")))),
		),
	}
	for _, rc := range seeds {
		b, err := proto.Marshal(rc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rc := &routepb.RouteConfiguration{}
		if err := proto.Unmarshal(b, rc); err != nil {
			return
		}
		r, err := routing.Compile(rc, nil)
		if err != nil {
			return
		}
		h := md{"k": {"v"}, "content-type": {"application/grpc"}}
		for _, authority := range []string{"", "a.com", "x.B.com", "c.d", "*", "Z"} {
			r.Match(authority, "/svc/m", h)
			r.Match(authority, "", nil)
		}
	})
}

// benchRouter returns a router with n virtual hosts, each with two exact
// domains (one with a port), a suffix wildcard and a prefix wildcard, and
// three routes; the last virtual host also has "*".
func benchRouter(b *testing.B, n int) *routing.Router {
	rc := routeConfig()
	for i := range n {
		domains := []string{fmt.Sprintf("svc%d.ns.svc.cluster.local", i), fmt.Sprintf("svc%d.ns.svc.cluster.local:8080", i), fmt.Sprintf("*.svc%d.example.com", i), fmt.Sprintf("svc%d.internal.*", i)}
		if i == n-1 {
			domains = append(domains, "*")
		}
		rc.VirtualHosts = append(rc.VirtualHosts, vhost(fmt.Sprintf("vh%d", i), domains,
			route("a", pathMatch("/pkg.Svc/Other")),
			route("b", withHeaders(prefixMatch("/pkg.Svc/"), headerExact("x-env", "prod"))),
			route("c", prefixMatch("")),
		))
	}
	r, err := routing.Compile(rc, nil)
	if err != nil {
		b.Fatalf("Compile() failed: %v", err)
	}
	return r
}

func BenchmarkMatch(b *testing.B) {
	h := md{"x-env": {"prod"}, "content-type": {"application/grpc"}}
	for _, n := range []int{1, 1000} {
		r := benchRouter(b, n)
		last := n - 1
		authorities := map[string]string{
			"exact":     fmt.Sprintf("svc%d.ns.svc.cluster.local:8080", last),
			"suffix":    fmt.Sprintf("api.svc%d.example.com", last),
			"prefix":    fmt.Sprintf("svc%d.internal.corp", last),
			"star":      "unknown.example.org",
			"uppercase": fmt.Sprintf("SVC%d.ns.svc.cluster.local", last),
		}
		for _, kind := range []string{"exact", "suffix", "prefix", "star", "uppercase"} {
			authority := authorities[kind]
			b.Run(fmt.Sprintf("vhosts=%d/%s", n, kind), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, ok := r.Match(authority, "/pkg.Svc/Method", h); !ok {
						b.Fatalf("Match(%q) found no route", authority)
					}
				}
			})
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	rc := routeConfig()
	for i := range 1000 {
		rc.VirtualHosts = append(rc.VirtualHosts, vhost(fmt.Sprintf("vh%d", i), []string{fmt.Sprintf("svc%d.example.com", i)}, route("r", regexMatch("/pkg.Svc/.*"))))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := routing.Compile(rc, nil); err != nil {
			b.Fatal(err)
		}
	}
}
