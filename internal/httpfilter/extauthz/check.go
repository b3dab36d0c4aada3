package extauthz

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
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
// goroutine (httpfilter.After).
type check struct {
	step *step
	req  httpfilter.Request
	// The allowed RPC's response_headers_to_add, added on the response
	// path (a call for the response headers when there are some).
	httpfilter.ResponseHeaders
}

// RunAfter implements httpfilter.After: it sends the Check and applies its
// answer; the context it returns carries the request headers the
// authorization server changed.
func (c *check) RunAfter(ctx context.Context) (context.Context, error) {
	s, cfg := c.step, c.step.cfg
	md, _ := metadata.FromIncomingContext(ctx) // a copy
	req := c.request(ctx, md)
	if err := c.sendable(req); err != nil {
		return s.refused(ctx, err)
	}
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
		return s.unanswered(ctx, err)
	}
	if cfg.service.Metadata != nil {
		callCtx = metadata.NewOutgoingContext(callCtx, cfg.service.Metadata)
	}
	resp, err := authpb.NewAuthorizationClient(cc).Check(callCtx, req)
	if refused := grpcservice.RequestRefused(err); refused != nil {
		return s.refused(ctx, refused)
	}
	if err != nil {
		return s.unanswered(ctx, fmt.Errorf("Check to %q: %w", cfg.service.Target, err))
	}
	// What the answer says. A denial is a denial whatever else it holds;
	// an answer that says nothing, or contradicts itself, is no answer
	// (failure_mode_allow decides), never an allow.
	st := resp.GetStatus()
	if st == nil {
		return s.failed(ctx, errors.New("the answer has no status (an answer that says nothing is not an allow)"))
	}
	if st.GetCode() != int32(codes.OK) {
		return c.deny(ctx, resp)
	}
	switch r := resp.GetHttpResponse().(type) {
	case nil:
		return c.allow(ctx, md, nil)
	case *authpb.CheckResponse_OkResponse:
		return c.allow(ctx, md, r.OkResponse)
	}
	return s.failed(ctx, errors.New("the answer's status is OK but it carries a denied_response"))
}

// allow applies an OK answer (gRFC A92 with Envoy's rules): the request
// header mutations (headers, then headers_to_remove) and the response
// headers to add. The whole answer is judged before anything is applied:
// a mutation that is invalid (gRFC A92 rejects invalid mutations
// unconditionally, as Envoy's validate_mutations) or that the rules
// refuse under disallow_is_error fails the RPC with status_on_error's code
// (as C-core; Envoy answers 500), never through failure_mode_allow, so the
// handler never sees a client's header the server meant to overwrite. A
// mutation of a reserved header (pseudo-headers, host, grpc-*) or one the
// rules disallow is ignored; the rest is applied.
func (c *check) allow(ctx context.Context, md metadata.MD, ok *authpb.OkHttpResponse) (context.Context, error) {
	s, rules := c.step, &c.step.cfg.rules
	type set struct {
		key, value string
		action     corepb.HeaderValueOption_HeaderAppendAction
	}
	var sets []set
	for i, h := range ok.GetHeaders() {
		key, value, action, keep, err := option(h)
		if err == nil && keep {
			keep, err = rules.Judge("decoder_header_mutation_rules", key)
		}
		if err != nil {
			return s.rejected(ctx, fmt.Errorf("ok_response.headers[%d]: %w", i, err))
		}
		if keep {
			sets = append(sets, set{key, value, action})
		}
	}
	var removes []string
	for i, key := range ok.GetHeadersToRemove() {
		key = strings.ToLower(key)
		if grpcservice.CheckHeaderName(key) != nil {
			// Removing a header that cannot exist, or may not be removed,
			// removes nothing (Envoy).
			continue
		}
		keep, err := rules.Judge("decoder_header_mutation_rules", key)
		if err != nil {
			return s.rejected(ctx, fmt.Errorf("ok_response.headers_to_remove[%d]: %w", i, err))
		}
		if keep {
			removes = append(removes, key)
		}
	}
	var respHeaders metadata.MD
	for i, h := range ok.GetResponseHeadersToAdd() {
		key, value, action, keep, err := option(h)
		if err != nil {
			return s.rejected(ctx, fmt.Errorf("ok_response.response_headers_to_add[%d]: %w", i, err))
		}
		if keep {
			if respHeaders == nil {
				respHeaders = metadata.MD{}
			}
			httpfilter.ApplyHeader(respHeaders, key, value, action)
		}
	}

	changed := false
	if len(sets) > 0 || len(removes) > 0 {
		if md == nil {
			md = metadata.MD{}
		}
		for _, m := range sets {
			changed = httpfilter.ApplyHeader(md, m.key, m.value, m.action) || changed
		}
		for _, key := range removes {
			if md.Get(key) != nil {
				delete(md, key)
				changed = true
			}
		}
	}
	// Added to the response's headers at the filter's place on the
	// response path, also when the RPC fails (a headers frame before its
	// status).
	c.Add(respHeaders)
	s.count(ctx, outcomeAllowed)
	if changed {
		return metadata.NewIncomingContext(ctx, md), nil
	}
	return ctx, nil
}

