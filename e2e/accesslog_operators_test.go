package e2e_test

// End-to-end tests of the access log's command operators: every operator
// docs/observability.md lists as supported, written by a real server for
// RPCs of a real grpc-go client (unary, bidi streaming, failed), in
// plaintext and over mTLS, in text and JSON formats.

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// opRPC is what the test knows of one logged RPC, to compute the values
// its line must have.
type opRPC struct {
	kind           string // "unary", "stream", "failed", "conn2"
	method         string
	src            netip.AddrPort // the client's address
	server         netip.AddrPort
	sent, received int64     // the client's wire counts of the RPC's messages
	begin, end     time.Time // around the RPC, on the client
}

// opCase is one operator and the value it must print for an RPC: want
// returns it exactly, or check judges it.
type opCase struct {
	op    string
	want  func(r *opRPC) string
	check func(r *opRPC, got string) error
}

func is(s string) func(*opRPC) string { return func(*opRPC) string { return s } }

// byKind returns the value for each kind of RPC, def for the others.
func byKind(def string, kv ...string) func(*opRPC) string {
	return func(r *opRPC) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == r.kind {
				return kv[i+1]
			}
		}
		return def
	}
}

// inWindow checks a time printed in layout (UTC unless local) against the
// RPC's window, at the layout's precision.
func inWindow(layout string, precision time.Duration, local bool) func(*opRPC, string) error {
	return func(r *opRPC, got string) error {
		loc := time.UTC
		if local {
			loc = time.Local
		}
		ts, err := time.ParseInLocation(layout, got, loc)
		if err != nil {
			return err
		}
		if ts.Before(r.begin.Truncate(precision)) || ts.After(r.end) {
			return fmt.Errorf("%v is not within the RPC's [%v, %v]", ts, r.begin, r.end)
		}
		return nil
	}
}

// isUUID checks that got is a version 4 UUID.
func isUUID(_ *opRPC, got string) error {
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(got) {
		return errors.New("not a version 4 UUID")
	}
	return nil
}

