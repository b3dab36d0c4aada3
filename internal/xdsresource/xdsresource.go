// Package xdsresource registers the resource types an xDS server watches —
// Listener and RouteConfiguration — with the xdsclient, decoding them with
// filterchain and internal/routing. Decoding is validation: an error NACKs
// the resource (gRFC A27, A36).
package xdsresource

import (
	"bytes"
	"fmt"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/filterchain"
	"github.com/proxyless-grpc/xds/internal/grpcservice"
	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
	"github.com/proxyless-grpc/xds/internal/routing"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// Type URLs of the resources of this package.
const (
	ListenerTypeURL    = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteConfigTypeURL = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// ListenerType is the server-side Listener resource: a TCP Listener whose
// filter chains are validated and compiled by filterchain. Listeners are
// deleted by their absence from a SotW response (gRFC A27).
var ListenerType = &xdsclient.ResourceType{
	TypeURL:                    ListenerTypeURL,
	TypeName:                   "Listener",
	AllResourcesRequiredInSotW: true,
	Decode:                     decodeListener,
}

// RouteConfigType is the RouteConfiguration resource, compiled by
// internal/routing. A RouteConfiguration missing from a SotW response is not
// deleted (gRFC A27).
var RouteConfigType = &xdsclient.ResourceType{
	TypeURL:  RouteConfigTypeURL,
	TypeName: "RouteConfiguration",
	Decode:   decodeRouteConfig,
}

// Listener is a decoded, validated Listener. Immutable.
type Listener struct {
	// Name is the resource name.
	Name string
	// Table is the compiled filter chain table.
	Table *filterchain.Table
	// raw is the resource as received, for Equal.
	raw *anypb.Any
}

// Raw returns the resource exactly as received. It must not be modified.
func (l *Listener) Raw() *anypb.Any { return l.raw }

// Equal reports whether o is a Listener with the same contents, so an
// identical re-send reaches no watcher.
//
// Two Listeners are equal when their bytes are and they came from servers
// of the same trust (gRFC A102: the Key of the grpcservice.Env their tables
// were compiled under, Table.EnvKey), or when they compile to tables that serve
// every connection the same way (filterchain.Table.Equal, which compares
// chain content digests; the digest of a chain whose filters depend on the
// trust includes it): a control plane that re-sends an unchanged Listener
// with fields in another order, or with fields a server does not use
// changed, does not make the server re-apply it, and neither does a
// fallback server (gRFC A71) sending it byte for byte, unless the change
// of trust changes a chain.
func (l *Listener) Equal(o xdsclient.ResourceData) bool {
	ol, ok := o.(*Listener)
	return ok && (l.Table.EnvKey() == ol.Table.EnvKey() && bytes.Equal(l.raw.GetValue(), ol.raw.GetValue()) || l.Table.Equal(ol.Table))
}

// RouteConfig is a decoded, validated RouteConfiguration. Immutable.
type RouteConfig struct {
	// Name is the resource name.
	Name string
	// Router selects virtual hosts and routes.
	Router *routing.Router
	raw    *anypb.Any
	// envKey is the Key of the grpcservice.Env the overrides were parsed
	// under when one of them depended on it (httpfilter.Parser.UsedEnv:
	// ext_proc's grpc_service); "" otherwise.
	envKey string
}

// Equal reports whether o is a RouteConfig with the same contents. Two
// RouteConfigs whose overrides depend on the trust of the server that sent
// them (gRFC A102) are equal only if that trust is the same: the same bytes
// from a server of another trust (an A71 fallback) may name the same side
// channel with other credentials, a change its watchers must hear of.
func (r *RouteConfig) Equal(o xdsclient.ResourceData) bool {
	or, ok := o.(*RouteConfig)
	return ok && r.envKey == or.envKey && sameResource(r.raw, or.raw, func() proto.Message { return &routepb.RouteConfiguration{} })
}

// sameResource compares two received resources: equal bytes are the common
// case (a control plane re-sending what it sent); otherwise the decoded
// messages are compared, since serialization is not canonical.
func sameResource(a, b *anypb.Any, newMsg func() proto.Message) bool {
	if bytes.Equal(a.GetValue(), b.GetValue()) {
		return true
	}
	ma, mb := newMsg(), newMsg()
	if proto.Unmarshal(a.GetValue(), ma) != nil || proto.Unmarshal(b.GetValue(), mb) != nil {
		return false
	}
	return proto.Equal(ma, mb)
}

// decodeListener decodes and validates a Listener. The filter chains whose
// bytes are the same as in the previous version of the Listener (the
// client's DecodeInput.Previous) are reused as compiled then, not decoded
// again. (A Listener whose bytes are all the previous version's is not
// decoded at all: the client reuses the previous value.)
func decodeListener(in xdsclient.DecodeInput) (string, xdsclient.ResourceData, error) {
	raw, err := filterchain.Split(in.Resource.GetValue())
	if err != nil {
		return "", nil, fmt.Errorf("xdsresource: malformed Listener: %w", err)
	}
	name := raw.Listener.GetName()
	if raw.Listener.GetApiListener() != nil {
		// gRFC A36: a server's Listener is a TCP listener; an API listener
		// is a client's.
		return name, nil, fmt.Errorf("xdsresource: Listener %q is an API listener (a client's), not a TCP listener for a server", name)
	}
	var prev *filterchain.Table
	if p, ok := in.Previous.(*Listener); ok {
		prev = p.Table
	}
	env := grpcservice.EnvOf(in.Bootstrap, in.Server)
	table, err := filterchain.CompileRaw(raw, filterchain.Options{
		Filters:               httpfilter.NewParser(builtin.Registry).WithEnv(env, env.Key()),
		CertProviderInstances: certProviderInstances(in.Bootstrap),
		Previous:              prev,
	})
	if err != nil {
		return name, nil, err
	}
	return name, &Listener{Name: name, Table: table, raw: in.Resource}, nil
}

// certProviderInstances lists the bootstrap's certificate provider
// instances for filterchain: every name, mapped to whether the server can
// run its plugin, file_watcher or a plugin that was registered with
// grpc-go's certprovider registry when the bootstrap was parsed (gRFC A29: a
// Listener naming another instance is NACKed). A nil bootstrap (tests of
// the decoder alone) skips the check.
func certProviderInstances(cfg *bootstrap.Config) map[string]bool {
	if cfg == nil {
		return nil
	}
	out := make(map[string]bool, len(cfg.CertProviders))
	for name, p := range cfg.CertProviders {
		out[name] = p.PluginName == bootstrap.PluginFileWatcher && p.FileWatcher != nil || p.Buildable() != nil
	}
	return out
}

// decodeRouteConfig decodes and validates a RouteConfiguration. Its
// typed_per_filter_config overrides are parsed, as a Listener's filters
// are, with the bootstrap and the trust of the server that sent it (gRFC
// A102): an override may name a side channel (ext_proc's grpc_service).
func decodeRouteConfig(in xdsclient.DecodeInput) (string, xdsclient.ResourceData, error) {
	rc := &routepb.RouteConfiguration{}
	if err := proto.Unmarshal(in.Resource.GetValue(), rc); err != nil {
		return "", nil, fmt.Errorf("xdsresource: malformed RouteConfiguration: %w", err)
	}
	env := grpcservice.EnvOf(in.Bootstrap, in.Server)
	parser := httpfilter.NewParser(builtin.Registry).WithEnv(env, env.Key())
	router, err := routing.Compile(rc, parser)
	if err != nil {
		return rc.GetName(), nil, err
	}
	out := &RouteConfig{Name: rc.GetName(), Router: router, raw: in.Resource}
	if parser.UsedEnv() {
		out.envKey = parser.EnvKey()
	}
	return rc.GetName(), out, nil
}
