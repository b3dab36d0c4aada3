// Package httpfilter lets programs add their own server-side xDS HTTP
// filters (gRFC A39) to the ones this module supports (the router, RBAC, local
// rate limit and fault injection).
//
// A filter is registered by the type URLs of its top-level config (the
// typed_config of an HttpConnectionManager's http_filters entry) and of its
// per-route override (typed_per_filter_config of virtual hosts, routes and
// weighted clusters). When a Listener or RouteConfiguration arrives, the
// server asks the filter to parse and validate those configs (an error
// NACKs the resource); when it applies a configuration, it asks the filter
// for a Step per (filter instance, route), built from the instance's config
// merged with the route's most specific override; for each RPC it runs the
// matched route's steps in http_filters order, before any interceptor and
// before the method is looked up.
//
// # Experimental
//
// This package is experimental and may change or be removed in a later
// release.
package httpfilter

import (
	"fmt"

	internal "github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
)

// Filter is a server-side HTTP filter implementation. Its methods are
// called on the server's configuration path, never per RPC, and must be
// safe for concurrent use. IsTerminal must return false: the router is the
// only terminal filter.
type Filter = internal.Filter

// RawConfig is a filter config as found in a resource, with the
// FilterConfig and TypedStruct wrappers looked through; UnmarshalTo decodes
// it.
type RawConfig = internal.RawConfig

// Config is a parsed filter config, immutable, of the filter's own type.
type Config = internal.Config

// Step is the per-RPC work of one filter instance on one route.
type Step = internal.Step

// RPC is what a Step sees of an RPC.
type RPC = internal.RPC

// Headers is the request metadata of an RPC.
type Headers = internal.Headers

// Register makes f available to every xDS server of the process, under each
// of its config and override type URLs, replacing a filter registered
// before for the same type. Call it at initialization, before servers
// receive configuration. It panics if f is terminal or claims the router's
// config type.
func Register(f Filter) {
	if f.IsTerminal() {
		panic(fmt.Sprintf("httpfilter: Register(%T): terminal filters cannot be registered; the router is the only one", f))
	}
	for _, u := range append(f.ConfigTypeURLs(), f.OverrideTypeURLs()...) {
		if u == internal.RouterTypeURL {
			panic(fmt.Sprintf("httpfilter: Register(%T): the router's type %q cannot be taken over", f, u))
		}
	}
	builtin.Registry.Register(f)
}