// operatorCases are the plaintext operators: every operator the docs list
// as supported but the TLS ones (tlsOperatorCases).
func operatorCases(t *testing.T, hostname string) []opCase {
	port := func(a netip.AddrPort) string { return strconv.Itoa(int(a.Port())) }
	return []opCase{
		// Times.
		{op: "%START_TIME%", check: inWindow("2006-01-02T15:04:05.000Z", time.Millisecond, false)},
		{op: "%START_TIME(%Y/%m/%d %H:%M:%E3S)%", check: inWindow("2006/01/02 15:04:05.000", time.Millisecond, false)},
		{op: "%START_TIME(%s)%", check: func(r *opRPC, got string) error {
			n, err := strconv.ParseInt(got, 10, 64)
			if err != nil || n < r.begin.Unix() || n > r.end.Unix() {
				return fmt.Errorf("not a second of the RPC's [%v, %v]", r.begin.Unix(), r.end.Unix())
			}
			return nil
		}},
		{op: "%START_TIME_LOCAL(%Y-%m-%dT%H:%M:%S%z)%", check: inWindow("2006-01-02T15:04:05-0700", time.Second, true)},
		{op: "%EMIT_TIME%", check: inWindow("2006-01-02T15:04:05.000Z", time.Millisecond, false)},
		{op: "%EMIT_TIME_LOCAL(%H:%M:%S)%", check: func(_ *opRPC, got string) error {
			_, err := time.Parse("15:04:05", got)
			return err
		}},
		{op: "%DURATION%", check: func(r *opRPC, got string) error {
			n, err := strconv.ParseInt(got, 10, 64)
			if err != nil || n < 0 || n > r.end.Sub(r.begin).Milliseconds()+1 {
				return fmt.Errorf("not a duration within the RPC's %v", r.end.Sub(r.begin))
			}
			return nil
		}},
		// The request.
		{op: "%REQ(:METHOD)%", want: is("POST")},
		{op: "%REQ(:PATH)%", want: func(r *opRPC) string { return r.method }},
		{op: "%REQ(:SCHEME)%", want: is("http")},
		{op: "%REQ(:AUTHORITY)%", want: func(r *opRPC) string { return r.server.String() }},
		{op: "%REQ(USER-AGENT)%", want: is("access-log-test grpc-go/" + grpc.Version)},
		{op: "%REQ(X-FOO)%", want: byKind("-", "unary", "bar", "stream", "baz")},
		{op: "%REQ(X-MISSING?X-FOO)%", want: byKind("-", "unary", "bar", "stream", "baz")},
		{op: "%REQ(X-FOO?X-CASE)%", want: byKind("failed", "unary", "bar", "stream", "baz", "conn2", "conn2")},
		{op: "%REQ(X-MISSING)%", want: is("-")},
		{op: "%REQ(X-LONG):4%", want: byKind("-", "unary", "abcd")},
		{op: "%REQ(X-MISSING?X-LONG):6%", want: byKind("-", "unary", "abcdef")},
		{op: "%REQ(X-BIN-BIN)%", want: byKind("-", "unary", "AAEC/w")},
		{op: "%REQUEST_HEADER(X-FOO)%", want: byKind("-", "unary", "bar", "stream", "baz")},
		{op: "%STREAM_INFO_REQ(X-FOO)%", want: byKind("-", "unary", "bar", "stream", "baz")},
		{op: "%REQ(X-REQUEST-ID)%", want: byKind("-", "unary", "0000abcd-req")},
		{op: "%PATH%", want: func(r *opRPC) string { return r.method }},
		{op: "%PATH(NQ:PATH):10%", want: func(r *opRPC) string { return r.method[:10] }},
		{op: "%QUERY_PARAM(q)%", want: is("-")},
		// The response: headers, trailers, and a trailers-only response
		// (the failed RPC), whose status and trailer metadata are headers.
		{op: "%RESP(:STATUS)%", want: is("200")},
		{op: "%RESP(X-RESP)%", want: byKind("-", "unary", "h-unary", "stream", "h-stream")},
		{op: "%RESP(X-MISSING?X-RESP)%", want: byKind("-", "unary", "h-unary", "stream", "h-stream")},
		{op: "%RESP(X-RESP):3%", want: byKind("-", "unary", "h-u", "stream", "h-s")},
		{op: "%RESPONSE_HEADER(X-RESP)%", want: byKind("-", "unary", "h-unary", "stream", "h-stream")},
		{op: "%RESP(X-TRAIL)%", want: byKind("-", "failed", "t-failed")},
		{op: "%RESP(GRPC-STATUS)%", want: byKind("-", "failed", "5")},
		{op: "%RESP(GRPC-MESSAGE)%", want: byKind("-", "failed", "no such 100%25")},
		{op: "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%", want: is("-")},
		{op: "%TRAILER(X-TRAIL)%", want: byKind("-", "unary", "t-unary", "stream", "t-stream")},
		{op: "%TRAILER(X-MISSING?X-TRAIL)%", want: byKind("-", "unary", "t-unary", "stream", "t-stream")},
		{op: "%TRAILER(X-TRAIL):3%", want: byKind("-", "unary", "t-u", "stream", "t-s")},
		{op: "%RESPONSE_TRAILER(X-TRAIL)%", want: byKind("-", "unary", "t-unary", "stream", "t-stream")},
		{op: "%TRAILER(GRPC-STATUS)%", want: byKind("0", "failed", "-")},
		{op: "%TRAILER(GRPC-MESSAGE)%", want: is("-")},
		{op: "%PROTOCOL%", want: is("HTTP/2")},
		{op: "%RESPONSE_CODE%", want: is("200")},
		{op: "%GRPC_STATUS%", want: byKind("OK", "failed", "NotFound")},
		{op: "%GRPC_STATUS(CAMEL_STRING)%", want: byKind("OK", "failed", "NotFound")},
		{op: "%GRPC_STATUS(SNAKE_STRING)%", want: byKind("OK", "failed", "NOT_FOUND")},
		{op: "%GRPC_STATUS(NUMBER)%", want: byKind("0", "failed", "5")},
		{op: "%GRPC_STATUS_NUMBER%", want: byKind("0", "failed", "5")},
		{op: "%RESPONSE_FLAGS%", want: is("-")},
		{op: "%RESPONSE_FLAGS_LONG%", want: is("-")},
		{op: "%RESPONSE_CODE_DETAILS%", want: is("via_upstream")},
		{op: "%RESPONSE_CODE_DETAILS(ALLOW_WHITESPACES)%", want: is("via_upstream")},
		{op: "%BYTES_RECEIVED%", want: func(r *opRPC) string { return strconv.FormatInt(r.sent, 10) }},
		{op: "%BYTES_SENT%", want: func(r *opRPC) string { return strconv.FormatInt(r.received, 10) }},
		{op: "%ROUTE_NAME%", want: is("all")},
		{op: "%UPSTREAM_HOST%", want: is("-")},
		// Envoy's stream ID is the request's x-request-id, which its
		// connection manager generates (a UUID) for a request without one.
		{op: "%STREAM_ID%", check: func(r *opRPC, got string) error {
			if r.kind == "unary" {
				if got != "0000abcd-req" {
					return errors.New("not the request's x-request-id")
				}
				return nil
			}
			return isUUID(r, got)
		}},
		{op: "%UNIQUE_ID%", check: isUUID},
		{op: "%ACCESS_LOG_TYPE%", want: is("DownstreamEnd")},
		{op: "[%CUSTOM_FLAGS%]", want: is("[]")},
		// The connection.
		{op: "%DOWNSTREAM_REMOTE_ADDRESS%", want: func(r *opRPC) string { return r.src.String() }},
		{op: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", want: is("127.0.0.1")},
		{op: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(16)%", want: is("127.0.0.0/16")},
		{op: "%DOWNSTREAM_REMOTE_PORT%", want: func(r *opRPC) string { return port(r.src) }},
		{op: "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS%", want: func(r *opRPC) string { return r.src.String() }},
		{op: "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%", want: is("127.0.0.1")},
		{op: "%DOWNSTREAM_DIRECT_REMOTE_PORT%", want: func(r *opRPC) string { return port(r.src) }},
		{op: "%DOWNSTREAM_LOCAL_ADDRESS%", want: func(r *opRPC) string { return r.server.String() }},
		{op: "%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT%", want: is("127.0.0.1")},
		{op: "%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT(8)%", want: is("127.0.0.0/8")},
		{op: "%DOWNSTREAM_LOCAL_PORT%", want: func(r *opRPC) string { return port(r.server) }},
		{op: "%DOWNSTREAM_DIRECT_LOCAL_ADDRESS%", want: func(r *opRPC) string { return r.server.String() }},
		{op: "%DOWNSTREAM_DIRECT_LOCAL_ADDRESS_WITHOUT_PORT%", want: is("127.0.0.1")},
		{op: "%DOWNSTREAM_DIRECT_LOCAL_PORT%", want: func(r *opRPC) string { return port(r.server) }},
		{op: "%FILTER_CHAIN_NAME%", want: is("ops")},
		{op: "%REQUESTED_SERVER_NAME%", want: is("-")},
		{op: "%REQUESTED_SERVER_NAME(SNI_FIRST)%", want: func(r *opRPC) string { return r.server.String() }},
		{op: "%REQUESTED_SERVER_NAME(HOST_FIRST:HOST)%", want: func(r *opRPC) string { return r.server.String() }},
		{op: "%DOWNSTREAM_TLS_VERSION%", want: is("-")},
		{op: "%DOWNSTREAM_TLS_CIPHER%", want: is("-")},
		{op: "%DOWNSTREAM_PEER_URI_SAN%", want: is("-")},
		{op: "%DOWNSTREAM_LOCAL_URI_SAN%", want: is("-")},
		// The process.
		{op: "%HOSTNAME%", want: is(hostname)},
		{op: "%ENVIRONMENT(XDS_E2E_ACCESS_LOG)%", want: is("from-the-environment")},
		{op: "%ENVIRONMENT(XDS_E2E_ACCESS_LOG):4%", want: is("from")},
		{op: "%ENVIRONMENT(XDS_E2E_NOT_SET)%", want: is("-")},
	}
}

// opsFormat is a text format printing x-case and then each case's
// operator, separated by tabs.
func opsFormat(cases []opCase) string {
	var b strings.Builder
	b.WriteString("%REQ(X-CASE)%")
	for _, c := range cases {
		b.WriteString("\t" + c.op)
	}
	return b.String() + "\n"
}

// checkOpLines checks the line of each RPC of rpcs in lines (formatted by
// opsFormat(cases)), and returns the fields of each line by x-case.
func checkOpLines(t *testing.T, lines []string, cases []opCase, rpcs []*opRPC) map[string][]string {
	t.Helper()
	byCase := map[string][]string{}
	for _, l := range lines {
		fields := strings.Split(l, "\t")
		if len(fields) != len(cases)+1 {
			t.Fatalf("line with %d fields, want %d: %q", len(fields), len(cases)+1, l)
		}
		byCase[fields[0]] = fields[1:]
	}
	for _, r := range rpcs {
		fields, ok := byCase[r.kind]
		if !ok {
			t.Errorf("no line for the %s RPC in:\n%s", r.kind, strings.Join(lines, "\n"))
			continue
		}
		for i, c := range cases {
			got := fields[i]
			if c.check != nil {
				if err := c.check(r, got); err != nil {
					t.Errorf("%s RPC: %s printed %q: %v", r.kind, c.op, got, err)
				}
				continue
			}
			if want := c.want(r); got != want {
				t.Errorf("%s RPC: %s printed %q, want %q", r.kind, c.op, got, want)
			}
		}
	}
	return byCase
}

// rpcRunner runs the RPCs of the operator tests on a client whose wire
// bytes it counts, and records what the lines must say.
type rpcRunner struct {
	c      *testClient
	wire   *wireBytes
	server netip.AddrPort
	src    netip.AddrPort
	rpcs   []*opRPC
}

// run runs one RPC of kind with the request headers kv, by do.
func (r *rpcRunner) run(ctx context.Context, t *testing.T, kind, method string, do func(ctx context.Context) error, kv ...string) {
	t.Helper()
	rpc := &opRPC{kind: kind, method: method, src: r.src, server: r.server}
	sent, recv := r.wire.sent.Load(), r.wire.received.Load()
	rpc.begin = time.Now()
	err := do(metadata.AppendToOutgoingContext(ctx, append([]string{caseHeader, kind}, kv...)...))
	rpc.end = time.Now()
	if kind == "failed" {
		if code, msg := statusOf(err); code != 5 || msg != failMessage {
			t.Fatalf("%s RPC: %v %q, want NOT_FOUND %q", kind, code, msg, failMessage)
		}
	} else if err != nil {
		t.Fatalf("%s RPC: %v", kind, err)
	}
	rpc.sent, rpc.received = r.wire.sent.Load()-sent, r.wire.received.Load()-recv
	r.rpcs = append(r.rpcs, rpc)
}

// unary makes a UnaryCall with a 100-byte payload.
func (r *rpcRunner) unary(ctx context.Context) error {
	_, err := r.c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 100)}})
	return err
}

