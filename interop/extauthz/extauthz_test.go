package extauthz

// End to end: a plain grpc-go client calls this library's xDS server, whose
// ext_authz filter asks OPA (policy.rego) about every RPC.

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// headerFailureModeAllowed is the request header the filter adds when
// failure_mode_allow lets an RPC through and failure_mode_allow_header_add
// is set (Envoy's name).
const headerFailureModeAllowed = "x-envoy-auth-failure-mode-allowed"

// TestOPAPolicy: OPA decides; failure_mode_allow is false.
func TestOPAPolicy(t *testing.T) {
	ctx := testContext(t)
	opa := startOPA(t, pathResult)
	e := newEnv(t, opa.Addr)
	e.publish(ctx, extAuthzConfig(opa.Addr, false, false))

	t.Run("allowed by path, header added for the handler", func(t *testing.T) {
		callCtx := metadata.AppendToOutgoingContext(ctx, "x-user", "alice")
		var hdr metadata.MD
		if _, err := e.client.UnaryCall(callCtx, &testgrpc.SimpleRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("UnaryCall: %v, want OK", err)
		}
		// OPA's response_headers_to_add reach the client.
		if got := hdr.Get("x-opa-decision"); len(got) != 1 || got[0] != "allowed" {
			t.Errorf("response header x-opa-decision = %q, want [allowed] (ok_response.response_headers_to_add)", got)
		}
		h := e.svc.nextHandled(ctx, t)
		for k, want := range map[string]string{
			"x-opa-user": "alice",
			"x-opa-path": "/grpc.testing.TestService/UnaryCall",
			"x-user":     "alice",
		} {
			if got := h.md.Get(k); len(got) != 1 || got[0] != want {
				t.Errorf("the handler saw %s = %q, want [%q]", k, got, want)
			}
		}
		if got := h.md.Get(headerFailureModeAllowed); got != nil {
			t.Errorf("the handler saw %s = %q, want none: the check did not fail", headerFailureModeAllowed, got)
		}
	})

	for _, c := range []struct {
		name     string
		call     func(grpc.CallOption) error
		code     codes.Code
		trailers map[string]string
		opaText  string // the denial's body in OPA's answer
	}{{
		name: "denied by path: 403",
		call: func(tr grpc.CallOption) error {
			_, err := e.client.EmptyCall(metadata.AppendToOutgoingContext(ctx, "x-user", "alice"), &testgrpc.Empty{}, tr)
			return err
		},
		code:     codes.PermissionDenied,
		trailers: map[string]string{"x-ext-authz-reason": "path"},
		opaText:  "opa: path not allowed",
	}, {
		name: "denied by header: 401",
		call: func(tr grpc.CallOption) error {
			_, err := e.client.UnaryCall(metadata.AppendToOutgoingContext(ctx, "x-user", "mallory"), &testgrpc.SimpleRequest{}, tr)
			return err
		},
		code:     codes.Unauthenticated,
		trailers: map[string]string{"x-ext-authz-reason": "banned-user", "www-authenticate": `Bearer realm="interop"`},
		opaText:  "opa: user mallory is banned",
	}, {
		name: "denied by header: 429",
		call: func(tr grpc.CallOption) error {
			_, err := e.client.UnaryCall(metadata.AppendToOutgoingContext(ctx, "x-user", "alice", "x-quota", "exhausted"), &testgrpc.SimpleRequest{}, tr)
			return err
		},
		code:     codes.Unavailable,
		trailers: map[string]string{"x-ext-authz-reason": "quota", "retry-after": "1"},
		opaText:  "opa: quota exhausted",
	}} {
		t.Run(c.name, func(t *testing.T) {
			var tr metadata.MD
			err := c.call(grpc.Trailer(&tr))
			if got := status.Code(err); got != c.code {
				t.Fatalf("RPC: %v, want code %v", err, c.code)
			}
			e.svc.noneHandled(t)
			for k, want := range c.trailers {
				if got := tr.Get(k); len(got) != 1 || got[0] != want {
					t.Errorf("trailer %s = %q, want [%q] (denied_response.headers become trailers)", k, got, want)
				}
			}
			// OPA's Envoy plugin puts its text in denied_response.body and
			// sends no status.message, which is what the filter puts in the
			// RPC's message (the body has no place in a gRPC response); so
			// the message carries no text of OPA's.
			t.Logf("the denied RPC's message: %q (OPA's denial body was %q)", status.Convert(err).Message(), c.opaText)
		})
	}
}

