package accesslog_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/testutils/accesslogcfg"
)

// newCert returns a self-signed certificate with the given names.
func newCert(t testing.TB, serial int64, cn string, uris []string, dns []string, ips []string, emails []string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:   big.NewInt(serial),
		Subject:        pkix.Name{CommonName: cn, Organization: []string{"Example"}},
		NotBefore:      time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:       time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		DNSNames:       dns,
		EmailAddresses: emails,
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(netip.MustParseAddr(ip).AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var start = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)

// fullRecord is an RPC over mTLS with a value for every field.
func fullRecord(t testing.TB) *accesslog.Record {
	peer := newCert(t, 0x0a1b, "client", []string{"spiffe://cluster.local/ns/default/sa/client"},
		[]string{"a.example", "b.example"}, []string{"10.0.0.7"}, []string{"ops@example.com"})
	return &accesslog.Record{
		StartTime:  start,
		Duration:   1500 * time.Millisecond,
		FullMethod: "/helloworld.Greeter/SayHello",
		Authority:  "greeter.default.svc.cluster.local:50051",
		RequestHeaders: map[string][]string{
			"user-agent":      {"grpc-go/1.85.0"},
			"x-request-id":    {"cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2"},
			"x-forwarded-for": {"10.0.35.28", "10.0.0.1"},
			"trace-bin":       {"\x01\x02\xff"},
			"x-empty":         {""},
			"x-quote":         {`say "hi"`},
		},
		ResponseHeaders:     map[string][]string{"x-envoy-upstream-service-time": {"7"}},
		Trailers:            map[string][]string{"t1": {"v1"}},
		GRPCStatus:          5,
		GRPCMessage:         "no such name: 100%",
		HasGRPCStatus:       true,
		ResponseCode:        200,
		ResponseFlags:       accesslog.FlagDelayInjected | accesslog.FlagRateLimited,
		ResponseCodeDetails: "upstream_reset_before_response_started{connection termination}",
		BytesReceived:       17,
		BytesSent:           42,
		Remote:              netip.MustParseAddrPort("10.0.0.7:43210"),
		Local:               netip.MustParseAddrPort("[2001:db8::5]:50051"),
		TLSVersion:          tls.VersionTLS13,
		CipherSuite:         tls.TLS_AES_128_GCM_SHA256,
		ServerName:          "outbound_.50051_._.greeter.default.svc.cluster.local",
		PeerCertificates:    []*x509.Certificate{peer, newCert(t, 2, "ca", nil, nil, nil, nil)},
		LocalCertificate:    newCert(t, 3, "server", []string{"spiffe://cluster.local/ns/default/sa/greeter"}, []string{"greeter.default"}, nil, nil),
		RouteName:           "default",
		FilterChainName:     "inbound|50051",
		ConnectionID:        42,
	}
}

// opCase is one operator's text and typed JSON output for a record.
type opCase struct {
	format string
	text   string
	json   string // "" for text as a JSON string
}

// checkOps compiles each case's format as text and as a typed JSON value
// and checks both outputs for r.
func checkOps(t *testing.T, r *accesslog.Record, cases []opCase) {
	t.Helper()
	compile := accesslog.CompileWithEnv(map[string]string{"POD_NAME": "greeter-7d9f"}, "node-1")
	for _, c := range cases {
		want := c.json
		if want == "" {
			b, _ := json.Marshal(c.text)
			want = string(b)
		}
		cfg, err := compile([]*accesslogpb.AccessLog{
			logOf(t, stdout(accesslogcfg.TextFormat(c.format)), nil),
			logOf(t, stdout(accesslogcfg.JSONFormat(t, map[string]any{"v": c.format})), nil),
		})
		if err != nil {
			t.Errorf("%s: %v", c.format, err)
			continue
		}
		if got := string(cfg.Loggers()[0].AppendLine(nil, r)); got != c.text {
			t.Errorf("%s = %q, want %q", c.format, got, c.text)
		}
		if got := string(cfg.Loggers()[1].AppendLine(nil, r)); got != `{"v":`+want+"}\n" {
			t.Errorf("%s in typed JSON = %q, want %q", c.format, got, `{"v":`+want+"}\n")
		}
	}
}

// Every supported operator, on an RPC that has a value for each.
func TestOperators(t *testing.T) {
	r := fullRecord(t)
	peer, local := r.PeerCertificates[0], r.LocalCertificate
	sha256Of := func(c *x509.Certificate) string { s := sha256.Sum256(c.Raw); return hex.EncodeToString(s[:]) }
	sha1Of := func(c *x509.Certificate) string { s := sha1.Sum(c.Raw); return hex.EncodeToString(s[:]) }
	localStart := start.Local()
	checkOps(t, r, []opCase{
		{"%START_TIME%", "2026-03-04T05:06:07.123Z", ""},
		{"%START_TIME(%Y/%m/%dT%H:%M:%S%z %s)%", fmt.Sprintf("2026/03/04T05:06:07+0000 %d", start.Unix()), ""},
		{"%START_TIME(%s.%3f)%", fmt.Sprintf("%d.123", start.Unix()), ""},
		{"%START_TIME(%s.%6f)%", fmt.Sprintf("%d.123456", start.Unix()), ""},
		{"%START_TIME(%s.%9f)%", fmt.Sprintf("%d.123456789", start.Unix()), ""},
		{"%START_TIME(%f)%", "123456789", ""},
		{"%START_TIME(%E3S %E*S %E6f %Ez %E*z %E4Y)%", "07.123 07.123456789 123456 +00:00 +00:00:00 2026", ""},
		{"%START_TIME(%a %A %b %B %d %e %j %H %I %M %S %p %y %C %D %F %T %R %u %w %U %W %V %G %g %Z %%)%",
			"Wed Wednesday Mar March 04  4 063 05 05 06 07 AM 26 20 03/04/26 2026-03-04 05:06:07 05:06 3 3 09 09 10 2026 26 UTC %", ""},
		{"%START_TIME(%c|%x|%X|%r|%k|%l|%h|%P|%t)%", "Wed Mar  4 05:06:07 2026|03/04/26|05:06:07|05:06:07 AM| 5| 5|Mar|am|\t", ""},
		{"%START_TIME_LOCAL%", localStart.Format("2006-01-02T15:04:05.000-0700"), ""},
		{"%EMIT_TIME%", "2026-03-04T05:06:08.623Z", ""},
		{"%EMIT_TIME_LOCAL(%Y)%", "2026", ""},
		{"%DURATION%", "1500", "1500"},

		{"%REQ(:METHOD)% %REQ(:PATH)% %REQ(:SCHEME)%", "POST /helloworld.Greeter/SayHello https", ""},
		{"%REQ(:AUTHORITY)%", "greeter.default.svc.cluster.local:50051", ""},
		{"%REQ(USER-AGENT)%", "grpc-go/1.85.0", ""},
		{"%REQ(X-FORWARDED-FOR)%", "10.0.35.28", ""},
		{"%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "/helloworld.Greeter/SayHello", ""},
		{"%REQ(X-MISSING)%", "-", "null"},
		{"%REQ(USER-AGENT):4%", "grpc", ""},
		{"%REQ(TRACE-BIN)%", "AQL/", ""},
		{"%REQ(X-EMPTY)%", "", `""`},
		{"%REQ(X-QUOTE)%", `say "hi"`, ""},
		{"%REQUEST_HEADER(USER-AGENT)%", "grpc-go/1.85.0", ""},
		{"%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%", "7", ""},
		{"%RESPONSE_HEADER(:STATUS)%", "200", ""},
		{"%RESP(GRPC-STATUS)%", "-", "null"},
		{"%TRAILER(GRPC-STATUS)% %TRAILER(T1)%", "5 v1", ""},
		{"%RESPONSE_TRAILER(GRPC-MESSAGE)%", "no such name: 100%25", ""},
		{"%PATH% %PATH(NQ:PATH)% %PATH(WQ:ORIG)%", "/helloworld.Greeter/SayHello /helloworld.Greeter/SayHello -", ""},
		{"%QUERY_PARAM(a)%", "-", "null"},
		{"%PROTOCOL%", "HTTP/2", ""},
		{"%RESPONSE_CODE%", "200", "200"},
		{"%RESPONSE_CODE_DETAILS%", "upstream_reset_before_response_started{connection_termination}", ""},
		{"%RESPONSE_CODE_DETAILS(ALLOW_WHITESPACES)%", "upstream_reset_before_response_started{connection termination}", ""},
		{"%RESPONSE_FLAGS%", "DI,RL", ""},
		{"%RESPONSE_FLAGS_LONG%", "DelayInjected,RateLimited", ""},
		{"%GRPC_STATUS%", "NotFound", ""},
		{"%GRPC_STATUS(CAMEL_STRING)%", "NotFound", ""},
		{"%GRPC_STATUS(SNAKE_STRING)%", "NOT_FOUND", ""},
		{"%GRPC_STATUS(NUMBER)%", "5", "5"},
		{"%GRPC_STATUS_NUMBER%", "5", "5"},
		{"%BYTES_RECEIVED%", "17", "17"},
		{"%BYTES_SENT%", "42", "42"},
		{"%STREAM_ID%", "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2", ""},
		{"%ACCESS_LOG_TYPE%", "DownstreamEnd", ""},
		{"%CUSTOM_FLAGS%", "", `""`},

		{"%DOWNSTREAM_REMOTE_ADDRESS%", "10.0.0.7:43210", ""},
		{"%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", "10.0.0.7", ""},
		{"%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(16)%", "10.0.0.0/16", ""},
		{"%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(64)%", "10.0.0.7/32", ""},
		{"%DOWNSTREAM_REMOTE_PORT%", "43210", "43210"},
		{"%DOWNSTREAM_DIRECT_REMOTE_ADDRESS% %DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT% %DOWNSTREAM_DIRECT_REMOTE_PORT%", "10.0.0.7:43210 10.0.0.7 43210", ""},
		{"%DOWNSTREAM_LOCAL_ADDRESS%", "[2001:db8::5]:50051", ""},
		{"%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT%", "2001:db8::5", ""},
		{"%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT(64)%", "2001:db8::/64", ""},
		{"%DOWNSTREAM_LOCAL_PORT%", "50051", "50051"},
		{"%DOWNSTREAM_DIRECT_LOCAL_ADDRESS% %DOWNSTREAM_DIRECT_LOCAL_ADDRESS_WITHOUT_PORT(32)% %DOWNSTREAM_DIRECT_LOCAL_PORT%", "[2001:db8::5]:50051 2001:db8::/32 50051", ""},
		{"%CONNECTION_ID%", "42", "42"},
		// Envoy logs an SNI with '_' (as Istio's are) as invalid.
		{"%REQUESTED_SERVER_NAME%", "invalid:outbound_.50051_._.greeter.default.svc.cluster.local", ""},
		{"%REQUESTED_SERVER_NAME(HOST_FIRST)%", "greeter.default.svc.cluster.local:50051", ""},
		{"%ROUTE_NAME%", "default", ""},
		{"%FILTER_CHAIN_NAME%", "inbound|50051", ""},
		{"%HOSTNAME%", "node-1", ""},
		{"%ENVIRONMENT(POD_NAME)% %ENVIRONMENT(POD_NAME):3%", "greeter-7d9f gre", ""},
		{"%ENVIRONMENT(NOT_SET)%", "-", `"-"`},

		{"%DOWNSTREAM_TLS_VERSION%", "TLSv1.3", ""},
		{"%DOWNSTREAM_TLS_CIPHER%", "TLS_AES_128_GCM_SHA256", ""},
		{"%DOWNSTREAM_PEER_URI_SAN%", "spiffe://cluster.local/ns/default/sa/client", ""},
		{"%DOWNSTREAM_PEER_DNS_SAN%", "a.example,b.example", ""},
		{"%DOWNSTREAM_PEER_IP_SAN%", "10.0.0.7", ""},
		{"%DOWNSTREAM_PEER_EMAIL_SAN%", "ops@example.com", ""},
		{"%DOWNSTREAM_PEER_SUBJECT%", "CN=client,O=Example", ""},
		{"%DOWNSTREAM_PEER_ISSUER%", "CN=client,O=Example", ""},
		{"%DOWNSTREAM_PEER_SERIAL%", "0a1b", ""},
		{"%DOWNSTREAM_PEER_FINGERPRINT_256%", sha256Of(peer), ""},
		{"%DOWNSTREAM_PEER_FINGERPRINT_1%", sha1Of(peer), ""},
		{"%DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_256%", sha256Of(peer) + "," + sha256Of(r.PeerCertificates[1]), ""},
		{"%DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_1%", sha1Of(peer) + "," + sha1Of(r.PeerCertificates[1]), ""},
		{"%DOWNSTREAM_PEER_CHAIN_SERIALS%", "0a1b,02", ""},
		{"%DOWNSTREAM_PEER_CERT_V_START%", "2026-01-01T00:00:00.000Z", ""},
		{"%DOWNSTREAM_PEER_CERT_V_END(%Y-%m-%d)%", "2027-01-01", ""},
		{"%DOWNSTREAM_LOCAL_URI_SAN%", "spiffe://cluster.local/ns/default/sa/greeter", ""},
		{"%DOWNSTREAM_LOCAL_DNS_SAN%", "greeter.default", ""},
		{"%DOWNSTREAM_LOCAL_IP_SAN%", "-", "null"},
		{"%DOWNSTREAM_LOCAL_EMAIL_SAN%", "-", "null"},
		{"%DOWNSTREAM_LOCAL_SUBJECT%", "CN=server,O=Example", ""},
		{"100%% of %REQ(:METHOD)%", "100% of POST", ""},
	})
	_ = local

	// %DOWNSTREAM_PEER_CERT% is the PEM certificate, URL-encoded as Envoy
	// encodes it.
	cfg := compileOne(t, accesslogcfg.TextFormat("%DOWNSTREAM_PEER_CERT%"), nil)
	got := string(cfg.AppendLine(nil, r))
	if !strings.HasPrefix(got, "-----BEGIN%20CERTIFICATE-----%0A") || strings.ContainsAny(got, " \n+/=") {
		t.Errorf("%%DOWNSTREAM_PEER_CERT%% = %q, want a URL-encoded PEM certificate", got)
	}
	decoded, err := url.PathUnescape(got)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode([]byte(decoded)); b == nil || string(b.Bytes) != string(peer.Raw) {
		t.Errorf("%%DOWNSTREAM_PEER_CERT%% does not decode to the peer's certificate")
	}

	// %UNIQUE_ID% is a new version 4 UUID every line.
	u := compileOne(t, accesslogcfg.TextFormat("%UNIQUE_ID%"), nil)
	a, b := string(u.AppendLine(nil, r)), string(u.AppendLine(nil, r))
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if !uuid.MatchString(a) || !uuid.MatchString(b) || a == b {
		t.Errorf("%%UNIQUE_ID%% = %q, %q, want two different v4 UUIDs", a, b)
	}
}

// What a gRPC server has no value for prints what Envoy prints then: "-"
// (null in typed JSON), or 0 for a count.
func TestAbsentOperators(t *testing.T) {
	r := fullRecord(t)
	var cases []opCase
	for name, kind := range accesslog.CommandKinds() {
		if kind != "absent" {
			continue
		}
		format := "%" + name + "%"
		if strings.HasSuffix(name, "_METADATA") {
			format = "%" + name + "(ns:key)%"
		}
		switch {
		case strings.Contains(name, "BYTES") || strings.Contains(name, "RETRANSMITTED") || strings.HasSuffix(name, "_CONNECTION_ID") || strings.HasSuffix(name, "_COUNT"):
			cases = append(cases, opCase{format, "0", "0"})
		default:
			cases = append(cases, opCase{format, "-", "null"})
		}
	}
	if len(cases) < 40 {
		t.Fatalf("%d operators print nothing here, want the upstream ones and more", len(cases))
	}
	checkOps(t, r, cases)
}

// An RPC with nothing recorded (a stream reset before any response, on a
// plaintext connection): each operator prints "-", or 0 for a count.
func TestOperatorsEmptyRecord(t *testing.T) {
	checkOps(t, &accesslog.Record{}, []opCase{
		{"%START_TIME% %EMIT_TIME%", "- -", ""},
		{"%DURATION% %RESPONSE_CODE% %BYTES_RECEIVED% %CONNECTION_ID%", "0 0 0 0", ""},
		{"%RESPONSE_CODE%", "0", "0"},
		{"%REQ(:PATH)% %REQ(:AUTHORITY)% %REQ(:SCHEME)% %REQ(:METHOD)%", "- - http POST", ""},
		{"%RESP(:STATUS)% %TRAILER(GRPC-STATUS)%", "- -", ""},
		{"%GRPC_STATUS%", "-", "null"},
		{"%RESPONSE_FLAGS%", "-", ""},
		{"%RESPONSE_CODE_DETAILS% %ROUTE_NAME% %FILTER_CHAIN_NAME% %STREAM_ID%", "- - - -", ""},
		{"%DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_LOCAL_PORT%", "- -", ""},
		{"%DOWNSTREAM_LOCAL_PORT%", "-", "null"},
		{"%DOWNSTREAM_TLS_VERSION% %DOWNSTREAM_TLS_CIPHER% %DOWNSTREAM_PEER_URI_SAN% %DOWNSTREAM_LOCAL_URI_SAN%", "- - - -", ""},
		{"%DOWNSTREAM_PEER_CERT_V_START% %DOWNSTREAM_PEER_CHAIN_SERIALS% %REQUESTED_SERVER_NAME%", "- - -", ""},
	})
}

// gRPC statuses: the code sent, else the one Envoy infers from the HTTP
// status; codes without a name print as numbers.
func TestGRPCStatus(t *testing.T) {
	checkOps(t, &accesslog.Record{ResponseCode: 200, HasGRPCStatus: true, GRPCStatus: 0}, []opCase{
		{"%GRPC_STATUS% %GRPC_STATUS(SNAKE_STRING)%", "OK OK", ""},
	})
	checkOps(t, &accesslog.Record{ResponseCode: 200, HasGRPCStatus: true, GRPCStatus: 1}, []opCase{
		{"%GRPC_STATUS% %GRPC_STATUS(SNAKE_STRING)%", "Canceled CANCELLED", ""},
	})
	checkOps(t, &accesslog.Record{ResponseCode: 200, HasGRPCStatus: true, GRPCStatus: 42}, []opCase{
		{"%GRPC_STATUS% %GRPC_STATUS(SNAKE_STRING)%", "42 42", ""},
	})
	checkOps(t, &accesslog.Record{ResponseCode: 503}, []opCase{{"%GRPC_STATUS%", "Unavailable", ""}})
}

// In a trailers-only response (an RPC refused before any header), Envoy
// sees the status and the trailer metadata as response headers.
func TestTrailersOnly(t *testing.T) {
	checkOps(t, &accesslog.Record{
		ResponseCode: 200, HasGRPCStatus: true, GRPCStatus: 7, GRPCMessage: "RBAC: access denied",
		Trailers: map[string][]string{"x-denied-by": {"rbac"}}, TrailersOnly: true,
		ResponseCodeDetails: accesslog.RBACDenied(""),
	}, []opCase{
		{"%RESP(:STATUS)% %RESP(GRPC-STATUS)% %RESP(GRPC-MESSAGE)% %RESP(X-DENIED-BY)%", "200 7 RBAC: access denied rbac", ""},
		{"%TRAILER(GRPC-STATUS)% %TRAILER(X-DENIED-BY)%", "- -", ""},
		{"%RESPONSE_CODE_DETAILS%", "rbac_access_denied_matched_policy[none]", ""},
	})
}

// The SNI is logged as Envoy logs it: with characters a host name cannot
// have replaced, after "invalid:".
func TestServerNameSanitized(t *testing.T) {
	checkOps(t, &accesslog.Record{ServerName: "bad name\n.example", Authority: "host:1"}, []opCase{
		{"%REQUESTED_SERVER_NAME%", "invalid:bad_name_.example", ""},
		{"%REQUESTED_SERVER_NAME(SNI_FIRST:HOST)%", "invalid:bad_name_.example", ""},
	})
	checkOps(t, &accesslog.Record{Authority: "host:1", RequestHeaders: map[string][]string{"x-envoy-original-host": {"orig"}}}, []opCase{
		{"%REQUESTED_SERVER_NAME%", "-", "null"},
		{"%REQUESTED_SERVER_NAME(SNI_FIRST)%", "orig", ""},
		{"%REQUESTED_SERVER_NAME(SNI_FIRST:HOST)%", "host:1", ""},
		{"%REQUESTED_SERVER_NAME(HOST_FIRST:ORIG)%", "orig", ""},
	})
}

// The response code details of the filters, as Envoy's write them.
func TestRBACDenied(t *testing.T) {
	for policy, want := range map[string]string{
		"":                     "rbac_access_denied_matched_policy[none]",
		"deny-all":             "rbac_access_denied_matched_policy[deny-all]",
		"ab df\txy":            "rbac_access_denied_matched_policy[ab_df_xy]",
		"ns[a]-policy[b] rule": "rbac_access_denied_matched_policy[ns[a]-policy[b]_rule]",
	} {
		if got := accesslog.RBACDenied(policy); got != want {
			t.Errorf("RBACDenied(%q) = %q, want %q", policy, got, want)
		}
	}
	if got := (accesslog.FlagUnauthorizedExternalService | accesslog.FlagFailedLocalHealthCheck | accesslog.FlagUnconditionalDropOverload).String(); got != "LH,UAEX,UDO" {
		t.Errorf("flags = %q, want LH,UAEX,UDO (Envoy's order)", got)
	}
	if got := accesslog.Flags(0).String(); got != "-" {
		t.Errorf("no flag = %q, want -", got)
	}
}

// Every operator Envoy knows is classified and compiles with its syntax;
// the config names those not recorded here.
func TestEveryCommandCompiles(t *testing.T) {
	params := map[string]string{
		"REQ": "x", "REQUEST_HEADER": "x", "STREAM_INFO_REQ": "x", "RESP": "x", "RESPONSE_HEADER": "x",
		"TRAILER": "x", "RESPONSE_TRAILER": "x", "QUERY_PARAM": "x", "ENVIRONMENT": "HOME",
		"CLUSTER_METADATA": "ns", "UPSTREAM_METADATA": "ns",
	}
	r := fullRecord(t)
	for name, kind := range accesslog.CommandKinds() {
		format := "%" + name + "%"
		if p, ok := params[name]; ok {
			format = "%" + name + "(" + p + ")%"
		}
		cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{logOf(t, stdout(accesslogcfg.TextFormat(format)), nil)})
		switch {
		case err != nil:
			t.Errorf("%s: %v", format, err)
		case (kind == "notrecorded") != (len(cfg.NotRecorded()) == 1):
			t.Errorf("%s (%s): NotRecorded() = %q", format, kind, cfg.NotRecorded())
		default:
			compileOne(t, accesslogcfg.TextFormat(format), nil).AppendLine(nil, r)
		}
	}
}

// TestNewStreamID: a random version 4 UUID in its text form, new each
// time, made without allocating (one per logged RPC without x-request-id).
func TestNewStreamID(t *testing.T) {
	a, b := accesslog.NewStreamID(), accesslog.NewStreamID()
	if a == b {
		t.Fatalf("two stream IDs are equal: %v", a)
	}
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if s := a.String(); !re.MatchString(s) {
		t.Errorf("stream ID %q is not a version 4 UUID", s)
	}
	if n := testing.AllocsPerRun(100, func() { _ = accesslog.NewStreamID() }); n != 0 {
		t.Errorf("NewStreamID allocates %v times, want 0", n)
	}
}

// Operators Envoy would give a value that this server does not record
// print "-" (null in typed JSON), and the config names them, with why, for
// the server's warning: a log field is no reason to NACK a Listener.
func TestNotRecordedOperators(t *testing.T) {
	r := fullRecord(t)
	var cases []opCase
	for name, kind := range accesslog.CommandKinds() {
		if kind != "notrecorded" {
			continue
		}
		cases = append(cases, opCase{"%" + name + "%", "-", "null"})
	}
	if len(cases) == 0 {
		t.Fatal("no operator is classified as not recorded")
	}
	checkOps(t, r, cases)

	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{
		logOf(t, stdout(accesslogcfg.TextFormat("%DYNAMIC_METADATA(envoy.filters.http.rbac:shadow_effective_policy_id)% %REQ(:PATH)% %REQUEST_DURATION%\n")), nil),
		logOf(t, stdout(accesslogcfg.JSONFormat(t, map[string]any{"d": "%REQUEST_DURATION%"})), nil),
	})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	want := []string{
		"%DYNAMIC_METADATA% (the server's filters set no dynamic metadata)",
		"%REQUEST_DURATION% (the time the request's last byte arrived is not recorded)",
	}
	if got := cfg.NotRecorded(); !slices.Equal(got, want) {
		t.Errorf("NotRecorded() = %q, want %q", got, want)
	}
	if got, want := string(cfg.Loggers()[0].AppendLine(nil, r)), "- /helloworld.Greeter/SayHello -\n"; got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
	plain, err := accesslog.Compile([]*accesslogpb.AccessLog{logOf(t, stdout(accesslogcfg.TextFormat("%REQ(:PATH)%")), nil)})
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.NotRecorded(); got != nil {
		t.Errorf("NotRecorded() of a config using none = %q, want nil", got)
	}
}