// stream makes a FullDuplexCall of three messages each way.
func (r *rpcRunner) stream(ctx context.Context) error {
	s, err := r.c.FullDuplexCall(ctx)
	if err != nil {
		return err
	}
	for _, n := range []int{10, 200, 3000} {
		if err := s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, n)}}); err != nil {
			return err
		}
		if _, err := s.Recv(); err != nil {
			return err
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("stream end: %v, want io.EOF", err)
	}
	return nil
}

func (r *rpcRunner) empty(ctx context.Context) error {
	_, err := r.c.EmptyCall(ctx, &testpb.Empty{})
	return err
}

// connectionIDs checks %CONNECTION_ID% (the first field of fields): the
// same for the RPCs of one connection, another for another connection.
func connectionIDs(t *testing.T, fields map[string][]string, same []string, other string) {
	t.Helper()
	id := fields[same[0]][0]
	if n, err := strconv.ParseUint(id, 10, 64); err != nil || n == 0 {
		t.Errorf("%%CONNECTION_ID%% of the %s RPC is %q, want a number > 0", same[0], id)
	}
	for _, k := range same[1:] {
		if got := fields[k][0]; got != id {
			t.Errorf("%%CONNECTION_ID%% of the %s RPC is %q, want %q as for the %s RPC on the same connection", k, got, id, same[0])
		}
	}
	if other != "" {
		if got := fields[other][0]; got == id {
			t.Errorf("%%CONNECTION_ID%% of the %s RPC, on another connection, is %q too", other, got)
		}
	}
}