// TestOPADenialWithBadHeaders: OPA denies with headers gRPC never sends
// (grpc-status: 0, a name with a space) beside a valid one; with
// failure_mode_allow on, the RPC is still refused with OPA's status and
// the valid header, and never reaches its handler: failure_mode_allow is
// for an authorization server that did not answer.
func TestOPADenialWithBadHeaders(t *testing.T) {
	ctx := testContext(t)
	opa := startOPA(t, pathResult)
	e := newEnv(t, opa.Addr)
	e.publish(ctx, extAuthzConfig(opa.Addr, true, true))
	var tr metadata.MD
	_, err := e.client.UnaryCall(metadata.AppendToOutgoingContext(ctx, "x-user", "eve"), &testgrpc.SimpleRequest{}, grpc.Trailer(&tr))
	if got := status.Code(err); got != codes.PermissionDenied {
		t.Fatalf("UnaryCall: %v, want PERMISSION_DENIED (OPA's 403)", err)
	}
	e.svc.noneHandled(t)
	if got := tr.Get("x-ext-authz-reason"); len(got) != 1 || got[0] != "eve" {
		t.Errorf("trailer x-ext-authz-reason = %q, want [eve]", got)
	}
	if got := tr.Get("bad header"); len(got) != 0 {
		t.Errorf("trailer %q = %q, want none", "bad header", got)
	}
}

// TestOPAUnreachableFailClosed: with failure_mode_allow false, an RPC
// whose check cannot reach OPA fails with PERMISSION_DENIED (status_on_error
// defaults to 403) and never reaches its handler.
func TestOPAUnreachableFailClosed(t *testing.T) {
	ctx := testContext(t)
	opa := startOPA(t, pathResult)
	e := newEnv(t, opa.Addr)
	e.publish(ctx, extAuthzConfig(opa.Addr, false, false))

	// OPA answers first, so the side channel is connected when OPA goes.
	if _, err := e.client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("UnaryCall with OPA running: %v, want OK", err)
	}
	e.svc.nextHandled(ctx, t)

	opa.Stop()
	_, err := e.client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if got := status.Code(err); got != codes.PermissionDenied {
		t.Fatalf("UnaryCall with OPA stopped: %v, want PERMISSION_DENIED", err)
	}
	t.Logf("with OPA stopped: %v", err)
	e.svc.noneHandled(t)
}

// TestOPAUnreachableFailOpen: with failure_mode_allow and
// failure_mode_allow_header_add, an RPC whose check cannot reach its
// authorization server (a closed loopback port) reaches its handler, with
// x-envoy-auth-failure-mode-allowed: true and nothing from OPA.
func TestOPAUnreachableFailOpen(t *testing.T) {
	ctx := testContext(t)
	closed, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, closed)
	e.publish(ctx, extAuthzConfig(closed, true, true))

	if _, err := e.client.UnaryCall(metadata.AppendToOutgoingContext(ctx, "x-user", "mallory"), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("UnaryCall: %v, want OK (failure_mode_allow)", err)
	}
	h := e.svc.nextHandled(ctx, t)
	if got := h.md.Get(headerFailureModeAllowed); len(got) != 1 || got[0] != "true" {
		t.Errorf("the handler saw %s = %q, want [\"true\"]", headerFailureModeAllowed, got)
	}
	if got := h.md.Get("x-opa-user"); got != nil {
		t.Errorf("the handler saw x-opa-user = %q, want none: no authorization server answered", got)
	}
}

