package accesslog

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
)

// format turns a record into a log line. Immutable and safe for concurrent
// use.
type format interface {
	appendLine(b []byte, r *Record) []byte
	headerReader
}

func (f *textFormat) requestHeaders(add func(string)) { piecesRead(f.pieces, add) }

func (f *jsonFormat) requestHeaders(add func(string)) { f.root.requestHeaders(add) }

func (n *jsonNode) requestHeaders(add func(string)) {
	piecesRead(n.pieces, add)
	for _, v := range n.values {
		v.requestHeaders(add)
	}
}

// textFormat is a format string: its pieces in order, an operator without
// a value printing "-" (nothing with omit_empty_values). The line is
// exactly what the format makes: Envoy adds no newline of its own.
type textFormat struct {
	pieces    []piece
	omitEmpty bool
}

func (f *textFormat) appendLine(b []byte, r *Record) []byte {
	for _, p := range f.pieces {
		if p.op == nil {
			b = append(b, p.lit...)
			continue
		}
		var ok bool
		if b, ok = p.op.appendText(b, r); !ok && !f.omitEmpty {
			b = append(b, '-')
		}
	}
	return b
}

// jsonKind is the kind of a node of a JSON format.
type jsonKind uint8

const (
	jsonObject jsonKind = iota
	jsonArray
	jsonLiteral  // a fixed value, already encoded
	jsonTemplate // a string with command operators
)

// jsonNode is a node of a compiled JSON format (a Struct of
// json_format).
type jsonNode struct {
	kind   jsonKind
	keys   []string    // jsonObject: encoded keys with their ':', sorted
	values []*jsonNode // jsonObject: by key; jsonArray: the elements
	lit    string      // jsonLiteral
	pieces []piece     // jsonTemplate
}

// jsonFormat is a format dictionary, written as one JSON object a line,
// keys sorted (Envoy's order), followed by a newline. A string value that
// is exactly one command operator is typed: a number for the numeric
// operators, null without a value; any other string value is a string, in
// which an operator without a value is "-" (or nothing with
// omit_empty_values). Untyped (the deprecated FileAccessLog.json_format)
// renders every operator as a string, "-" without a value. With
// omit_empty_values, null members and elements are left out, and an object
// left empty by that is itself left out (the root excepted).
type jsonFormat struct {
	root      *jsonNode
	typed     bool
	omitEmpty bool
}

func (f *jsonFormat) appendLine(b []byte, r *Record) []byte {
	b, _ = f.appendNode(b, f.root, r, true)
	return append(b, '\n')
}

// appendNode appends n's value for r and reports whether it is null.
func (f *jsonFormat) appendNode(b []byte, n *jsonNode, r *Record, root bool) ([]byte, bool) {
	switch n.kind {
	case jsonLiteral:
		return append(b, n.lit...), n.lit == "null"
	case jsonTemplate:
		return f.appendTemplate(b, n.pieces, r)
	}
	start := len(b)
	open, close := byte('{'), byte('}')
	if n.kind == jsonArray {
		open, close = '[', ']'
	}
	b = append(b, open)
	count := 0
	for i, v := range n.values {
		mark := len(b)
		if count > 0 {
			b = append(b, ',')
		}
		if n.kind == jsonObject {
			b = append(b, n.keys[i]...)
		}
		var null bool
		b, null = f.appendNode(b, v, r, false)
		if null && f.omitEmpty {
			b = b[:mark]
			continue
		}
		count++
	}
	if count == 0 && f.omitEmpty && n.kind == jsonObject && !root {
		return b[:start], true
	}
	return append(b, close), false
}

// appendTemplate appends a string value with operators.
func (f *jsonFormat) appendTemplate(b []byte, pieces []piece, r *Record) ([]byte, bool) {
	if len(pieces) == 1 && pieces[0].op != nil && f.typed {
		op := pieces[0].op
		if op.numeric() {
			var ok bool
			if b, ok = op.appendText(b, r); !ok {
				return append(b, "null"...), true
			}
			return b, false
		}
		start := len(b)
		b = append(b, '"')
		b, ok := appendEscapedOp(b, op, r)
		if !ok {
			return append(b[:start], "null"...), true
		}
		return append(b, '"'), false
	}
	b = append(b, '"')
	for _, p := range pieces {
		if p.op == nil {
			b = append(b, p.lit...) // escaped when compiled
			continue
		}
		var ok bool
		if b, ok = appendEscapedOp(b, p.op, r); !ok && !f.omitEmpty {
			b = append(b, '-')
		}
	}
	return append(b, '"'), false
}

