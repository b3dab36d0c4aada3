package routing

import (
	"strings"

	"github.com/proxyless-grpc/xds/internal/matcher"
)

// headerMatcher is a route's header matcher with gRFC A28's view of the
// RPC's metadata, which differs from RBAC's (gRFC A41).
type headerMatcher struct {
	m matcher.HeaderMatcher
	// hidden is set when the header must be treated as absent; see
	// hiddenHeader.
	hidden bool
	// contentType is set for "content-type", which A28 takes to be
	// "application/grpc" when absent.
	contentType bool
}

// grpcContentType is the value gRFC A28 assumes for an absent content-type:
// "if a gRPC implementation does not add that header until after xDS route
// selection is done, then xDS route selection will assume a hard-coded value
// of `application/grpc`". Read-only.
var grpcContentType = []string{"application/grpc"}

func newHeaderMatcher(m matcher.HeaderMatcher) headerMatcher {
	return headerMatcher{m: m, hidden: hiddenHeader(m.Name()), contentType: m.Name() == "content-type"}
}

// match reports whether the RPC's metadata h matches.
func (hm *headerMatcher) match(h matcher.Headers) bool {
	var vals []string
	if !hm.hidden {
		vals = h.Get(hm.m.Name())
	}
	if len(vals) == 0 && hm.contentType {
		vals = grpcContentType
	}
	return hm.m.MatchValues(vals)
}

// hiddenHeader reports whether route selection must behave as if the header
// were absent. gRFC A28: "only custom metadata is considered during header
// matching ... However, we will support matching against the content-type
// header", and "we will explicitly exclude headers with a `-bin` suffix from
// matching (i.e., we will behave as if the header is not present, even if it
// actually is)". The non-custom headers of a gRPC request (PROTOCOL-HTTP2,
// "Call-Definition") are the pseudo-headers, te, user-agent and the grpc-
// headers; names starting with "grpc-" are reserved for gRPC and are never
// custom metadata. A grpc-go server lists some of these (":authority",
// "user-agent") in its metadata, hence the explicit rule.
func hiddenHeader(name string) bool {
	return strings.HasSuffix(name, "-bin") ||
		strings.HasPrefix(name, ":") ||
		strings.HasPrefix(name, "grpc-") ||
		name == "te" || name == "user-agent"
}
