// Package controlplane runs a real xDS management server in the process:
// go-control-plane's ADS server on loopback, for the tests (through
// internal/testutils/e2e) and the soak program.
//
// # The management server
//
// Start serves go-control-plane's ADS implementation
// (github.com/envoyproxy/go-control-plane/pkg/server/v3, ordered ADS, with
// legacy wildcard off as gRPC clients expect) on a real grpc.Server on
// loopback. Tests push configuration with Update and observe the client
// through the recorded DiscoveryRequests (Requests, WaitForRequest, IsACK,
// IsNACK).
//
// # Cache choice
//
// Resources live in one go-control-plane LinearCache per type URL, combined
// by a MuxCache that routes each request to the cache of its type URL. This
// makes the server answer the way a production control plane does:
//
//   - A resource requested by name is sent as soon as it exists, also when it
//     is published after the request (the linear cache keeps a watch per name).
//   - Deleting a Listener or Cluster (the full-state types of gRFC A27) sends
//     a response that no longer contains it, to clients that subscribed to it
//     by name. For other types (RouteConfiguration, ...) state-of-the-world
//     cannot express a deletion, so nothing is sent.
//   - A first request (empty version_info) is always answered, with an empty
//     resource list if none of the requested resources exists.
//
// The snapshot cache is not used: in ADS mode it waits until every resource
// of a type is requested and does not send the deletion of a Listener to a
// client that asked for it by name, so a client would see neither deletions
// nor late resources the way it would in production.
//
// Versions: each type URL has its own version_info, "0" before its first
// Update; every Update of a type bumps it ("1", "2", ...) and re-sends every
// subscribed resource of that type, even if unchanged.
//
// Nothing validates resources: a deliberately broken Listener, or a message of
// another type pushed under a type URL, reaches the client as is. Note that
// go-control-plane always sets each resource Any's type_url to the response's
// type URL and fills value with the message's wire bytes, so a message of the
// wrong type arrives as those bytes labelled with the type URL it was pushed
// under.
//
// # NACKs
//
// A NACK is a DiscoveryRequest with error_detail set; its version_info is the
// last version the client accepted and its response_nonce the nonce of the
// rejected response. The server does not resend the rejected resources until
// the next Update of that type (see StartManagementServer for how a NACK of
// the very first response is handled).
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Options configures Start. The zero value is
// valid. Callbacks are called synchronously on the stream's goroutine, so they
// must not block for long; they may run concurrently for different streams.
type Options struct {
	// Listener is the listener to serve on first. If nil, a new listener on
	// 127.0.0.1:0 is used. Restart listens again on the same address.
	Listener net.Listener
	// OnStreamRequest, if set, is called for every DiscoveryRequest received,
	// after it was recorded, with the recorded request (exactly as the
	// client sent it, node filled in). req must not be modified.
	OnStreamRequest func(streamID int64, req *discoverypb.DiscoveryRequest)
	// OnStreamOpen, if set, is called when an ADS stream opens.
	OnStreamOpen func(streamID int64)
	// OnStreamClosed, if set, is called when an ADS stream ends.
	OnStreamClosed func(streamID int64)
	// SendEverything lists type URLs whose requests are answered with every
	// resource of the type, whatever names they carry, as istiod answers an
	// LDS request (it sends every Listener of the node, clients' included,
	// to a request with no names). The recorded requests are left as the
	// client sent them.
	SendEverything []string
	// ForgetRequests keeps no copy of the requests received, for a
	// long-running server (Requests and WaitForRequest then see none).
	ForgetRequests bool
	// ServerOptions are added to the options of the gRPC server (after
	// the server's own), e.g. TLS credentials and an interceptor that
	// checks the clients' call credentials.
	ServerOptions []grpc.ServerOption
}

// Server is an in-process xDS management server. Its methods are
// safe for concurrent use.
type Server struct {
	// Address is the host:port the server listens on. It stays the same
	// across Restart. Immutable.
	Address string

	opts   Options                         // immutable
	caches map[string]*cachev3.LinearCache // by type URL; immutable after creation (the caches lock themselves)
	xds    serverv3.Server                 // shared by every grpc.Server, so stream IDs keep growing across restarts

	mu       sync.Mutex
	grpcSrv  *grpc.Server                    // guarded by mu; nil when stopped
	serveErr chan error                      // guarded by mu; result of the current Serve
	reqs     []*discoverypb.DiscoveryRequest // guarded by mu; clones, in arrival order
	reqAdded chan struct{}                   // guarded by mu; closed and replaced on every new request
	lastResp map[streamType]string           // guarded by mu; version_info of the last response per stream and type
	sent     map[streamNonce]string          // guarded by mu; version_info of each response sent, by stream and nonce
	answered map[string]map[string]bool      // guarded by mu; by type URL, the versions some client ACKed or NACKed
	updates  map[string]int                  // guarded by mu; by type URL, how many Updates set it: its current version
}