// deny fails the RPC with denied_response.status mapped to gRPC (absent or
// Empty: PERMISSION_DENIED, as Envoy's 403), the answer's status message,
// and denied_response.headers as trailers. A header that cannot be sent
// (invalid, or reserved) is dropped and the denial stands; with
// disallow_is_error, an invalid one fails the RPC with status_on_error's
// code instead. Either way the RPC is refused: failure_mode_allow is for an
// authorization server that did not answer, not for one that said no.
func (c *check) deny(ctx context.Context, resp *authpb.CheckResponse) (context.Context, error) {
	s := c.step
	d := resp.GetDeniedResponse()
	code := codes.PermissionDenied
	if hs := d.GetStatus().GetCode(); hs != 0 {
		code = codeOf(int(hs))
	}
	var trailers metadata.MD
	for i, h := range d.GetHeaders() {
		key, value, action, keep, err := option(h)
		if err != nil {
			if s.cfg.rules.DisallowIsError() {
				s.count(ctx, outcomeDenied)
				return ctx, denied(status.Errorf(s.cfg.errorCode, "ext_authz: the authorization server denied the RPC with an invalid header (denied_response.headers[%d]: %v; disallow_is_error)", i, err))
			}
			if logger.V(2) {
				logger.Infof("xds: ext_authz: denied_response.headers[%d] dropped: %v", i, err)
			}
			continue
		}
		if keep {
			if trailers == nil {
				trailers = metadata.MD{}
			}
			httpfilter.ApplyHeader(trailers, key, value, action)
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
	return ctx, denied(status.Error(code, msg))
}

// option validates one HeaderValueOption of an answer (gRFC A102): its key
// (lower-cased, as Envoy does), value (raw_value, else value) and
// append_action. keep is false for a reserved header (gRFC A92: ignored);
// err is set for an invalid one.
func option(h *corepb.HeaderValueOption) (key, value string, action corepb.HeaderValueOption_HeaderAppendAction, keep bool, err error) {
	if key, value, keep, err = grpcservice.AnswerHeader(h.GetHeader()); !keep || err != nil {
		return "", "", 0, false, err
	}
	action = h.GetAppendAction()
	if a := h.GetAppend(); a != nil {
		// The deprecated field, when set, wins (Envoy).
		action = corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		if a.GetValue() {
			action = corepb.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		}
	}
	if _, ok := corepb.HeaderValueOption_HeaderAppendAction_name[int32(action)]; !ok {
		return "", "", 0, false, fmt.Errorf("header %q: append_action: unknown value %d", key, int32(action))
	}
	return key, value, action, true, nil
}

// sendable returns why req, the RPC's CheckRequest, cannot be sent
// (grpcservice.ErrUnsendable); nil when it can. The strings it checks are
// the request's own bytes; the rest of the request is the server's, or
// ASCII (header names, certificates' principals and addresses), or carried
// as raw bytes (header values).
func (c *check) sendable(req *authpb.CheckRequest) error {
	if err := grpcservice.CheckString("the request's path", c.req.FullMethod); err != nil {
		return err
	}
	if err := grpcservice.CheckString("the request's :authority", c.req.Authority); err != nil {
		return err
	}
	return grpcservice.CheckSize(req)
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
// when it is set), in name order, each value raw (headerMapValue).
func (c *check) headerMap(md metadata.MD) *corepb.HeaderMap {
	cfg := c.step.cfg
	keys := make([]string, 0, len(md))
	for k := range md {
		if matcher.MatchAny(cfg.disallowed, k) || cfg.allowed != nil && !matcher.MatchAny(cfg.allowed, k) {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	hm := &corepb.HeaderMap{}
	for _, k := range keys {
		for _, v := range md[k] {
			hm.Headers = append(hm.Headers, &corepb.HeaderValue{Key: k, RawValue: grpcservice.HeaderMapValue(k, v)})
		}
	}
	return hm
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
