package httpfilter

import "context"

// ResponseHeaders is the part of a filter's work (After) that adds headers
// to the response of an RPC it let through, at the filter's place on the
// response path (httpfilter.Call, ServerHeaders: in reverse http_filters
// order, so that a filter after it, such as ext_proc, does not see them and
// one before it does, as Envoy's encoder filters). Embedded in the work,
// it makes the work a Call that handles the response headers when it has
// some to add; the work's filter declares ServerHeaders in Needs.Events.
// Not safe for concurrent use: Add runs in RunAfter, the rest after it.
type ResponseHeaders struct {
	md map[string][]string
}

// Add adds the values of md (not modified afterwards) to the headers to add.
func (r *ResponseHeaders) Add(md map[string][]string) {
	if len(md) == 0 {
		return
	}
	if r.md == nil {
		r.md = md
		return
	}
	for k, v := range md {
		r.md[k] = append(r.md[k], v...)
	}
}

// Events implements Call: the response headers, when there are some to add.
func (r *ResponseHeaders) Events() Events {
	if len(r.md) == 0 {
		return 0
	}
	return ServerHeaders
}

// SendHeader implements HeaderSender: the headers are appended to the
// response's, also on a response that ends without a message (gRPC then
// sends them before its status).
func (r *ResponseHeaders) SendHeader(_ context.Context, header map[string][]string, _ bool) error {
	for k, v := range r.md {
		header[k] = append(header[k], v...)
	}
	return nil
}

// End implements Call: nothing to release.
func (r *ResponseHeaders) End(error) {}