type streamNonce struct {
	stream int64
	nonce  string
}

type streamType struct {
	stream  int64
	typeURL string
}

// supportedTypeURLs are the type URLs the server has a cache for. A request
// for any other type URL fails the client's stream.
var supportedTypeURLs = []string{
	resourcev3.ClusterType,
	resourcev3.EndpointType,
	resourcev3.ListenerType,
	resourcev3.RouteType,
	resourcev3.ScopedRouteType,
	resourcev3.VirtualHostType,
	resourcev3.SecretType,
	resourcev3.RuntimeType,
	resourcev3.ExtensionConfigType,
}

// Start starts a management server with no resources. The caller must Stop
// it.
//
// A NACK of the very first response of a type carries an empty version_info,
// which go-control-plane's linear cache takes as "this client has nothing"
// and answers at once with the same resources, so the client and the server
// would trade the same rejected response and NACK in a tight loop. A real
// control plane logs a NACK and waits for new configuration; to behave like
// one, the server hands the cache such a NACK with the version of the
// rejected response (the recorded request is left unchanged).
func Start(opts Options) (*Server, error) {
	lis := opts.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("controlplane: listening: %w", err)
		}
	}
	m := &Server{
		Address:  lis.Addr().String(),
		opts:     opts,
		caches:   make(map[string]*cachev3.LinearCache),
		reqAdded: make(chan struct{}),
		lastResp: make(map[streamType]string),
		sent:     make(map[streamNonce]string),
		answered: make(map[string]map[string]bool),
		updates:  make(map[string]int),
	}
	mux := &cachev3.MuxCache{
		Classify:      func(r *cachev3.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cachev3.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        make(map[string]cachev3.Cache),
	}
	for _, typeURL := range supportedTypeURLs {
		c := cachev3.NewLinearCache(typeURL)
		m.caches[typeURL] = c
		mux.Caches[typeURL] = c
	}
	m.xds = serverv3.NewServer(context.Background(), mux, m.callbacks(),
		sotwv3.WithOrderedADS(), sotwv3.DeactivateLegacyWildcard())
	m.serve(lis)
	return m, nil
}

func (m *Server) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, _ string) error {
			if m.opts.OnStreamOpen != nil {
				m.opts.OnStreamOpen(id)
			}
			return nil
		},
		StreamClosedFunc: func(id int64, _ *corepb.Node) {
			m.forgetStream(id)
			if m.opts.OnStreamClosed != nil {
				m.opts.OnStreamClosed(id)
			}
		},
		StreamRequestFunc: func(id int64, req *discoverypb.DiscoveryRequest) error {
			recorded := m.record(id, req)
			if m.opts.OnStreamRequest != nil {
				m.opts.OnStreamRequest(id, recorded)
			}
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoverypb.DiscoveryRequest, resp *discoverypb.DiscoveryResponse) {
			m.mu.Lock()
			m.lastResp[streamType{id, resp.GetTypeUrl()}] = resp.GetVersionInfo()
			m.sent[streamNonce{id, resp.GetNonce()}] = resp.GetVersionInfo()
			m.mu.Unlock()
		},
	}
}

// record stores a copy of req and returns it, then, for a NACK of a first
// response, rewrites req's version as explained on StartManagementServer.
func (m *Server) record(id int64, req *discoverypb.DiscoveryRequest) *discoverypb.DiscoveryRequest {
	recorded := proto.Clone(req).(*discoverypb.DiscoveryRequest)
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.sent[streamNonce{id, req.GetResponseNonce()}]; ok && req.GetResponseNonce() != "" {
		if m.answered[req.GetTypeUrl()] == nil {
			m.answered[req.GetTypeUrl()] = make(map[string]bool)
		}
		m.answered[req.GetTypeUrl()][v] = true
	}
	if !m.opts.ForgetRequests {
		m.reqs = append(m.reqs, recorded)
	}
	close(m.reqAdded)
	m.reqAdded = make(chan struct{})
	if req.GetErrorDetail() != nil && req.GetVersionInfo() == "" {
		if v, ok := m.lastResp[streamType{id, req.GetTypeUrl()}]; ok {
			req.VersionInfo = v
		}
	}
	if slices.Contains(m.opts.SendEverything, req.GetTypeUrl()) {
		// go-control-plane's explicit wildcard: every resource of the type.
		req.ResourceNames = []string{"*"}
	}
	return recorded
}

