package extproc

import (
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"net/netip"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

func testRequest() httpfilter.Request {
	return httpfilter.Request{
		FullMethod: "/pkg.Svc/Method",
		Authority:  "svc.example:443",
		Header: metadata.MD{
			":authority":   {"svc.example:443"},
			"user-agent":   {"grpc-go/1.0"},
			"referer":      {"https://r.example/"},
			"x-request-id": {"id-1"},
			"x-multi":      {"a", "b"},
			"x-blob-bin":   {"\x00\x01"},
			"x-latin1":     {"caf\xe9"},
		},
		Remote: netip.MustParseAddrPort("10.0.0.1:51000"),
		Local:  netip.MustParseAddrPort("[2001:db8::1]:8443"),
	}
}

func mtls(req httpfilter.Request) (httpfilter.Request, *x509.Certificate) {
	u, _ := url.Parse("spiffe://td/ns/a/sa/b")
	cert := &x509.Certificate{Raw: []byte("der"), Subject: pkix.Name{CommonName: "client"}, URIs: []*url.URL{u}, DNSNames: []string{"client.example"}}
	req.TLS = true
	req.PeerCertificates = []*x509.Certificate{cert}
	return req, cert
}

func sv(s string) *structpb.Value  { return structpb.NewStringValue(s) }
func nv(n float64) *structpb.Value { return structpb.NewNumberValue(n) }

// TestRequestAttributes: each supported attribute of a request, with
// Envoy's names and value types; what the RPC has no value for is left
// out.
func TestRequestAttributes(t *testing.T) {
	plain := testRequest()
	secure, cert := mtls(testRequest())
	digest := sha256.Sum256(cert.Raw)
	for _, tc := range []struct {
		desc string
		req  httpfilter.Request
		want map[string]*structpb.Value
	}{
		{
			desc: "request",
			req:  plain,
			want: map[string]*structpb.Value{
				"request.path":      sv("/pkg.Svc/Method"),
				"request.url_path":  sv("/pkg.Svc/Method"),
				"request.host":      sv("svc.example:443"),
				"request.scheme":    sv("http"),
				"request.method":    sv("POST"),
				"request.referer":   sv("https://r.example/"),
				"request.useragent": sv("grpc-go/1.0"),
				"request.id":        sv("id-1"),
				"request.protocol":  sv("HTTP/2"),
				"request.query":     sv(""),
				"request.headers": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
					":authority":   sv("svc.example:443"),
					":path":        sv("/pkg.Svc/Method"),
					":method":      sv("POST"),
					":scheme":      sv("http"),
					"user-agent":   sv("grpc-go/1.0"),
					"referer":      sv("https://r.example/"),
					"x-request-id": sv("id-1"),
					"x-multi":      sv("a,b"),
					"x-blob-bin":   sv("AAE="),
					// x-latin1: not UTF-8, left out.
				}}),
			},
		},
		{
			desc: "connection",
			req:  plain,
			want: map[string]*structpb.Value{
				"source.address":      sv("10.0.0.1:51000"),
				"source.port":         nv(51000),
				"destination.address": sv("[2001:db8::1]:8443"),
				"destination.port":    nv(8443),
				"connection.mtls":     structpb.NewBoolValue(false),
			},
		},
		{
			desc: "mTLS",
			req:  secure,
			want: map[string]*structpb.Value{
				"request.scheme":                            sv("https"),
				"connection.mtls":                           structpb.NewBoolValue(true),
				"connection.subject_peer_certificate":       sv("CN=client"),
				"connection.uri_san_peer_certificate":       sv("spiffe://td/ns/a/sa/b"),
				"connection.dns_san_peer_certificate":       sv("client.example"),
				"connection.sha256_peer_certificate_digest": sv(hex.EncodeToString(digest[:])),
			},
		},
		{
			desc: "absent: headers not sent, no addresses, no certificate, no response",
			req:  httpfilter.Request{FullMethod: "/a/b", Header: metadata.MD{}},
			want: map[string]*structpb.Value{},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			names := make([]string, 0, len(tc.want))
			for n := range tc.want {
				names = append(names, n)
			}
			if len(tc.want) == 0 {
				names = []string{"request.referer", "request.useragent", "request.id", "source.address", "source.port",
					"destination.address", "destination.port", "connection.uri_san_peer_certificate",
					"connection.subject_peer_certificate", "response.code", "response.grpc_status", "response.headers"}
			}
			got := RequestAttributes(names, tc.req)
			want := &structpb.Struct{Fields: tc.want}
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("RequestAttributes(%q) diff (-want +got):\n%s", names, diff)
			}
			// Every value is one protobuf can carry.
			if _, err := proto.Marshal(got); err != nil {
				t.Errorf("the attributes do not marshal: %v", err)
			}
		})
	}
	if got := RequestAttributes(nil, plain); got != nil {
		t.Errorf("RequestAttributes(nil) = %v, want nil", got)
	}
	if got := RequestAttributes([]string{"xds.cluster_name"}, plain); got == nil || len(got.GetFields()) != 0 {
		t.Errorf("RequestAttributes of an unsupported name = %v, want an empty Struct", got)
	}
}