// appendEscapedOp appends op's value escaped for a JSON string.
func appendEscapedOp(b []byte, op operator, r *Record) ([]byte, bool) {
	start := len(b)
	b, ok := op.appendText(b, r)
	if !ok || !needsEscape(b[start:]) {
		return b, ok
	}
	raw := string(b[start:])
	return appendEscaped(b[:start], raw), true
}

// needsEscape reports whether s has a byte a JSON string cannot hold as
// it is (or may not: any non-ASCII byte is checked for UTF-8).
func needsEscape(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// appendEscaped appends s escaped for a JSON string, without its quotes:
// '"', '\\' and control characters escaped, invalid UTF-8 replaced with
// U+FFFD.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			} else {
				b = append(b, c)
			}
		}
		i++
	}
	return b
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	return append(appendEscaped(append(b, '"'), s), '"')
}

// compileJSON compiles a format dictionary. Errors name the member by its
// key path (["a"]["b"], [2] for a list element).
func (c *compiler) compileJSON(s *structpb.Struct, typed, omitEmpty bool) (*jsonFormat, error) {
	root, err := c.jsonStruct(s)
	if err != nil {
		return nil, err
	}
	return &jsonFormat{root: root, typed: typed, omitEmpty: omitEmpty}, nil
}

func (c *compiler) jsonStruct(s *structpb.Struct) (*jsonNode, error) {
	n := &jsonNode{kind: jsonObject}
	keys := make([]string, 0, len(s.GetFields()))
	for k := range s.GetFields() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, err := c.jsonValue(s.GetFields()[k])
		if err != nil {
			return nil, inField(fmt.Sprintf("[%q]", k), err)
		}
		n.keys = append(n.keys, string(appendJSONString(nil, k))+":")
		n.values = append(n.values, v)
	}
	return n, nil
}

func (c *compiler) jsonValue(v *structpb.Value) (*jsonNode, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return c.jsonString(k.StringValue)
	case *structpb.Value_NumberValue:
		return &jsonNode{kind: jsonLiteral, lit: jsonNumber(k.NumberValue)}, nil
	case *structpb.Value_BoolValue:
		return &jsonNode{kind: jsonLiteral, lit: strconv.FormatBool(k.BoolValue)}, nil
	case *structpb.Value_StructValue:
		return c.jsonStruct(k.StructValue)
	case *structpb.Value_ListValue:
		n := &jsonNode{kind: jsonArray}
		for i, e := range k.ListValue.GetValues() {
			en, err := c.jsonValue(e)
			if err != nil {
				return nil, inField(fmt.Sprintf("[%d]", i), err)
			}
			n.values = append(n.values, en)
		}
		return n, nil
	}
	return &jsonNode{kind: jsonLiteral, lit: "null"}, nil
}

// jsonString compiles a string value: a literal, unless it has a '%'.
func (c *compiler) jsonString(s string) (*jsonNode, error) {
	if !strings.Contains(s, "%") {
		return &jsonNode{kind: jsonLiteral, lit: string(appendJSONString(nil, s))}, nil
	}
	pieces, err := c.parseFormat(s)
	if err != nil {
		return nil, err
	}
	hasOp := false
	for i, p := range pieces {
		if p.op == nil {
			pieces[i].lit = string(appendEscaped(nil, p.lit))
		} else {
			hasOp = true
		}
	}
	if !hasOp {
		lit := "\"\""
		if len(pieces) > 0 {
			lit = `"` + pieces[0].lit + `"`
		}
		return &jsonNode{kind: jsonLiteral, lit: lit}, nil
	}
	return &jsonNode{kind: jsonTemplate, pieces: pieces}, nil
}

// jsonNumber encodes a number as a JSON number (null for NaN and the
// infinities, which JSON cannot hold).
func jsonNumber(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "null"
	}
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		s := strconv.FormatFloat(v, 'e', -1, 64)
		// "1e-07" as JSON writers write it: "1e-7".
		if i := strings.Index(s, "e-0"); i >= 0 {
			s = s[:i+2] + s[i+3:]
		}
		return s
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
