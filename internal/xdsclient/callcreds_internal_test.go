package xdsclient

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/proxyless-grpc/xds/internal/testutils/testcerts"
)

// secureCtx is the context of a stream over TLS, as gRPC passes it to call
// credentials.
func secureCtx() context.Context {
	return credentials.NewContextWithRequestInfo(context.Background(), credentials.RequestInfo{
		AuthInfo: credentials.TLSInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}},
	})
}

// TestTokenFileCreds: the header of each stream comes from the file as it
// is then: a token rotated before it expires is used at once; an unreadable
// file or an invalid token keeps the previous token while it is valid, and
// fails the stream (UNAVAILABLE, UNAUTHENTICATED) without one; a token is
// treated as expired 30 s before its exp claim; nothing is sent over an
// insecure connection.
func TestTokenFileCreds(t *testing.T) {
	key := []byte("test key")
	now := time.Unix(1_800_000_000, 0)
	path := filepath.Join(t.TempDir(), "token.jwt")
	write := func(s string) {
		t.Helper()
		testcerts.WriteFile(t, path, []byte(s))
	}
	token := func(sub string, exp time.Time) string {
		return testcerts.JWT(t, key, map[string]any{"sub": sub, "exp": exp.Unix()})
	}
	c := newTokenFileCreds(path)
	c.now = func() time.Time { return now }
	ctx := secureCtx()
	get := func() (string, codes.Code) {
		t.Helper()
		md, err := c.GetRequestMetadata(ctx)
		if err != nil {
			return "", status.Code(err)
		}
		return md["authorization"], codes.OK
	}
	expect := func(desc, wantHeader string, wantCode codes.Code) {
		t.Helper()
		if h, code := get(); h != wantHeader || code != wantCode {
			t.Errorf("%s: header %q, code %v; want %q, %v", desc, h, code, wantHeader, wantCode)
		}
	}

	expect("missing file, no token yet", "", codes.Unavailable)
	write("not a token")
	expect("not a JWT, no token yet", "", codes.Unauthenticated)
	write(token("expired", now.Add(-time.Minute)))
	expect("expired token", "", codes.Unauthenticated)
	write(token("nearly", now.Add(29*time.Second)))
	expect("token expiring within the margin", "", codes.Unauthenticated)

	a := token("a", now.Add(time.Hour))
	write(a + "\n")
	expect("valid token, trailing newline", "Bearer "+a, codes.OK)
	expect("same file again", "Bearer "+a, codes.OK)

	b := token("b", now.Add(2*time.Hour))
	write(b)
	expect("token rotated long before the old one expires", "Bearer "+b, codes.OK)

	write(b[:len(b)/2])
	expect("half-written token: the previous one", "Bearer "+b, codes.OK)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	expect("file removed: the previous token", "Bearer "+b, codes.OK)

	now = now.Add(2*time.Hour - 30*time.Second)
	expect("previous token expired, file still missing", "", codes.Unavailable)
	write(b)
	expect("same token, now expired", "", codes.Unauthenticated)
	c2 := token("c", now.Add(time.Hour))
	write(c2)
	expect("new token after expiry", "Bearer "+c2, codes.OK)

	if _, err := c.GetRequestMetadata(context.Background()); status.Code(err) != codes.Unauthenticated {
		t.Errorf("GetRequestMetadata on an insecure connection: %v, want UNAUTHENTICATED", err)
	}
	if !c.RequireTransportSecurity() {
		t.Error("RequireTransportSecurity() = false, want true")
	}
}

func TestParseJWT(t *testing.T) {
	key := []byte("k")
	exp := time.Unix(2_000_000_000, 0)
	good := testcerts.JWT(t, key, map[string]any{"exp": exp.Unix()})
	tok, got, err := parseJWT([]byte("  " + good + "\r\n"))
	if err != nil || tok != good || !got.Equal(exp) {
		t.Fatalf("parseJWT(good) = %q, %v, %v; want the token, %v, nil", tok, got, err, exp)
	}
	for _, bad := range []struct{ desc, in string }{
		{"empty", ""},
		{"white space", " \n"},
		{"two parts", "a.b"},
		{"four parts", "a.b.c.d"},
		{"payload not base64", "a.!!!.c"},
		{"payload not JSON", "a." + "bm90IGpzb24" + ".c"},
		{"no exp", testcerts.JWT(t, key, map[string]any{"sub": "x"})},
		{"exp a string", testcerts.JWT(t, key, map[string]any{"exp": "tomorrow"})},
		{"exp negative", testcerts.JWT(t, key, map[string]any{"exp": -5})},
	} {
		if _, _, err := parseJWT([]byte(bad.in)); err == nil {
			t.Errorf("parseJWT(%s) succeeded, want an error", bad.desc)
		}
	}
}