// TestResponseAttributes: the response's attributes, as far as the
// response went, and the request's too.
func TestResponseAttributes(t *testing.T) {
	req := testRequest()
	names := []string{"response.code", "response.grpc_status", "response.headers", "response.trailers", "request.path"}
	headers := ResponseAttributes(names, req, Response{Header: map[string][]string{"x-h": {"1"}}})
	want := &structpb.Struct{Fields: map[string]*structpb.Value{
		"response.code":    nv(200),
		"response.headers": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"x-h": sv("1")}}),
		"request.path":     sv("/pkg.Svc/Method"),
	}}
	if diff := cmp.Diff(want, headers, protocmp.Transform()); diff != "" {
		t.Errorf("at the response headers, diff (-want +got):\n%s", diff)
	}
	trailers := ResponseAttributes(names, req, Response{
		Header:  map[string][]string{"x-h": {"1"}},
		Trailer: map[string][]string{"x-t-bin": {"\x00"}},
		Ended:   true,
		Code:    codes.PermissionDenied,
	})
	want.Fields["response.grpc_status"] = nv(7)
	want.Fields["response.trailers"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"x-t-bin": sv("AA==")}})
	if diff := cmp.Diff(want, trailers, protocmp.Transform()); diff != "" {
		t.Errorf("at the trailers, diff (-want +got):\n%s", diff)
	}
	ok := ResponseAttributes([]string{"response.grpc_status"}, req, Response{Ended: true})
	if diff := cmp.Diff(&structpb.Struct{Fields: map[string]*structpb.Value{"response.grpc_status": nv(0)}}, ok, protocmp.Transform()); diff != "" {
		t.Errorf("an OK status, diff (-want +got):\n%s", diff)
	}
}

// TestSupportedAttribute: the names the server knows, and some it does
// not (gRFC A93: ignored).
func TestSupportedAttribute(t *testing.T) {
	for _, n := range []string{"request.path", "request.headers", "source.address", "connection.mtls", "response.grpc_status"} {
		if !SupportedAttribute(n) {
			t.Errorf("SupportedAttribute(%q) = false, want true", n)
		}
	}
	for _, n := range []string{"", "request", "request.time", "request.size", "xds.cluster_name", "response.flags", "REQUEST.PATH"} {
		if SupportedAttribute(n) {
			t.Errorf("SupportedAttribute(%q) = true, want false", n)
		}
	}
}

// TestRequestHeadersAttributeNeedsMD: request.headers lists the headers
// only when they are gRPC metadata; the other attributes read any Headers.
func TestRequestHeadersAttributeNeedsMD(t *testing.T) {
	req := testRequest()
	req.Header = onlyGet{"user-agent": {"ua"}}
	got := RequestAttributes([]string{"request.headers", "request.useragent"}, req)
	want := &structpb.Struct{Fields: map[string]*structpb.Value{"request.useragent": sv("ua")}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("diff (-want +got):\n%s", diff)
	}
}

type onlyGet map[string][]string

func (h onlyGet) Get(k string) []string { return h[k] }