// TestAccessLog_Operators: each supported command operator, in a text
// format and in typed and untyped JSON, prints what Envoy would for a
// unary RPC, a bidi streaming RPC and a failed one (trailers-only) on one
// plaintext connection, and an RPC on a second connection: times in the
// RPC's window, request headers as sent (fallback, maximum length, binary
// in wire form, pseudo-headers), response headers and trailers as sent,
// the status in its three forms, byte counts equal to grpc-go's own wire
// counts, the addresses of both ends, the route, the chain, and one
// connection ID per connection.
func TestAccessLog_Operators(t *testing.T) {
	t.Setenv("XDS_E2E_ACCESS_LOG", "from-the-environment")
	ctx := testContext(t)
	env := newTestEnv(t)
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	cases := append([]opCase{{op: "%CONNECTION_ID%", check: func(*opRPC, string) error { return nil }}}, operatorCases(t, hostname)...)
	dir := t.TempDir()
	textPath, typedPath, untypedPath := filepath.Join(dir, "text.log"), filepath.Join(dir, "typed.log"), filepath.Join(dir, "untyped.log")
	jsonFields := map[string]any{
		"case": "%REQ(X-CASE)%", "status": "%GRPC_STATUS_NUMBER%", "code": "%RESPONSE_CODE%", "port": "%DOWNSTREAM_LOCAL_PORT%",
		"received": "%BYTES_RECEIVED%", "missing": "%REQ(X-MISSING)%", "mixed": "foo=%REQ(X-FOO)% missing=%REQ(X-MISSING)%",
		"protocol": "%PROTOCOL%", "nested": map[string]any{"flags": "%RESPONSE_FLAGS%", "list": []any{"%ROUTE_NAME%", 1.5, true}},
		"literal": "100%%", "number": 7,
	}
	untyped, err := structpb.NewStruct(map[string]any{"case": "%REQ(X-CASE)%", "status": "%GRPC_STATUS_NUMBER%", "missing": "%REQ(X-MISSING)%"})
	if err != nil {
		t.Fatal(err)
	}
	rc := allRoutes("ops-routes")
	rc.VirtualHosts[0].Routes[0].Name = "all"
	s, addr := startServing(ctx, t, env, func(a net.Addr) *listenerpb.Listener {
		return loggingListener(t, testListener(a, []chainSpec{{name: "ops", routes: rc}}, nil),
			fileLogWith(t, "text", textPath, accesslogcfg.TextFormat(opsFormat(cases)), nil),
			fileLogWith(t, "typed", typedPath, accesslogcfg.JSONFormat(t, jsonFields), nil),
			&accesslogpb.AccessLog{Name: "untyped", ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: anyOf(t, &filepb.FileAccessLog{
				Path: untypedPath, AccessLogFormat: &filepb.FileAccessLog_JsonFormat{JsonFormat: untyped}})}})
	}, nil, behaviour(nil)...)
	server := addr.(*net.TCPAddr).AddrPort()
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freePort(t, "127.0.0.1"))
	wire := &wireBytes{}
	r := &rpcRunner{c: newClient(t, addr, "127.0.0.1", src.Port(), grpc.WithStatsHandler(wire), grpc.WithUserAgent("access-log-test")),
		wire: wire, server: server, src: src}
	r.run(ctx, t, "unary", methodUnary, r.unary, "x-foo", "bar", "x-long", "abcdefghij", "x-bin-bin", "\x00\x01\x02\xff",
		"x-request-id", "0000abcd-req", hdrSetHeader, "h-unary", hdrSetTrailer, "t-unary")
	r.run(ctx, t, "stream", methodStream, r.stream, "x-foo", "baz", hdrSetHeader, "h-stream", hdrSetTrailer, "t-stream")
	r.run(ctx, t, "failed", methodEmpty, r.empty, hdrFail, "5", hdrSetTrailer, "t-failed")
	src2 := netip.AddrPortFrom(src.Addr(), freePort(t, "127.0.0.1"))
	other := &rpcRunner{c: newClient(t, addr, "127.0.0.1", src2.Port(), grpc.WithStatsHandler(wire), grpc.WithUserAgent("access-log-test")),
		wire: wire, server: server, src: src2}
	other.run(ctx, t, "conn2", methodEmpty, other.empty)
	s.GracefulStop() // writes the last lines

	text, err := os.ReadFile(textPath)
	if err != nil {
		t.Fatal(err)
	}
	rpcs := append(r.rpcs, other.rpcs...)
	fields := checkOpLines(t, linesOf(string(text)), cases, rpcs)
	connectionIDs(t, fields, []string{"unary", "stream", "failed"}, "conn2")
	if r.rpcs[0].sent <= 100 || r.rpcs[1].received <= 3210 {
		t.Errorf("client wire counts %+v %+v: too small for the messages sent", r.rpcs[0], r.rpcs[1])
	}

	// Typed JSON: one object a line, keys sorted, counts as numbers, null
	// for an operator without a value, "-" inside a string.
	typed, err := os.ReadFile(typedPath)
	if err != nil {
		t.Fatal(err)
	}
	wantTyped := map[string]string{}
	for _, rpc := range rpcs {
		status, foo := byKind("0", "failed", "5")(rpc), byKind("-", "unary", "bar", "stream", "baz")(rpc)
		wantTyped[rpc.kind] = fmt.Sprintf(`{"case":%q,"code":200,"literal":"100%%","missing":null,"mixed":"foo=%s missing=-","nested":{"flags":"-","list":["all",1.5,true]},"number":7,"port":%d,"protocol":"HTTP/2","received":%d,"status":%s}`,
			rpc.kind, foo, server.Port(), rpc.sent, status)
	}
	checkJSONLines(t, "typed JSON", linesOf(string(typed)), wantTyped)
	// Untyped JSON (FileAccessLog.json_format): every value a string.
	untypedLines, err := os.ReadFile(untypedPath)
	if err != nil {
		t.Fatal(err)
	}
	wantUntyped := map[string]string{}
	for _, rpc := range rpcs {
		wantUntyped[rpc.kind] = fmt.Sprintf(`{"case":%q,"missing":"-","status":%q}`, rpc.kind, byKind("0", "failed", "5")(rpc))
	}
	checkJSONLines(t, "untyped JSON", linesOf(string(untypedLines)), wantUntyped)
}