func (m *Server) forgetStream(id int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.lastResp {
		if k.stream == id {
			delete(m.lastResp, k)
		}
	}
	for k := range m.sent {
		if k.stream == id {
			delete(m.sent, k)
		}
	}
}

// serve starts a new grpc.Server on lis.
func (m *Server) serve(lis net.Listener) {
	// WaitForHandlers makes Stop return only once every stream handler
	// returned, so no goroutine outlives Stop.
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.WaitForHandlers(true)}, m.opts.ServerOptions...)...)
	discoverypb.RegisterAggregatedDiscoveryServiceServer(s, m.xds)
	errc := make(chan error, 1)
	m.mu.Lock()
	m.grpcSrv, m.serveErr = s, errc
	m.mu.Unlock()
	go func() { errc <- s.Serve(lis) }()
}

// Stop stops the gRPC server: the listener is closed and every open stream
// ends. The resources are kept for Restart. Stop returns once every stream
// handler returned. Calling it again, or on a stopped server, does nothing.
func (m *Server) Stop() {
	m.mu.Lock()
	s, errc := m.grpcSrv, m.serveErr
	m.grpcSrv, m.serveErr = nil, nil
	m.mu.Unlock()
	if s == nil {
		return
	}
	s.Stop()
	<-errc
}

// Restart stops the server if it is running and serves again on the same
// address with the same resources (a new grpc.Server; clients must
// reconnect). It fails if the address cannot be listened on again. Resource
// versions continue where they were, as with a control plane that kept its
// state.
func (m *Server) Restart() error {
	m.Stop()
	lis, err := net.Listen("tcp", m.Address)
	if err != nil {
		return fmt.Errorf("controlplane: listening again on %s: %w", m.Address, err)
	}
	m.serve(lis)
	return nil
}

// Resources is a set of resources for Update. A nil field (or a type URL
// absent from Raw and NamedRaw) leaves that type unchanged; a non-nil empty
// slice or map removes every resource of the type. Resources given for the
// same type URL in several fields are merged; names must be unique per type.
type Resources struct {
	Listeners []*listenerpb.Listener
	Routes    []*routepb.RouteConfiguration
	Clusters  []*clusterpb.Cluster
	// Raw maps a type URL to messages pushed as is under it; each message is
	// named by its name field (cluster_name for a ClusterLoadAssignment). Use
	// it for messages of a wrong type or other resource types.
	Raw map[string][]proto.Message
	// NamedRaw maps a type URL to resource name to message, for messages that
	// have no name field or must be published under another name.
	NamedRaw map[string]map[string]proto.Message
}

// Update replaces, for every type present in r, the whole set of resources
// of that type (state-of-the-world: resources missing from r are deleted),
// and pushes the change to subscribed clients. Types absent from r are left
// unchanged. Types are pushed in the order the xDS protocol recommends for
// ADS (clusters, endpoints, listeners, routes, then the others). Nothing is
// validated. Update returns an error (and changes nothing) for a nameless
// or duplicate resource or an unsupported type URL, or ctx's error if ctx
// is done. It is safe to call concurrently, but concurrent Updates of the
// same type race.
func (m *Server) Update(ctx context.Context, r Resources) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	byType, err := r.byTypeURL()
	if err != nil {
		return err
	}
	for _, typeURL := range supportedTypeURLs {
		set, ok := byType[typeURL]
		if !ok {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		m.mu.Lock()
		m.updates[typeURL]++
		m.mu.Unlock()
		m.caches[typeURL].SetResources(set)
	}
	return nil
}

// WaitForAnswer waits until a client answers the response that carried the
// version of typeURL the last Update of that type published: an ACK of it,
// or a NACK of it. This module's xDS client answers a response once it has
// decoded it, without waiting for its watchers to handle it (it waits for
// them before it reads the next response): by the answer, the client has
// handled every earlier response, but what its watchers do with this one
// (a server's serving-mode change, say) may still be to come. It returns
// ctx.Err() if ctx ends first, and at once if typeURL was never updated.
func (m *Server) WaitForAnswer(ctx context.Context, typeURL string) error {
	for {
		m.mu.Lock()
		n, added := m.updates[typeURL], m.reqAdded
		done := n == 0 || m.answered[typeURL][strconv.Itoa(n)]
		m.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-added:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Requests returns a copy of every DiscoveryRequest received so far, on all
// streams, in the order they arrived, as the client sent them except that
// go-control-plane fills in the stream's node on requests that omit it.
func (m *Server) Requests() []*discoverypb.DiscoveryRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*discoverypb.DiscoveryRequest, len(m.reqs))
	for i, r := range m.reqs {
		out[i] = proto.Clone(r).(*discoverypb.DiscoveryRequest)
	}
	return out
}

