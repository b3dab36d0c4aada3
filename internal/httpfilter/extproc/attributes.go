package extproc

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// AttributesKey is the one key of ProcessingRequest.attributes: its value
// is the Struct of RequestAttributes or ResponseAttributes (gRFC A93).
const AttributesKey = "envoy.filters.http.ext_proc"

// Response is what the response attributes read of an RPC's response, as
// far as it went when the event that carries them happened.
type Response struct {
	// Header is the response headers; nil before they are known.
	Header map[string][]string
	// Trailer is the trailers; nil before the RPC ends.
	Trailer map[string][]string
	// Ended reports that the RPC's status is known: Code is then its code.
	Ended bool
	Code  codes.Code
}

// attrInput is what an attribute is read from; resp is nil for the
// request attributes.
type attrInput struct {
	req  *httpfilter.Request
	resp *Response
}

// attributes are the Envoy attribute names (its CEL vocabulary) the server
// knows for a gRPC request, each read from the RPC: a nil value means the
// RPC has none, and the attribute is left out, as Envoy leaves out an
// attribute it cannot evaluate. Values have Envoy's types: a number for
// its integers, a bool, a string; the header maps, which Envoy can only
// print as a placeholder, are Structs of header name to value.
var attributes = map[string]func(in *attrInput) *structpb.Value{
	"request.path":      func(in *attrInput) *structpb.Value { return str(in.req.FullMethod) },
	"request.url_path":  func(in *attrInput) *structpb.Value { return str(urlPath(in.req.FullMethod)) },
	"request.host":      func(in *attrInput) *structpb.Value { return str(in.req.Authority) },
	"request.scheme":    func(in *attrInput) *structpb.Value { return str(scheme(in.req)) },
	"request.method":    func(*attrInput) *structpb.Value { return structpb.NewStringValue("POST") },
	"request.headers":   func(in *attrInput) *structpb.Value { return requestHeaders(in.req) },
	"request.referer":   func(in *attrInput) *structpb.Value { return header(in.req.Header, "referer") },
	"request.useragent": func(in *attrInput) *structpb.Value { return header(in.req.Header, "user-agent") },
	"request.id":        func(in *attrInput) *structpb.Value { return header(in.req.Header, "x-request-id") },
	"request.protocol":  func(*attrInput) *structpb.Value { return structpb.NewStringValue("HTTP/2") },
	"request.query":     func(in *attrInput) *structpb.Value { return str(query(in.req.FullMethod)) },

	"source.address": func(in *attrInput) *structpb.Value {
		if !in.req.Remote.IsValid() {
			return nil
		}
		return structpb.NewStringValue(in.req.Remote.String())
	},
	"source.port": func(in *attrInput) *structpb.Value {
		if !in.req.Remote.IsValid() {
			return nil
		}
		return structpb.NewNumberValue(float64(in.req.Remote.Port()))
	},
	"destination.address": func(in *attrInput) *structpb.Value {
		if !in.req.Local.IsValid() {
			return nil
		}
		return structpb.NewStringValue(in.req.Local.String())
	},
	"destination.port": func(in *attrInput) *structpb.Value {
		if !in.req.Local.IsValid() {
			return nil
		}
		return structpb.NewNumberValue(float64(in.req.Local.Port()))
	},
	"connection.mtls": func(in *attrInput) *structpb.Value {
		return structpb.NewBoolValue(in.req.TLS && len(in.req.PeerCertificates) > 0)
	},
	"connection.subject_peer_certificate": func(in *attrInput) *structpb.Value {
		if len(in.req.PeerCertificates) == 0 {
			return nil
		}
		return str(in.req.PeerCertificates[0].Subject.String())
	},
	"connection.uri_san_peer_certificate": func(in *attrInput) *structpb.Value {
		if len(in.req.PeerCertificates) == 0 || len(in.req.PeerCertificates[0].URIs) == 0 {
			return nil
		}
		return str(in.req.PeerCertificates[0].URIs[0].String())
	},
	"connection.dns_san_peer_certificate": func(in *attrInput) *structpb.Value {
		if len(in.req.PeerCertificates) == 0 || len(in.req.PeerCertificates[0].DNSNames) == 0 {
			return nil
		}
		return str(in.req.PeerCertificates[0].DNSNames[0])
	},
	"connection.sha256_peer_certificate_digest": func(in *attrInput) *structpb.Value {
		if len(in.req.PeerCertificates) == 0 {
			return nil
		}
		sum := sha256.Sum256(in.req.PeerCertificates[0].Raw)
		return structpb.NewStringValue(hex.EncodeToString(sum[:]))
	},

	"response.code": func(in *attrInput) *structpb.Value {
		if in.resp == nil {
			return nil
		}
		// A gRPC response is an HTTP 200, its status in the trailers.
		return structpb.NewNumberValue(200)
	},
	"response.grpc_status": func(in *attrInput) *structpb.Value {
		if in.resp == nil || !in.resp.Ended {
			return nil
		}
		return structpb.NewNumberValue(float64(in.resp.Code))
	},
	"response.headers": func(in *attrInput) *structpb.Value {
		if in.resp == nil || in.resp.Header == nil {
			return nil
		}
		return structpb.NewStructValue(headerStruct(in.resp.Header, nil))
	},
	"response.trailers": func(in *attrInput) *structpb.Value {
		if in.resp == nil || in.resp.Trailer == nil {
			return nil
		}
		return structpb.NewStructValue(headerStruct(in.resp.Trailer, nil))
	},
}

