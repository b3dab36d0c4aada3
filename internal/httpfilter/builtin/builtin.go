// Package builtin holds the registry of the HTTP filters an xDS server runs
// (gRFC A39): the router, the RBAC filter (gRFC A41), Envoy's local rate
// limit, fault injection and global rate limit filters, the ext_authz filter (gRFC A92), the ext_proc filter (gRFC A93), and the filters users register through
// the public package httpfilter. The Listener and RouteConfiguration
// decoders parse with it, so what a decoder accepts does not depend on which
// packages happen to be linked.
package builtin

import (
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/extauthz"
	"github.com/proxyless-grpc/xds/internal/httpfilter/extproc"
	"github.com/proxyless-grpc/xds/internal/httpfilter/fault"
	"github.com/proxyless-grpc/xds/internal/httpfilter/globalratelimit"
	"github.com/proxyless-grpc/xds/internal/httpfilter/localratelimit"
	"github.com/proxyless-grpc/xds/internal/httpfilter/rbacfilter"
)

// Registry is the filters a server knows. Users add theirs at init through
// httpfilter.Register; nothing else modifies it.
var Registry = httpfilter.NewRegistry(httpfilter.Router{}, rbacfilter.Filter{}, localratelimit.Filter{}, fault.Filter{}, extauthz.Filter{}, globalratelimit.Filter{}, extproc.Filter{}).WithRegistered()
