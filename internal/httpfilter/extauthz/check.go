package extauthz

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authpb "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/matcher"
)

// check is one RPC's authorization, run after the tap handle on the RPC's
// goroutine (httpfilter.ContextAfter).
type check struct {
	step *step
	req  httpfilter.Request
}

// RunAfter implements httpfilter.After.
func (c *check) RunAfter(ctx context.Context) error {
	_, err := c.RunAfterContext(ctx)
	return err
}

// RunAfterContext sends the Check and applies its answer: the context it
// returns carries the request headers the authorization server changed.
func (c *check) RunAfterContext(ctx context.Context) (context.Context, error) {
	s, cfg := c.step, c.step.cfg
	md, _ := metadata.FromIncomingContext(ctx) // a copy
	callCtx := ctx
	if cfg.service.Timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, cfg.service.Timeout)
		defer cancel()
	}
	// The first checks of a new channel wait here, within the check's
	// timeout, for its credentials to be built.
	cc, err := cfg.service.Conn(callCtx)
	if err != nil {
		if ctx.Err() != nil {
			s.count(ctx, outcomeFailed)
			return ctx, status.FromContextError(ctx.Err()).Err()
		}
		return s.failed(ctx, err)
	}
	if cfg.service.Metadata != nil {
		callCtx = metadata.NewOutgoingContext(callCtx, cfg.service.Metadata)
	}
	resp, err := authpb.NewAuthorizationClient(cc).Check(callCtx, c.request(ctx, md))
	if err != nil {
		if ctx.Err() != nil {
			// The RPC itself was cancelled or ran out of time.
			s.count(ctx, outcomeFailed)
			return ctx, status.FromContextError(ctx.Err()).Err()
		}
		return s.failed(ctx, fmt.Errorf("Check to %q: %w", cfg.service.Target, err))
	}
	if resp.GetStatus().GetCode() == int32(codes.OK) {
		return c.allow(ctx, md, resp.GetOkResponse())
	}
	return c.deny(ctx, resp)
}

// allow applies an OK answer: the request header mutations (additions,
// then removals, as Envoy applies them), then the response headers. An
// invalid mutation fails the check, and nothing of it is applied.
func (c *check) allow(ctx context.Context, md metadata.MD, ok *authpb.OkHttpResponse) (context.Context, error) {
	s, rules := c.step, &c.step.cfg.rules
	if md == nil {
		md = metadata.MD{}
	}
	changed := false
	for i, h := range ok.GetHeaders() {
		applied, err := add(rules, md, h)
		if err != nil {
			return s.failed(ctx, fmt.Errorf("ok_response.headers[%d]: %w", i, err))
		}
		changed = changed || applied
	}
	for i, key := range ok.GetHeadersToRemove() {
		if err := grpcservice.CheckHeaderName(key); err != nil {
			return s.failed(ctx, fmt.Errorf("ok_response.headers_to_remove[%d]: %w", i, err))
		}
		allowed, err := rules.check(key)
		if err != nil {
			return s.failed(ctx, fmt.Errorf("ok_response.headers_to_remove[%d]: %w", i, err))
		}
		if allowed && md.Get(key) != nil {
			delete(md, key)
			changed = true
		}
	}
	var respHeaders metadata.MD
	for i, h := range ok.GetResponseHeadersToAdd() {
		if respHeaders == nil {
			respHeaders = metadata.MD{}
		}
		if _, err := add(rules, respHeaders, h); err != nil {
			return s.failed(ctx, fmt.Errorf("ok_response.response_headers_to_add[%d]: %w", i, err))
		}
	}
	if len(respHeaders) > 0 {
		// Dropped by gRPC if the RPC ends Trailers-Only (gRFC A92).
		_ = grpc.SetHeader(ctx, respHeaders)
	}
	s.count(ctx, outcomeAllowed)
	if changed {
		return metadata.NewIncomingContext(ctx, md), nil
	}
	return ctx, nil
}

// deny fails the RPC with denied_response.status mapped to gRPC (absent or
// Empty: PERMISSION_DENIED, as Envoy's 403), the answer's status message,
// and denied_response.headers as trailers.
func (c *check) deny(ctx context.Context, resp *authpb.CheckResponse) (context.Context, error) {
	s := c.step
	d := resp.GetDeniedResponse()
	code := codes.PermissionDenied
	if hs := d.GetStatus().GetCode(); hs != 0 {
		code = codeOf(int(hs))
	}
	var trailers metadata.MD
	for i, h := range d.GetHeaders() {
		if trailers == nil {
			trailers = metadata.MD{}
		}
		if _, err := add(&s.cfg.rules, trailers, h); err != nil {
			return s.failed(ctx, fmt.Errorf("denied_response.headers[%d]: %w", i, err))
		}
	}
	if len(trailers) > 0 {
		_ = grpc.SetTrailer(ctx, trailers)
	}
	s.count(ctx, outcomeDenied)
	msg := "ext_authz: the authorization server denied the RPC"
	if m := resp.GetStatus().GetMessage(); m != "" {
		msg += ": " + m
	}
	return ctx, status.Error(code, msg)
}

