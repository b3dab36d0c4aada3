package extproc

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvcpb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"

	"github.com/proxyless-grpc/xds/internal/fieldpath"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// maxHeaderBytes bounds a mutation's header names and values (gRFC A93:
// "Length must not exceed 16384").
const maxHeaderBytes = 16384

// ignoredHeader reports whether key (lower-case) is a header no
// processor's mutation changes, whatever the rules say: "host" and the
// pseudo-headers (gRFC A93), and the headers gRPC itself writes: "te",
// "content-type" and the "grpc-" space (the status, the timeout, the
// encodings), which a mutation could only make inconsistent with the RPC.
func ignoredHeader(key string) bool {
	return strings.HasPrefix(key, ":") || key == "host" || key == "te" || key == "content-type" || strings.HasPrefix(key, "grpc-")
}

// ApplyMutation applies a processor's HeaderMutation (gRFC A93, "Header
// rewriting") to md, request headers, response headers or trailers, and
// reports whether md changed. rules (nil: none) are the config's
// mutation_rules.
//
// The whole mutation is judged before anything is applied: an error
// leaves md unchanged. It is an error for an entry of set_headers to have
// no header, a key that is empty, not a lower-case gRPC header name or
// longer than 16384 bytes, a value (raw_value, else value: processors
// written for Envoy send that) longer than 16384 bytes, not printable
// ASCII, or, for a binary ("-bin") header, not base64, or an unknown
// append_action; and for a change the rules refuse when disallow_is_error
// is set (without it, the change is ignored). A change of a header in
// ignoredHeader's set is ignored, and so is a remove_headers name that
// cannot be a header (names there are lower-cased, as Envoy does). The
// deprecated append field is ignored (A93).
//
// As Envoy's ext_proc, remove_headers apply first, then set_headers in
// order, each by its append_action. An entry whose value is empty removes
// its header where it would have written the value, unless
// keep_empty_value is set.
func ApplyMutation(md metadata.MD, m *extprocsvcpb.HeaderMutation, rules *MutationRules) (changed bool, err error) {
	return applyMutation(md, m, rules, nil)
}

// ignoredEntries counts the entries of a mutation that were not applied
// though valid: of a header gRPC writes itself (reserved; the first one's
// name in reservedKey), or one the rules refuse without disallow_is_error.
type ignoredEntries struct {
	reserved, disallowed int
	reservedKey          string
}

// applyMutation is ApplyMutation, counting in ign (nil: not counted) the
// entries it ignores.
func applyMutation(md metadata.MD, m *extprocsvcpb.HeaderMutation, rules *MutationRules, ign *ignoredEntries) (changed bool, err error) {
	if ign == nil {
		ign = &ignoredEntries{}
	}
	reserved := func(key string) {
		if ign.reserved == 0 {
			ign.reservedKey = key
		}
		ign.reserved++
	}
	if rules == nil {
		rules = &MutationRules{}
	}
	type set struct {
		key, value string
		action     corepb.HeaderValueOption_HeaderAppendAction
		keepEmpty  bool
	}
	var removes []string
	for i, name := range m.GetRemoveHeaders() {
		key := strings.ToLower(name)
		if key == "" || len(key) > maxHeaderBytes {
			continue // a header that cannot exist
		}
		if ignoredHeader(key) {
			// One that may not be changed.
			reserved(key)
			continue
		}
		if checkName(key) != nil {
			continue // a header that cannot exist
		}
		ok, err := judge(rules, key)
		if err != nil {
			return false, fieldpath.In(fmt.Sprintf("remove_headers[%d]", i), err)
		}
		if ok {
			removes = append(removes, key)
		} else {
			ign.disallowed++
		}
	}
	var sets []set
	for i, h := range m.GetSetHeaders() {
		key, value, keep, err := setHeader(h)
		switch {
		case err != nil:
		case !keep:
			reserved(key)
		default:
			if keep, err = judge(rules, key); err == nil && !keep {
				ign.disallowed++
			}
		}
		if err != nil {
			return false, fieldpath.In(fmt.Sprintf("set_headers[%d]", i), err)
		}
		if keep {
			sets = append(sets, set{key, value, h.GetAppendAction(), h.GetKeepEmptyValue()})
		}
	}
	if md == nil && len(sets) > 0 {
		return false, errors.New("extproc: no headers to apply the mutation to")
	}

	for _, key := range removes {
		if _, ok := md[key]; ok {
			delete(md, key)
			changed = true
		}
	}
	for _, s := range sets {
		if s.value == "" && !s.keepEmpty {
			// The header would be left with an empty value: removed.
			if _, exists := md[s.key]; exists && writes(s.action, exists) {
				delete(md, s.key)
				changed = true
			}
			continue
		}
		changed = httpfilter.ApplyHeader(md, s.key, s.value, s.action) || changed
	}
	return changed, nil
}

