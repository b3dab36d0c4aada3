package accesslog

import (
	"fmt"
	"strconv"
	"strings"
)

// piece is one part of a parsed format: literal text, or a command
// operator when op is set.
type piece struct {
	lit string
	op  operator
}

// operator is a compiled command operator. Immutable.
type operator interface {
	// appendText appends the operator's value for r as text and reports
	// true, or appends nothing and reports false when it has no value
	// (Envoy then prints "-").
	appendText(b []byte, r *Record) ([]byte, bool)
	// numeric reports whether a typed JSON log renders the value as a
	// number rather than a string.
	numeric() bool
}

// syntax says which parts of %COMMAND(PARAMS):LENGTH% a command takes, as
// Envoy's CommandSyntaxChecker flags do. The zero value takes neither.
type syntax uint8

const (
	paramsRequired syntax = 1 << iota
	paramsOptional
	lengthAllowed
)

// command is what one command operator is: how to build it, or why it is
// refused.
type command struct {
	syntax syntax
	// build compiles the operator from its parameters and its maximum
	// length (-1 when none); nil for an operator not recorded here.
	build func(c *compiler, params string, maxLen int) (operator, error)
	// refused says why this server does not record a command Envoy
	// knows: it prints "-", and the config reports it (NotRecorded).
	refused string
}

// maxLength bounds the :LENGTH of an operator: anything longer is no
// truncation at all.
const maxLength = 1 << 30

// token is a command operator as written: %NAME(PARAMS):LENGTH%.
type token struct {
	name, params string
	maxLen       int // -1 when absent
	end          int // the index after the closing '%'
}

