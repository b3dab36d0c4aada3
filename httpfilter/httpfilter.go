// Package httpfilter is the API for writing server-side xDS HTTP filters
// (gRFC A39) of your own and adding them to the ones this module runs (the
// router, RBAC, local and global rate limits, fault injection and
// ext_authz).
//
// A filter is registered (Register) by the type URLs of its top-level
// config (the typed_config of an HttpConnectionManager's http_filters
// entry) and of its per-route override (typed_per_filter_config of virtual
// hosts and routes). When a Listener or RouteConfiguration arrives, the
// server asks the filter to parse and validate those configs (an error
// NACKs the resource); when it applies a configuration, it asks the filter
// for a Step per (filter instance, route), built from the instance's config
// and the route's most specific override; for each RPC the route's action
// lets through, it runs the route's steps in http_filters order, starting
// in gRPC's tap handle: before any interceptor and before the method is
// looked up.
//
// A step sees the RPC as an RPC value: the request (Request: method,
// authority, headers, addresses, peer certificates; the same view package
// rbac evaluates) and, for filters that ask for it (Needs), state shared by
// the RPCs of one connection (ConnState). A step must not block: it lets
// the RPC through, refuses it, or returns work that decides later (After:
// a delay, an asynchronous check, a trailer on a refused RPC), which runs
// on the RPC's own goroutine before any of the user's interceptors. The
// steps after such a step wait for its work: every step, built in or
// registered here, decides only on RPCs the steps before it let through,
// on the request as they left it, and an RPC a step refuses never reaches
// user code (see Step and After for the whole contract).
//
// Work may also be a Call: the filter's state for one RPC, which the
// server then hands the RPC's later events (the client's messages and
// half-close; the response headers, messages and trailers, in reverse
// http_filters order), each hook free to wait, so that a filter acts on
// responses too (as ext_proc does). A filter declares the events it may
// handle in Needs.Events; an RPC whose calls handle none pays nothing.
//
// Every type here is this package's own: a filter is written against this
// package alone, and the server's framework uses these same types for its
// built-in filters (and adapts registration). The package is deliberately
// a complete, small API rather than a registration hook over internal
// types: per-connection state and work that decides later are what a
// filter such as ext_authz (an asynchronous check per RPC, gRFC A92) needs,
// and nothing else is exported. The server's configuration-path extras
// (filter state kept across updates, metrics and status-page counts) stay
// internal. The package does not import gRPC; a step returns gRPC status
// errors (google.golang.org/grpc/status) to choose the status of a refused
// RPC.
//
// # Experimental
//
// This package is experimental and may change or be removed in a later
// release.
package httpfilter

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/httpfilter/handoff"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
)

// routerTypeURL is the config type of the router, the one terminal filter.
const routerTypeURL = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"

// Config is a parsed filter config, immutable, of the filter's own type.
type Config any

// RawConfig is a filter config as found in a resource, with the
// FilterConfig and TypedStruct wrappers looked through. The zero value
// holds no config.
type RawConfig struct {
	c typedconfig.Config
}

// TypeURL returns the config's type URL (of the message inside a
// TypedStruct, for one).
func (c RawConfig) TypeURL() string { return c.c.TypeURL }

// Struct returns the value of a config carried in a TypedStruct (whose type
// need not be a registered message), or nil for a config in a plain Any.
func (c RawConfig) Struct() *structpb.Struct { return c.c.Struct }

// UnmarshalTo decodes the config into m, which must be of its type; a
// TypedStruct is decoded through its JSON form, as Envoy does.
func (c RawConfig) UnmarshalTo(m proto.Message) error { return c.c.UnmarshalTo(m) }

// Filter is a server-side HTTP filter. Its methods are called on the
// server's configuration path, never per RPC, and must be safe for
// concurrent use.
type Filter interface {
	// ConfigTypeURLs lists the type URLs of the top-level configs the
	// filter parses.
	ConfigTypeURLs() []string
	// OverrideTypeURLs lists the type URLs of the per-route override
	// configs it parses; nil when it takes no overrides.
	OverrideTypeURLs() []string
	// ParseConfig validates a top-level config; an error NACKs the
	// resource that carries it, and its text is part of the NACK.
	ParseConfig(RawConfig) (Config, error)
	// ParseOverride validates an override config, as ParseConfig.
	ParseOverride(RawConfig) (Config, error)
	// BuildStep returns the step of the filter instance named instance
	// on one route, from the instance's config and the route's most
	// specific override (nil when it has none), both from this filter's
	// Parse methods: configs are merged when a configuration is applied,
	// never per RPC (gRFC A39). A nil Step means the instance has nothing
	// to do on that route. An error fails the route's RPCs with
	// UNAVAILABLE (validation belongs in the Parse methods). Identical
	// inputs may share one Step.
	BuildStep(instance string, config, override Config) (Step, error)
}

// Needs is what a filter's steps need from the server besides the tap
// handle. A filter that needs something implements
//
//	Needs() Needs
//
// and the server reads it when it builds the gRPC servers of a filter
// chain, so chains whose filters need nothing pay nothing for it.
type Needs struct {
	// After: the steps may return work that decides later (After). A
	// step of a filter without it that returns work fails its RPC with
	// INTERNAL; a chain whose filters all go without it runs every step
	// in the tap, with no interceptor of its own.
	After bool
	// ConnState: the steps read RPC.Conn, which is nil without it.
	ConnState bool
	// Events: the events after the request headers that the filter's
	// Calls may handle (see Call). A filter with Events returns its calls
	// as work, so it reports After too; a chain whose filters declare no
	// events runs none of the response path.
	Events Events
}

// Register makes f available to every xDS server of the process, under each
// of its config and override type URLs, taking over a type registered
// before, built-in or not. Call it at initialization, before servers
// receive configuration. It panics if f claims the router's config type:
// the router is the one terminal filter.
func Register(f Filter) {
	for _, u := range append(f.ConfigTypeURLs(), f.OverrideTypeURLs()...) {
		if u == routerTypeURL {
			panic(fmt.Sprintf("httpfilter: Register(%T): the router's type %q cannot be taken over", f, u))
		}
	}
	handoff.Add(adapter{f})
}