// WaitForRequest returns a copy of the first request, among those received
// so far and those still to come, for which pred returns true. It returns
// ctx.Err() if ctx is done first. pred runs on the calling goroutine and must
// not modify the request it is given.
func (m *Server) WaitForRequest(ctx context.Context, pred func(*discoverypb.DiscoveryRequest) bool) (*discoverypb.DiscoveryRequest, error) {
	seen := 0
	for {
		m.mu.Lock()
		pending := m.reqs[seen:]
		added := m.reqAdded
		m.mu.Unlock()
		// The recorded requests are never modified, so they can be read unlocked.
		for _, r := range pending {
			if pred(r) {
				return proto.Clone(r).(*discoverypb.DiscoveryRequest), nil
			}
		}
		seen += len(pending)
		select {
		case <-added:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// IsACK returns a predicate matching an ACK of version on typeURL: a request
// of that type with that version_info, a response nonce and no error_detail.
func IsACK(typeURL, version string) func(*discoverypb.DiscoveryRequest) bool {
	return func(r *discoverypb.DiscoveryRequest) bool {
		return r.GetTypeUrl() == typeURL && r.GetVersionInfo() == version &&
			r.GetResponseNonce() != "" && r.GetErrorDetail() == nil
	}
}

// IsNACK returns a predicate matching a NACK on typeURL: a request of that
// type with error_detail set.
func IsNACK(typeURL string) func(*discoverypb.DiscoveryRequest) bool {
	return func(r *discoverypb.DiscoveryRequest) bool {
		return r.GetTypeUrl() == typeURL && r.GetErrorDetail() != nil
	}
}

// IsSubscription returns a predicate matching a request on typeURL whose
// resource_names are exactly names, in any order (none: an unsubscription
// from every resource of the type).
func IsSubscription(typeURL string, names ...string) func(*discoverypb.DiscoveryRequest) bool {
	return func(r *discoverypb.DiscoveryRequest) bool {
		if r.GetTypeUrl() != typeURL || len(r.GetResourceNames()) != len(names) {
			return false
		}
		want := make(map[string]int, len(names))
		for _, n := range names {
			want[n]++
		}
		for _, n := range r.GetResourceNames() {
			if want[n] == 0 {
				return false
			}
			want[n]--
		}
		return true
	}
}

var errNoName = errors.New("controlplane: resource has no name")

// byTypeURL groups r's resources by type URL and names them.
func (r Resources) byTypeURL() (map[string]map[string]cachetypes.Resource, error) {
	out := make(map[string]map[string]cachetypes.Resource)
	add := func(typeURL, name string, msg proto.Message) error {
		if msg == nil {
			return fmt.Errorf("controlplane: nil resource under %q", typeURL)
		}
		if name == "" {
			return fmt.Errorf("%w: %T under %q", errNoName, msg, typeURL)
		}
		set := out[typeURL]
		if _, dup := set[name]; dup {
			return fmt.Errorf("controlplane: two resources named %q under %q", name, typeURL)
		}
		set[name] = msg
		return nil
	}
	present := func(typeURL string) error {
		if !slices.Contains(supportedTypeURLs, typeURL) {
			return fmt.Errorf("controlplane: unsupported type URL %q", typeURL)
		}
		if out[typeURL] == nil {
			out[typeURL] = make(map[string]cachetypes.Resource)
		}
		return nil
	}
	if r.Listeners != nil {
		if err := present(resourcev3.ListenerType); err != nil {
			return nil, err
		}
		for _, l := range r.Listeners {
			if err := add(resourcev3.ListenerType, l.GetName(), l); err != nil {
				return nil, err
			}
		}
	}
	if r.Routes != nil {
		if err := present(resourcev3.RouteType); err != nil {
			return nil, err
		}
		for _, rc := range r.Routes {
			if err := add(resourcev3.RouteType, rc.GetName(), rc); err != nil {
				return nil, err
			}
		}
	}
	if r.Clusters != nil {
		if err := present(resourcev3.ClusterType); err != nil {
			return nil, err
		}
		for _, c := range r.Clusters {
			if err := add(resourcev3.ClusterType, c.GetName(), c); err != nil {
				return nil, err
			}
		}
	}
	for typeURL, msgs := range r.Raw {
		if err := present(typeURL); err != nil {
			return nil, err
		}
		for _, msg := range msgs {
			if err := add(typeURL, cachev3.GetResourceName(msg), msg); err != nil {
				return nil, err
			}
		}
	}
	for typeURL, named := range r.NamedRaw {
		if err := present(typeURL); err != nil {
			return nil, err
		}
		for name, msg := range named {
			if err := add(typeURL, name, msg); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