// parseFormat parses an Envoy format string (text, or a JSON value) into
// literal pieces and operators, with Envoy's syntax: "%%" is a literal
// '%'; any other '%' starts %COMMAND%, %COMMAND(PARAMS)% or either with
// ":LENGTH" before the closing '%', COMMAND being [A-Z0-9_]+ and PARAMS
// running to the first ')' followed by the rest of a valid operator. A
// command Envoy does not know, and one this server does not support, is
// an error, as is a malformed operator.
func (c *compiler) parseFormat(s string) ([]piece, error) {
	var pieces []piece
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			pieces = append(pieces, piece{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		if s[i] != '%' {
			lit.WriteByte(s[i])
			i++
			continue
		}
		if i+1 < len(s) && s[i+1] == '%' {
			lit.WriteByte('%')
			i += 2
			continue
		}
		tok, ok := scanToken(s, i)
		if !ok {
			return nil, fmt.Errorf("no valid command operator at position %d: %q", i, snippet(s[i:]))
		}
		op, err := c.compileOperator(tok)
		if err != nil {
			return nil, err
		}
		flush()
		pieces = append(pieces, piece{op: op})
		i = tok.end
	}
	flush()
	return pieces, nil
}

// snippet returns the start of s, for an error message.
func snippet(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// scanToken reads the command operator that starts at s[start] ('%').
func scanToken(s string, start int) (token, bool) {
	i := start + 1
	for i < len(s) && isCommandByte(s[i]) {
		i++
	}
	if i == start+1 || i == len(s) {
		return token{}, false
	}
	tok := token{name: s[start+1 : i], maxLen: -1}
	switch s[i] {
	case '%', ':':
		return tok.finish(s, i)
	case '(':
		// The parameters end at the first ')' that the rest of a valid
		// operator follows; they do not span lines.
		for k := i + 1; k < len(s) && s[k] != '\n'; k++ {
			if s[k] != ')' {
				continue
			}
			if t, ok := tok.finish(s, k+1); ok {
				t.params = s[i+1 : k]
				return t, true
			}
		}
	}
	return token{}, false
}

// finish reads the end of an operator at s[i]: "%", or ":LENGTH%".
func (tok token) finish(s string, i int) (token, bool) {
	if i >= len(s) {
		return token{}, false
	}
	if s[i] == '%' {
		tok.end = i + 1
		return tok, true
	}
	if s[i] != ':' {
		return token{}, false
	}
	j := i + 1
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i+1 || j >= len(s) || s[j] != '%' {
		return token{}, false
	}
	n, err := strconv.Atoi(s[i+1 : j])
	if err != nil || n > maxLength {
		n = maxLength
	}
	tok.maxLen, tok.end = n, j+1
	return tok, true
}

func isCommandByte(b byte) bool {
	return b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_'
}

// compileOperator checks an operator's syntax against its command's and
// builds it.
func (c *compiler) compileOperator(tok token) (operator, error) {
	cmd, ok := commands[tok.name]
	if !ok {
		return nil, fmt.Errorf("unknown command operator %%%s%%", tok.name)
	}
	name := "%" + tok.name + "%"
	if cmd.build == nil {
		// Envoy would log a value this server does not record: "-", as
		// for an absent value, with a warning (Config.NotRecorded) rather
		// than a NACK of the whole Listener for a log field.
		if c.notRecorded != nil {
			c.notRecorded[name] = cmd.refused
		}
		return fnOp{}, nil
	}
	switch {
	case cmd.syntax == 0 && (tok.params != "" || tok.maxLen >= 0):
		return nil, fmt.Errorf("%s takes no parameters or length", name)
	case cmd.syntax&paramsRequired != 0 && tok.params == "":
		return nil, fmt.Errorf("%s requires parameters", name)
	case cmd.syntax&lengthAllowed == 0 && tok.maxLen >= 0:
		return nil, fmt.Errorf("%s does not take a length", name)
	}
	op, err := cmd.build(c, tok.params, tok.maxLen)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if h := fixedReads(tok); h != "" {
		op = readsHeader{operator: op, name: h}
	}
	return op, nil
}

// fixedReads returns the request header the commands that are not %REQ()%
// read (besides the pseudo-headers, which a Record has in fields); "" for
// none.
func fixedReads(tok token) string {
	switch tok.name {
	case "PATH":
		return "x-envoy-original-path"
	case "STREAM_ID":
		return "x-request-id"
	case "REQUESTED_SERVER_NAME":
		// Only the modes that fall back to the host read it.
		if mode, _, _ := strings.Cut(tok.params, ":"); mode == "SNI_FIRST" || mode == "HOST_FIRST" {
			return "x-envoy-original-host"
		}
	}
	return ""
}

// headerReader is an operator or filter that reads request headers: it
// says which, so that a server copies into a Record only those
// (Config.RequestHeaders).
type headerReader interface {
	requestHeaders(add func(name string))
}

// readsHeader is an operator that reads the request header name.
type readsHeader struct {
	operator
	name string
}

func (o readsHeader) requestHeaders(add func(string)) { add(o.name) }

func (o headerOp) requestHeaders(add func(string)) {
	if o.src != requestHeader {
		return
	}
	add(o.main)
	if o.alt != "" {
		add(o.alt)
	}
}

// piecesRead tells add of the request headers pieces read.
func piecesRead(pieces []piece, add func(string)) {
	for _, p := range pieces {
		if r, ok := p.op.(headerReader); ok {
			r.requestHeaders(add)
		}
	}
}

// appendTrunc appends s to b, cut to max bytes unless max is negative (a
// command's :LENGTH, as Envoy truncates).
func appendTrunc(b []byte, s string, max int) []byte {
	if max >= 0 && len(s) > max {
		s = s[:max]
	}
	return append(b, s...)
}

// headerName checks and lower-cases a header name of %REQ(X?Y)% and its
// relatives, with Envoy's rules: a pseudo-header is ':' and a lower-case
// token; any other name is a token (RFC 9110); the alternative may be
// empty.
func headerName(name string) (string, error) {
	lower := strings.ToLower(name)
	rest := lower
	if strings.HasPrefix(lower, ":") {
		rest = lower[1:]
		if rest == "" {
			return "", fmt.Errorf("invalid header name %q", name)
		}
	}
	for i := 0; i < len(rest); i++ {
		if !isTokenByte(rest[i]) {
			return "", fmt.Errorf("invalid header name %q", name)
		}
	}
	return lower, nil
}

func isTokenByte(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// splitHeaders splits the parameters of %REQ(X?Y)% into the main and the
// alternative header.
func splitHeaders(params string) (main, alt string, err error) {
	main, alt, _ = strings.Cut(params, "?")
	if strings.Contains(alt, "?") {
		return "", "", fmt.Errorf("more than one alternative header in %q", params)
	}
	if main, err = headerName(main); err != nil {
		return "", "", err
	}
	if alt != "" {
		if alt, err = headerName(alt); err != nil {
			return "", "", err
		}
	}
	return main, alt, nil
}