// check reports whether the rules let the side channel change key; an
// error when they do not and disallow_is_error is set.
func (r *mutationRules) check(key string) (bool, error) {
	if r.allows(key) {
		return true, nil
	}
	if r.disallowIsError {
		return false, fmt.Errorf("decoder_header_mutation_rules disallow changing %q (disallow_is_error)", key)
	}
	return false, nil
}

// add validates one HeaderValueOption (gRFC A102) and applies it to md
// unless the rules disallow it; it reports whether md changed.
func add(rules *mutationRules, md metadata.MD, h *corepb.HeaderValueOption) (bool, error) {
	key, value, err := grpcservice.HeaderValue(h.GetHeader())
	if err != nil {
		return false, err
	}
	allowed, err := rules.check(key)
	if err != nil || !allowed {
		return false, err
	}
	action := h.GetAppendAction()
	if a := h.GetAppend(); a != nil {
		// The deprecated field, when set, wins (Envoy).
		action = corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		if a.GetValue() {
			action = corepb.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		}
	}
	if _, ok := corepb.HeaderValueOption_HeaderAppendAction_name[int32(action)]; !ok {
		return false, fmt.Errorf("append_action: unknown value %d", int32(action))
	}
	return httpfilter.ApplyHeader(md, key, value, action), nil
}

// request builds the CheckRequest of gRFC A92.
func (c *check) request(ctx context.Context, md metadata.MD) *authpb.CheckRequest {
	cfg := c.step.cfg
	r := &c.req
	src := &authpb.AttributeContext_Peer{Address: socketAddress(r.Remote)}
	if len(r.PeerCertificates) > 0 {
		leaf := r.PeerCertificates[0]
		src.Principal = principal(leaf)
		if cfg.includePeerCertificate {
			src.Certificate = urlEncodedPEM(leaf)
		}
	}
	dst := &authpb.AttributeContext_Peer{Address: socketAddress(r.Local)}
	if r.TLS {
		if leaf := httpfilter.LocalIdentity(ctx); leaf != nil {
			dst.Principal = principal(leaf)
		}
	}
	return &authpb.CheckRequest{Attributes: &authpb.AttributeContext{
		Source:      src,
		Destination: dst,
		Request: &authpb.AttributeContext_Request{
			Time: timestamppb.Now(),
			Http: &authpb.AttributeContext_HttpRequest{
				Method:    "POST",
				Path:      r.FullMethod,
				Host:      r.Authority,
				Size:      -1,
				Protocol:  "HTTP/2",
				HeaderMap: c.headerMap(md),
			},
		},
	}}
}

// headerMap lists the request's headers the config lets through (gRFC
// A92: not matched by disallowed_headers, and matched by allowed_headers
// when it is set), in name order, each value raw, binary ones in base64.
func (c *check) headerMap(md metadata.MD) *corepb.HeaderMap {
	cfg := c.step.cfg
	keys := make([]string, 0, len(md))
	for k := range md {
		if matchesAny(cfg.disallowed, k) || cfg.allowed != nil && !matchesAny(cfg.allowed, k) {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	hm := &corepb.HeaderMap{}
	for _, k := range keys {
		bin := strings.HasSuffix(k, "-bin")
		for _, v := range md[k] {
			raw := []byte(v)
			if bin {
				raw = []byte(base64.RawStdEncoding.EncodeToString(raw))
			}
			hm.Headers = append(hm.Headers, &corepb.HeaderValue{Key: k, RawValue: raw})
		}
	}
	return hm
}

func matchesAny(ms []matcher.StringMatcher, s string) bool {
	for i := range ms {
		if ms[i].Match(s) {
			return true
		}
	}
	return false
}

// socketAddress is Envoy's form of an address: IP and port apart.
func socketAddress(ap netip.AddrPort) *corepb.Address {
	if !ap.IsValid() {
		return nil
	}
	return &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
		Address:       ap.Addr().String(),
		PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: uint32(ap.Port())},
	}}}
}

// principal is gRFC A92's principal of a certificate: its first URI SAN,
// else its first DNS SAN, else its subject (RFC 2253).
func principal(cert *x509.Certificate) string {
	switch {
	case len(cert.URIs) > 0:
		return cert.URIs[0].String()
	case len(cert.DNSNames) > 0:
		return cert.DNSNames[0]
	}
	return cert.Subject.String()
}

// urlEncodedPEM is Envoy's form of a peer certificate: PEM, URL-encoded
// (every byte but the unreserved characters of RFC 3986 as %XX).
func urlEncodedPEM(cert *x509.Certificate) string {
	p := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(p) * 3 / 2)
	for _, ch := range p {
		if 'A' <= ch && ch <= 'Z' || 'a' <= ch && ch <= 'z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '.' || ch == '_' || ch == '~' {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&15])
	}
	return b.String()
}

// withHeader returns ctx whose incoming metadata has key set to value.
func withHeader(ctx context.Context, key, value string) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if md == nil {
		md = metadata.MD{}
	}
	md.Set(key, value)
	return metadata.NewIncomingContext(ctx, md)
}
