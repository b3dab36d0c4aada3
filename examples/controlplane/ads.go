package main

import (
	"context"
	"log"
	"sync"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
)

// resourceStore holds the resources served, one LinearCache per type. An xDS
// server subscribes to its Listener and RouteConfigurations by name; a
// LinearCache answers such a subscription as soon as the resource exists and
// tells it at once when a Listener is deleted (the snapshot cache, in ADS
// mode, holds such answers back until all names asked for exist).
type resourceStore struct {
	listeners *cachev3.LinearCache
	routes    *cachev3.LinearCache
	version   int // of the last push; each push bumps both caches' versions once
}

func newResourceStore() *resourceStore {
	return &resourceStore{
		listeners: cachev3.NewLinearCache(resourcev3.ListenerType),
		routes:    cachev3.NewLinearCache(resourcev3.RouteType),
	}
}

// cache is the cache that the ADS server reads.
func (s *resourceStore) cache() cachev3.Cache {
	return &cachev3.MuxCache{
		Classify: func(r *cachev3.Request) string { return r.GetTypeUrl() },
		Caches: map[string]cachev3.Cache{
			resourcev3.ListenerType: s.listeners,
			resourcev3.RouteType:    s.routes,
		},
	}
}

// push replaces every resource served with those of r, as one new version
// (version+1). Resources not in r are deleted. The RouteConfigurations
// go first, so that a Listener naming a new one finds it already there.
func (s *resourceStore) push(r *resources) {
	routes := make(map[string]cachetypes.Resource, len(r.routes))
	for _, rc := range r.routes {
		routes[rc.GetName()] = rc
	}
	listeners := make(map[string]cachetypes.Resource, len(r.listeners))
	for _, l := range r.listeners {
		listeners[l.GetName()] = l
	}
	s.routes.SetResources(routes)
	s.listeners.SetResources(listeners)
	s.version++
}

// newADSServer returns a gRPC server offering the ADS service over the
// resources of store, that logs on logger when an xDS client connects,
// applies (ACKs) or rejects (NACKs) a version, and disconnects.
func newADSServer(ctx context.Context, store *resourceStore, logger *log.Logger) *grpc.Server {
	// WaitForHandlers: Stop returns once every ADS stream has ended.
	srv := grpc.NewServer(grpc.WaitForHandlers(true))
	sl := &streamLogger{log: logger, streams: make(map[int64]*streamState)}
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: sl.request,
		StreamClosedFunc:  sl.closed,
	}
	discoverypb.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(ctx, store.cache(), cb))
	return srv
}

// streamLogger logs what the xDS clients say on their ADS streams.
type streamLogger struct {
	log     *log.Logger
	mu      sync.Mutex
	streams map[int64]*streamState
}

type streamState struct {
	node  string            // the client's node ID, sent in its first request
	acked map[string]string // type URL -> the last version it applied
}

func (sl *streamLogger) request(id int64, req *discoverypb.DiscoveryRequest) error {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	st := sl.streams[id]
	if st == nil {
		st = &streamState{node: req.GetNode().GetId(), acked: make(map[string]string)}
		sl.streams[id] = st
		sl.log.Printf("xDS client %q connected (stream %d)", st.node, id)
	}
	typ := shortType(req.GetTypeUrl())
	switch {
	case req.GetErrorDetail() != nil:
		sl.log.Printf("xDS client %q REJECTED (NACK) the %s update, keeps version %q: %s",
			st.node, typ, req.GetVersionInfo(), req.GetErrorDetail().GetMessage())
	case req.GetResponseNonce() != "" && st.acked[req.GetTypeUrl()] != req.GetVersionInfo():
		st.acked[req.GetTypeUrl()] = req.GetVersionInfo()
		sl.log.Printf("xDS client %q applied (ACK) %s version %s", st.node, typ, req.GetVersionInfo())
	}
	return nil
}

func (sl *streamLogger) closed(id int64, _ *corepb.Node) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if st := sl.streams[id]; st != nil {
		sl.log.Printf("xDS client %q disconnected (stream %d)", st.node, id)
		delete(sl.streams, id)
	}
}

func shortType(typeURL string) string {
	switch typeURL {
	case resourcev3.ListenerType:
		return "Listener"
	case resourcev3.RouteType:
		return "RouteConfiguration"
	}
	return typeURL
}
