package localratelimit

import (
	"context"
	"fmt"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/metadata"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
)

// headerOp is one HeaderValueOption: add value under key as action says.
type headerOp struct {
	key, value string
	action     corepb.HeaderValueOption_HeaderAppendAction
}

// headerOps are the header mutations of one list, in order. Immutable.
type headerOps []headerOp

// parseHeaders validates a list of HeaderValueOptions (Envoy allows at most
// 10) that become gRPC metadata: keys are lower-cased and must be valid
// metadata keys that gRPC sends as given (not reserved, not a pseudo-header
// or an HTTP/2 connection header, not binary), values printable ASCII.
// Entries whose value is empty are dropped unless keep_empty_value is set.
func parseHeaders(field string, hs []*corepb.HeaderValueOption) (headerOps, error) {
	if len(hs) > 10 {
		return nil, fmt.Errorf("%s: %d entries, want at most 10", field, len(hs))
	}
	var ops headerOps
	for i, h := range hs {
		f := fmt.Sprintf("%s[%d]", field, i)
		op, keep, err := parseHeader(f, h)
		if err != nil {
			return nil, err
		}
		if keep {
			ops = append(ops, op)
		}
	}
	return ops, nil
}

func parseHeader(f string, h *corepb.HeaderValueOption) (headerOp, bool, error) {
	if h.GetHeader() == nil {
		return headerOp{}, false, fmt.Errorf("%s.header: missing", f)
	}
	key := strings.ToLower(h.GetHeader().GetKey())
	if err := checkKey(key); err != nil {
		return headerOp{}, false, fmt.Errorf("%s.header.key: %q %v", f, h.GetHeader().GetKey(), err)
	}
	value := h.GetHeader().GetValue()
	if raw := h.GetHeader().GetRawValue(); len(raw) > 0 {
		if value != "" {
			return headerOp{}, false, fmt.Errorf("%s.header: both value and raw_value are set", f)
		}
		value = string(raw)
	}
	for j := 0; j < len(value); j++ {
		if c := value[j]; c < 0x20 || c > 0x7e {
			return headerOp{}, false, fmt.Errorf("%s.header.value: %q has a byte (0x%02x) gRPC metadata cannot carry", f, value, c)
		}
	}
	action := h.GetAppendAction()
	if _, ok := corepb.HeaderValueOption_HeaderAppendAction_name[int32(action)]; !ok {
		return headerOp{}, false, fmt.Errorf("%s.append_action: unknown value %d", f, action)
	}
	if a := h.GetAppend(); a != nil {
		if action != corepb.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD {
			return headerOp{}, false, fmt.Errorf("%s: append and append_action are both set", f)
		}
		if !a.GetValue() {
			action = corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		}
	}
	return headerOp{key: key, value: value, action: action}, value != "" || h.GetKeepEmptyValue(), nil
}

// checkKey reports why a lower-cased key cannot be sent as given by gRPC.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("is empty")
	}
	for j := 0; j < len(key); j++ {
		c := key[j]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("is not a gRPC metadata key (allowed: 0-9 a-z - _ .)")
		}
	}
	switch {
	case strings.HasPrefix(key, "grpc-"):
		return fmt.Errorf("is reserved by gRPC")
	case strings.HasSuffix(key, "-bin"):
		return fmt.Errorf("is a binary header, which is not supported")
	}
	switch key {
	case "content-type", "user-agent", "te", "host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return fmt.Errorf("is set by gRPC or HTTP/2 itself")
	}
	return nil
}

// apply applies the mutations to md, in order.
func (ops headerOps) apply(md metadata.MD) {
	for _, op := range ops {
		httpfilter.ApplyHeader(md, op.key, op.value, op.action)
	}
}

// metadata returns the mutations applied to no metadata: the trailers of
// a refused RPC. nil when there are none.
func (ops headerOps) metadata() metadata.MD {
	if len(ops) == 0 {
		return nil
	}
	md := metadata.MD{}
	ops.apply(md)
	if len(md) == 0 {
		return nil
	}
	return md
}

// addToIncoming returns ctx with the mutations applied to a copy of its
// incoming metadata, which the handler then sees.
func (ops headerOps) addToIncoming(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx) // a copy
	if md == nil {
		md = metadata.MD{}
	}
	ops.apply(md)
	return metadata.NewIncomingContext(ctx, md)
}