// writes reports whether action writes a header's value, given whether
// the header exists (httpfilter.ApplyHeader's rules).
func writes(action corepb.HeaderValueOption_HeaderAppendAction, exists bool) bool {
	switch action {
	case corepb.HeaderValueOption_ADD_IF_ABSENT:
		return !exists
	case corepb.HeaderValueOption_OVERWRITE_IF_EXISTS:
		return exists
	}
	return true
}

// judge reports whether the rules let the processor change key; an error
// when they do not and disallow_is_error is set.
func judge(r *MutationRules, key string) (bool, error) {
	return r.Judge("mutation_rules", key)
}

// setHeader validates an entry of set_headers: its key and value (the
// value decoded for a binary header). keep is false for an ignored header;
// err says why an invalid entry cannot be applied. Errors name the field
// relative to the entry.
func setHeader(h *corepb.HeaderValueOption) (key, value string, keep bool, err error) {
	hv := h.GetHeader()
	if hv == nil {
		return "", "", false, fieldpath.Errorf("header", "missing")
	}
	key = hv.GetKey()
	switch {
	case key == "":
		return "", "", false, fieldpath.Errorf("header.key", "empty")
	case len(key) > maxHeaderBytes:
		return "", "", false, fieldpath.Errorf("header.key", "of %d bytes, want at most %d", len(key), maxHeaderBytes)
	case ignoredHeader(key):
		return "", "", false, nil
	}
	if err := checkName(key); err != nil {
		return "", "", false, fieldpath.In("header.key", err)
	}
	field := "header.value"
	value = hv.GetValue()
	if raw := hv.GetRawValue(); len(raw) > 0 {
		field, value = "header.raw_value", string(raw)
	}
	if len(value) > maxHeaderBytes {
		return "", "", false, fieldpath.Errorf(field, "of %d bytes, want at most %d", len(value), maxHeaderBytes)
	}
	if strings.HasSuffix(key, "-bin") {
		b, err := decodeBinary(value)
		if err != nil {
			return "", "", false, fieldpath.Errorf(field, "binary header %q: not base64: %v", key, err)
		}
		value = string(b)
	} else if err := checkValue(value); err != nil {
		return "", "", false, fieldpath.Errorf(field, "header %q: %v", key, err)
	}
	if _, ok := corepb.HeaderValueOption_HeaderAppendAction_name[int32(h.GetAppendAction())]; !ok {
		return "", "", false, fieldpath.Errorf("append_action", "unknown value %d", int32(h.GetAppendAction()))
	}
	return key, value, true, nil
}

// decodeBinary decodes a binary header's value: base64, with or without
// padding (gRPC sends it without, gRFC A102's HeaderValues have it).
func decodeBinary(v string) ([]byte, error) {
	if strings.HasSuffix(v, "=") {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// checkName reports why key is not a lower-case gRPC header name.
func checkName(key string) error {
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%q: character %q not allowed (want lower-case letters, digits, '-', '_' and '.')", key, c)
		}
	}
	return nil
}

// checkValue: printable ASCII, as gRPC sends a value that is not binary.
func checkValue(v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("value has byte %#x at %d, want printable ASCII", c, i)
		}
	}
	return nil
}
