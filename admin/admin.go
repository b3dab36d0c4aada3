// Package admin serves a status page of an xDS server for people: what each
// listener serves with right now (serving mode, Listener version, last
// NACK, filter chains with their match, security, routes and HTTP filters,
// connections and drains, RBAC decisions) and the xDS client's connection
// to the control plane, with a link to the CSDS dump as JSON.
//
// Nothing is served unless the handler is mounted, typically on an admin
// port that only operators reach:
//
//	mux := http.NewServeMux()
//	mux.Handle("/xds/", http.StripPrefix("/xds", admin.NewStatusHandler(srv)))
//	go http.Serve(adminLis, mux)
//
// The page is plain server-rendered HTML, with no script and no external
// asset, and read-only. Every string that comes from the control plane is
// escaped, and it names certificate provider instances, never key material.
// Building it reads the server's state without holding up connections or
// RPCs; it is meant to be opened by a person, not polled by a program (use
// CSDS and the metrics for that).
//
// # Stability
//
// Stable: NewStatusHandler and the paths it serves. What the page shows and
// how is for people and may change in any release; the CSDS dump is gRFC
// A40's ClientStatusResponse.
package admin

import (
	"net/http"
	"strings"

	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/csds"
	"github.com/proxyless-grpc/xds/internal/server/status"
)

// NewStatusHandler returns an http.Handler that serves the status page of
// srv at its root ("/") and the CSDS dump of every xDS client of the process
// (gRFC A40, the ClientStatusResponse as protobuf JSON) at "csds.json",
// which the page links to relatively: mount the handler on a path that ends
// with "/". Only GET and HEAD are served.
func NewStatusHandler(srv *xds.GRPCServer) http.Handler {
	return &handler{srv: srv}
}

type handler struct {
	srv *xds.GRPCServer
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "read-only: only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	// No script, frame, or fetch of anything: the page is self-contained.
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; frame-ancestors 'none'")
	switch {
	case strings.HasSuffix(r.URL.Path, "/csds.json") || r.URL.Path == "csds.json":
		h.serveCSDS(w, r)
	case r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/"):
		h.servePage(w)
	default:
		http.NotFound(w, r)
	}
}

func (h *handler) servePage(w http.ResponseWriter) {
	st := status.ServerOf(h.srv)
	if st == nil {
		http.Error(w, "admin: no xDS server", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pageTemplate.Execute(w, buildPage(st)); err != nil {
		// The header is sent; all that is left is to cut the page short.
		return
	}
}

func (h *handler) serveCSDS(w http.ResponseWriter, r *http.Request) {
	s, err := csds.NewClientStatusDiscoveryServer()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer s.Close()
	resp, err := s.FetchClientStatus(r.Context(), &csdspb.ClientStatusRequest{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(resp)
	if err != nil {
		http.Error(w, "admin: encoding the CSDS dump: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}