// checkJSONLines checks that lines are exactly the values of want (by the
// "case" member), each valid JSON.
func checkJSONLines(t *testing.T, what string, lines []string, want map[string]string) {
	t.Helper()
	if len(lines) != len(want) {
		t.Errorf("%s: %d lines, want %d:\n%s", what, len(lines), len(want), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		var m struct{ Case string }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("%s: line %q is not JSON: %v", what, l, err)
			continue
		}
		if l != want[m.Case] {
			t.Errorf("%s, %s RPC:\n got %s\nwant %s", what, m.Case, l, want[m.Case])
		}
	}
}

// tlsOperatorCases are the TLS operators, for an RPC over mTLS with the
// client certificate client and the server certificate server.
func tlsOperatorCases(client, server *x509.Certificate) []opCase {
	fp256 := func(c *x509.Certificate) string { s := sha256.Sum256(c.Raw); return hex.EncodeToString(s[:]) }
	fp1 := func(c *x509.Certificate) string { s := sha1.Sum(c.Raw); return hex.EncodeToString(s[:]) }
	certTime := func(ts time.Time) string { return ts.UTC().Format("2006-01-02T15:04:05.000Z") }
	return []opCase{
		{op: "%REQ(:SCHEME)%", want: is("https")},
		{op: "%DOWNSTREAM_TLS_VERSION%", want: is("TLSv1.3")},
		{op: "%DOWNSTREAM_TLS_CIPHER%", check: func(_ *opRPC, got string) error {
			for _, s := range tls.CipherSuites() {
				if s.Name == got && strings.Contains(strings.Join(versionNames(s.SupportedVersions), ","), "TLS 1.3") {
					return nil
				}
			}
			return errors.New("not a TLS 1.3 cipher suite")
		}},
		{op: "%REQUESTED_SERVER_NAME%", want: is("server.test")},
		// grpc-go's TLS credentials with a ServerName send it as :authority.
		{op: "%REQ(:AUTHORITY)%", want: is("server.test")},
		{op: "%REQUESTED_SERVER_NAME(HOST_FIRST)%", want: is("server.test")},
		{op: "%DOWNSTREAM_PEER_URI_SAN%", want: is("spiffe://a.test/ns/ns1/sa/client")},
		{op: "%DOWNSTREAM_PEER_DNS_SAN%", want: is("-")},
		{op: "%DOWNSTREAM_PEER_IP_SAN%", want: is("-")},
		{op: "%DOWNSTREAM_PEER_EMAIL_SAN%", want: is("-")},
		{op: "%DOWNSTREAM_PEER_SUBJECT%", want: is("CN=client")},
		{op: "%DOWNSTREAM_PEER_ISSUER%", want: is(client.Issuer.String())},
		{op: "%DOWNSTREAM_PEER_SERIAL%", want: is(hex.EncodeToString(client.SerialNumber.Bytes()))},
		{op: "%DOWNSTREAM_PEER_FINGERPRINT_256%", want: is(fp256(client))},
		{op: "%DOWNSTREAM_PEER_FINGERPRINT_1%", want: is(fp1(client))},
		{op: "%DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_256%", want: is(fp256(client))},
		{op: "%DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_1%", want: is(fp1(client))},
		{op: "%DOWNSTREAM_PEER_CHAIN_SERIALS%", want: is(hex.EncodeToString(client.SerialNumber.Bytes()))},
		{op: "%DOWNSTREAM_PEER_CERT%", check: func(_ *opRPC, got string) error {
			pemText, err := url.QueryUnescape(got)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(pemText, "-----BEGIN CERTIFICATE-----\n") || strings.ContainsAny(got, "\n /+=") {
				return errors.New("not a URL-encoded PEM certificate")
			}
			return nil
		}},
		{op: "%DOWNSTREAM_PEER_CERT_V_START%", want: is(certTime(client.NotBefore))},
		{op: "%DOWNSTREAM_PEER_CERT_V_END(%Y-%m-%d %H:%M:%S)%", want: is(client.NotAfter.UTC().Format("2006-01-02 15:04:05"))},
		{op: "%DOWNSTREAM_LOCAL_URI_SAN%", want: is("spiffe://a.test/server")},
		{op: "%DOWNSTREAM_LOCAL_DNS_SAN%", want: is("server.test")},
		{op: "%DOWNSTREAM_LOCAL_IP_SAN%", want: is("-")},
		{op: "%DOWNSTREAM_LOCAL_EMAIL_SAN%", want: is("-")},
		{op: "%DOWNSTREAM_LOCAL_SUBJECT%", want: is(server.Subject.String())},
		{op: "%FILTER_CHAIN_NAME%", want: is("mtls")},
		{op: "%GRPC_STATUS%", want: is("OK")},
		{op: "%BYTES_RECEIVED%", want: func(r *opRPC) string { return strconv.FormatInt(r.sent, 10) }},
		{op: "%BYTES_SENT%", want: func(r *opRPC) string { return strconv.FormatInt(r.received, 10) }},
	}
}

