package xdsclient

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

const xdstpScheme = "xdstp://"

// resourceName is a parsed resource name. Old-style names are opaque; new
// style (xdstp) names are parsed as gRFC A47 and xRFC TP1 describe.
// Immutable after parseName returns.
type resourceName struct {
	// xdstp is true for names that start with "xdstp://".
	xdstp bool
	// authority is the authority of an xdstp name ("" is a valid authority).
	authority string
	// typ is the resource type part of an xdstp name, for example
	// "envoy.config.listener.v3.Listener".
	typ string
	// canonical is the name as sent on the wire and used as the cache key:
	// the name itself for old-style names; for xdstp names, the name with
	// its context parameters sorted by key (the last value wins for a key
	// given twice) and without a fragment.
	canonical string
}

// parseName parses a watched or received resource name. Its errors are
// causes, wrapped in an *Error by the caller.
func parseName(name string) (resourceName, error) {
	if !strings.HasPrefix(name, xdstpScheme) {
		return resourceName{canonical: name}, nil
	}
	u, err := url.Parse(name)
	if err != nil {
		return resourceName{}, fmt.Errorf("invalid xdstp resource name %q: %w", name, err)
	}
	if u.User != nil || u.Opaque != "" {
		return resourceName{}, fmt.Errorf("invalid xdstp resource name %q: unexpected user info or opaque part", name)
	}
	path := strings.TrimPrefix(u.EscapedPath(), "/")
	typ, id, ok := strings.Cut(path, "/")
	if typ == "" || !ok {
		return resourceName{}, fmt.Errorf("invalid xdstp resource name %q: want xdstp://<authority>/<type>/<id>", name)
	}
	var b strings.Builder
	b.WriteString(xdstpScheme)
	b.WriteString(u.Host)
	b.WriteString("/")
	b.WriteString(typ)
	b.WriteString("/")
	b.WriteString(id)
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return resourceName{}, fmt.Errorf("invalid context parameters in xdstp resource name %q: %w", name, err)
		}
		b.WriteString("?")
		b.WriteString(canonicalQuery(q))
	}
	return resourceName{xdstp: true, authority: u.Host, typ: typ, canonical: b.String()}, nil
}

// canonicalQuery encodes context parameters sorted by key, keeping the last
// value of a repeated key.
func canonicalQuery(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		vs := q[k]
		parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(vs[len(vs)-1]))
	}
	return strings.Join(parts, "&")
}
