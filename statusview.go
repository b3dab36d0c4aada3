package xds

import (
	"cmp"
	"slices"
	"time"

	"github.com/proxyless-grpc/xds/internal/server/listener"
	"github.com/proxyless-grpc/xds/internal/server/status"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

func init() {
	status.ServerOf = func(srv any) *status.Server {
		s, ok := srv.(*GRPCServer)
		if !ok || s == nil {
			return nil
		}
		return s.status()
	}
}

// status returns the server's status for package admin's page. It takes
// s.mu only to list the listeners; the xDS client's state is read on its
// serializer, the listeners' without a lock.
func (s *GRPCServer) status() *status.Server {
	s.mu.Lock()
	ls := make([]*listener.Listener, 0, len(s.lis))
	for l := range s.lis {
		ls = append(ls, l)
	}
	stopped := s.stopped
	s.mu.Unlock()

	st := &status.Server{
		Time:       time.Now(),
		NodeID:     s.client.BootstrapConfig().Node.GetId(),
		Stopped:    stopped,
		XDSServers: s.client.Servers(),
		Resources:  make(map[status.ResourceKey]xdsclient.ResourceDump),
	}
	for _, d := range s.client.Dump() {
		st.Resources[status.ResourceKey{TypeURL: d.TypeURL, Name: d.Name}] = d
	}
	for _, l := range ls {
		st.Listeners = append(st.Listeners, l.Status())
	}
	slices.SortFunc(st.Listeners, func(a, b status.Listener) int { return cmp.Compare(a.Addr.String(), b.Addr.String()) })
	return st
}