func versionNames(vs []uint16) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = tls.VersionName(v)
	}
	return out
}

// TestAccessLog_TLSOperators: over mTLS, the TLS operators print the
// connection's version, cipher and SNI and the client's and the server's
// certificates as Envoy does (URI SANs joined with ",", serials in hex,
// fingerprints, validity), for a unary and a bidi streaming RPC of one
// connection; the scheme is https.
func TestAccessLog_TLSOperators(t *testing.T) {
	ctx := testContext(t)
	pki := newSPIFFEPKI(t)
	env := newProvidersEnv(t, pki.providers(time.Hour))
	leaf := pki.client(t, "a.test", "spiffe://a.test/ns/ns1/sa/client")
	cases := append([]opCase{{op: "%CONNECTION_ID%", check: func(*opRPC, string) error { return nil }}}, tlsOperatorCases(leaf.Cert, pki.server.Cert)...)
	path := filepath.Join(t.TempDir(), "tls.log")
	lis, _ := listen(t, "127.0.0.1")
	s, addr := startTLSServerOn(ctx, t, env, lis, func(a net.Addr) *listenerpb.Listener {
		return loggingListener(t, identityListener(t, a, tlsChain{name: "mtls", tls: mtlsWith(instSPIFFE, true)}),
			fileLogWith(t, "tls", path, accesslogcfg.TextFormat(opsFormat(cases)), nil))
	}, behaviour(nil)...)
	wire := &wireBytes{}
	r := &rpcRunner{c: newClient(t, addr, "127.0.0.1", 0, pki.creds(leaf), grpc.WithStatsHandler(wire)), wire: wire, server: addr.(*net.TCPAddr).AddrPort()}
	r.run(ctx, t, "unary", methodUnary, r.unary)
	r.run(ctx, t, "stream", methodStream, r.stream)
	s.GracefulStop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fields := checkOpLines(t, linesOf(string(b)), cases, r.rpcs)
	connectionIDs(t, fields, []string{"unary", "stream"}, "")
}