// TestFilterRequestAsOPASeesIt checks what OPA's input holds for the
// CheckRequest the library's filter really sends: the echo_header decision
// hands the whole input to the handler in x-opa-input. It is the
// end-to-end twin of TestOPAInputShape.
func TestFilterRequestAsOPASeesIt(t *testing.T) {
	ctx := testContext(t)
	opa := startOPA(t, pathEchoHeader)
	e := newEnv(t, opa.Addr)
	e.publish(ctx, extAuthzConfig(opa.Addr, false, false))

	callCtx := metadata.AppendToOutgoingContext(ctx, "x-user", "alice", "x-trace-bin", string([]byte{0, 1, 0xfe}))
	if _, err := e.client.UnaryCall(callCtx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("UnaryCall: %v, want OK", err)
	}
	h := e.svc.nextHandled(ctx, t)
	enc := h.md.Get("x-opa-input")
	if len(enc) != 1 {
		t.Fatalf("the handler saw x-opa-input = %q, want one value", enc)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(enc[0], "="))
	if err != nil {
		t.Fatalf("x-opa-input is not base64url: %v", err)
	}
	t.Logf("OPA's input for the filter's CheckRequest: %s", raw)
	var input map[string]any
	if err := json.Unmarshal(raw, &input); err != nil {
		t.Fatalf("x-opa-input is not JSON: %v", err)
	}
	get := func(path ...string) any {
		var v any = input
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[p]
		}
		return v
	}
	http := func(rest ...string) []string {
		return append([]string{"attributes", "request", "http"}, rest...)
	}
	for _, c := range []struct {
		path []string
		want any
	}{
		{http("method"), "POST"},
		{http("path"), "/grpc.testing.TestService/UnaryCall"},
		{http("protocol"), "HTTP/2"},
		{http("size"), float64(-1)},
		{[]string{"attributes", "destination", "address", "socketAddress", "address"}, "127.0.0.1"},
		{[]string{"attributes", "destination", "address", "socketAddress", "portValue"}, float64(e.addr.Port)},
		{[]string{"attributes", "source", "address", "socketAddress", "address"}, "127.0.0.1"},
		{[]string{"parsed_path"}, []any{"grpc.testing.TestService", "UnaryCall"}},
	} {
		if got := get(c.path...); !equalJSON(got, c.want) {
			t.Errorf("input.%s = %#v, want %#v", dotted(c.path), got, c.want)
		}
	}
	if port, _ := get("attributes", "source", "address", "socketAddress", "portValue").(float64); port <= 0 {
		t.Errorf("input.attributes.source.address.socketAddress.portValue = %v, want the client's port", port)
	}
	if got := get(http("headers")...); got != nil {
		t.Errorf("input.%s = %v, want nothing: A92 sends header_map only", dotted(http("headers")), got)
	}
	list, _ := get(http("headerMap", "headers")...).([]any)
	headers := map[string][]string{}
	for _, x := range list {
		hv, _ := x.(map[string]any)
		key, _ := hv["key"].(string)
		if _, has := hv["value"]; has {
			t.Errorf("header %q has a value field, want raw_value only", key)
		}
		rv, _ := hv["rawValue"].(string)
		dec, err := base64.StdEncoding.DecodeString(rv)
		if err != nil {
			t.Errorf("header %q: rawValue %q is not base64: %v", key, rv, err)
		}
		headers[key] = append(headers[key], string(dec))
	}
	t.Logf("headers in header_map, decoded from rawValue: %q", headers)
	if got := headers["x-user"]; len(got) != 1 || got[0] != "alice" {
		t.Errorf("header_map's x-user = %q, want [\"alice\"]", got)
	}
	// A92: a -bin header's raw_value is its bytes in base64, so OPA's rawValue
	// is base64 of that base64.
	if got := headers["x-trace-bin"]; len(got) != 1 || strings.TrimRight(got[0], "=") != "AAH+" {
		t.Errorf("header_map's x-trace-bin = %q, want [\"AAH+\"] (base64 of 00 01 fe)", got)
	}
}
