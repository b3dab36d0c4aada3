package xdsclient

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// jwtExpiryMargin is how long before its exp claim a token counts as expired
// (gRFC A97: clock skew and the time the server takes to check it).
const jwtExpiryMargin = 30 * time.Second

// tokenFileCreds are the jwt_token_file call credentials of gRFC A97: every
// stream to the management server carries "authorization: Bearer <token>",
// the token read from a file.
//
// The file is read again on every stream (the xDS client opens one per
// connection attempt, spaced by its reconnection backoff, so this is cheap
// and needs no backoff of its own): a token rotated in the file before the
// old one expires is used by the next stream, which grpc-go's own token
// file credentials (credentials/jwt, v1.85) do not do, since they keep a
// token until shortly before it expires. The token is parsed only to read
// its exp claim; the management server verifies it. When the file cannot be
// read or holds no valid token, the last good token is used while it has
// not expired (a rotation caught half way); without one the stream fails
// with UNAVAILABLE (file unreadable) or UNAUTHENTICATED (no valid token).
type tokenFileCreds struct {
	path string           // immutable
	now  func() time.Time // immutable; time.Now except in tests

	mu      sync.Mutex
	raw     []byte    // guarded by mu; the file contents of the cached token
	header  string    // guarded by mu; "Bearer <token>"; empty before the first good read
	expiry  time.Time // guarded by mu; the token's exp minus jwtExpiryMargin
	lastErr string    // guarded by mu; the last error logged, to log each once
}

func newTokenFileCreds(path string) *tokenFileCreds {
	return &tokenFileCreds{path: path, now: time.Now}
}

// GetRequestMetadata returns the authorization header of a new stream.
func (c *tokenFileCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	ri, _ := credentials.RequestInfoFromContext(ctx)
	if err := credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity); err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "xdsclient: jwt_token_file call credentials need a secure connection: %v", err)
	}
	header, err := c.current()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": header}, nil
}

// RequireTransportSecurity reports true: a bearer token is never sent in
// the clear.
func (c *tokenFileCreds) RequireTransportSecurity() bool { return true }

// current reads the file and returns the header to send.
func (c *tokenFileCreds) current() (string, error) {
	data, readErr := os.ReadFile(c.path)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	var err error
	switch {
	case readErr != nil:
		err = status.Errorf(codes.Unavailable, "xdsclient: jwt_token_file: %v", readErr)
	case !bytes.Equal(data, c.raw):
		token, exp, perr := parseJWT(data)
		switch {
		case perr != nil:
			err = status.Errorf(codes.Unauthenticated, "xdsclient: jwt_token_file %q: %v", c.path, perr)
		case !now.Before(exp.Add(-jwtExpiryMargin)):
			err = status.Errorf(codes.Unauthenticated, "xdsclient: jwt_token_file %q: the token expired at %v (or expires within %v)", c.path, exp.UTC(), jwtExpiryMargin)
		default:
			c.raw, c.header, c.expiry, c.lastErr = data, "Bearer "+token, exp.Add(-jwtExpiryMargin), ""
		}
	}
	valid := c.header != "" && now.Before(c.expiry)
	if err != nil && valid {
		if msg := err.Error(); msg != c.lastErr {
			c.lastErr = msg
			logger.Warningf("xdsclient: %v; keeping the previous token, valid until %v", err, c.expiry.UTC())
		}
	}
	switch {
	case valid:
		return c.header, nil
	case err != nil:
		return "", err
	default:
		return "", status.Errorf(codes.Unauthenticated, "xdsclient: jwt_token_file %q: the token expired at %v and the file has no newer one",
			c.path, c.expiry.Add(jwtExpiryMargin).UTC())
	}
}

// errNotJWT is the cause of a token that is not three base64url parts.
var errNotJWT = errors.New("want a JWT: three base64url parts separated by '.'")

// parseJWT returns the token of a token file (surrounding white space
// removed) and its exp claim. The signature is not checked: that is the
// management server's job.
func parseJWT(data []byte) (token string, exp time.Time, err error) {
	token = strings.TrimSpace(string(data))
	parts := strings.Split(token, ".")
	if token == "" {
		return "", time.Time{}, errors.New("the file is empty")
	}
	if len(parts) != 3 {
		return "", time.Time{}, errNotJWT
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: payload: %v", errNotJWT, err)
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", time.Time{}, fmt.Errorf("payload is not a JSON object: %v", err)
	}
	if claims.Exp == nil {
		return "", time.Time{}, errors.New("no exp claim")
	}
	secs, err := claims.Exp.Float64()
	if err != nil || secs <= 0 || secs > 1<<40 {
		return "", time.Time{}, fmt.Errorf("exp claim %s is not a time", claims.Exp)
	}
	return token, time.Unix(int64(secs), 0), nil
}