// SupportedAttribute reports whether the server knows the attribute name
// (gRFC A93: a config's other names are ignored).
func SupportedAttribute(name string) bool {
	_, ok := attributes[name]
	return ok
}

// supportedAttributes returns the supported names of names, in order,
// each once; nil when there is none.
func supportedAttributes(names []string) []string {
	var out []string
	for _, n := range names {
		if SupportedAttribute(n) && !contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// RequestAttributes returns the attributes names asks for (a Config's
// RequestAttributes) of req, for the events of the client's side; nil
// when names is empty. An attribute the RPC has no value for (a header it
// did not send, the response's) is left out. req.Header is read as the
// request's current headers; request.headers needs it to be a
// metadata.MD (as gRPC gives it), the others read any Headers.
func RequestAttributes(names []string, req httpfilter.Request) *structpb.Struct {
	return evaluate(names, &attrInput{req: &req})
}

// ResponseAttributes returns the attributes names asks for (a Config's
// ResponseAttributes) of req and its response so far, for the events of
// the server's side; nil when names is empty. The request's attributes
// may be asked for here too, as Envoy allows.
func ResponseAttributes(names []string, req httpfilter.Request, resp Response) *structpb.Struct {
	return evaluate(names, &attrInput{req: &req, resp: &resp})
}

func evaluate(names []string, in *attrInput) *structpb.Struct {
	if len(names) == 0 {
		return nil
	}
	out := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(names))}
	for _, n := range names {
		f, ok := attributes[n]
		if !ok {
			continue
		}
		if v := f(in); v != nil {
			out.Fields[n] = v
		}
	}
	return out
}

// str is a string attribute; nil when s is not UTF-8 (a protobuf string
// cannot carry it; the processor sees the raw bytes in the headers).
func str(s string) *structpb.Value {
	if !utf8.ValidString(s) {
		return nil
	}
	return structpb.NewStringValue(s)
}

func urlPath(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		return path[:i]
	}
	return path
}

func query(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		return path[i+1:]
	}
	return ""
}

func scheme(req *httpfilter.Request) string {
	if req.TLS {
		return "https"
	}
	return "http"
}

// header is the value of the request header key, its values joined by
// "," (Envoy's); nil when absent.
func header(h httpfilter.Headers, key string) *structpb.Value {
	if h == nil {
		return nil
	}
	vs := h.Get(key)
	if len(vs) == 0 {
		return nil
	}
	return str(headerValue(key, vs))
}

// headerValue joins the values of header key with ",", each binary
// ("-bin") one in base64 with padding, as the headers sent to the
// processor carry it (gRFC A102).
func headerValue(key string, vs []string) string {
	if strings.HasSuffix(key, "-bin") {
		enc := make([]string, len(vs))
		for i, v := range vs {
			enc[i] = base64.StdEncoding.EncodeToString([]byte(v))
		}
		vs = enc
	}
	return strings.Join(vs, ",")
}

// requestHeaders is request.headers: every request header, pseudo-headers
// included (:method, :path, :scheme and :authority, as Envoy's header map
// has them); nil when the headers cannot be listed.
func requestHeaders(req *httpfilter.Request) *structpb.Value {
	md, ok := req.Header.(metadata.MD)
	if !ok {
		return nil
	}
	pseudo := map[string]string{
		":method": "POST",
		":path":   req.FullMethod,
		":scheme": scheme(req),
	}
	if req.Authority != "" {
		pseudo[":authority"] = req.Authority
	}
	return structpb.NewStructValue(headerStruct(md, pseudo))
}

// headerStruct is md as a Struct of header name to value (headerValue),
// with extra's entries for the names md lacks; a value that is not UTF-8
// is left out.
func headerStruct(md map[string][]string, extra map[string]string) *structpb.Struct {
	s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(md)+len(extra))}
	for k, vs := range md {
		if v := str(headerValue(k, vs)); v != nil && utf8.ValidString(k) {
			s.Fields[k] = v
		}
	}
	for k, v := range extra {
		if _, ok := s.Fields[k]; !ok {
			if sv := str(v); sv != nil {
				s.Fields[k] = sv
			}
		}
	}
	return s
}
