package xdsclient_test

import (
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/xdsclient"
	"google.golang.org/protobuf/proto"
)

// Dump reports REQUESTED, ACKED, NACKED (with the error state and the last
// good value) and DOES_NOT_EXIST (gRFC A40).
func TestDumpStatuses(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})

	acked, nacked, deleted := testListener("acked", 1), testListener("nacked", 2), testListener("deleted", 3)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{acked, nacked, deleted}})
	ws := map[string]*testWatcher{}
	for _, name := range []string{"acked", "nacked", "deleted", "requested"} {
		ws[name] = newTestWatcher()
		defer c.WatchResource(listenerType, name, ws[name])()
	}
	ws["acked"].wantData(ctx, t, acked)
	ws["nacked"].wantData(ctx, t, nacked)
	ws["deleted"].wantData(ctx, t, deleted)
	before := time.Now()

	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{acked, badListener("nacked")}})
	ws["nacked"].wantError(ctx, t, "ambient", xdsclient.KindNACK)
	ws["deleted"].wantError(ctx, t, "error", xdsclient.KindDoesNotExist)

	got := map[string]xdsclient.ResourceDump{}
	for _, d := range c.Dump() {
		if d.TypeURL != listenerURL {
			t.Errorf("dump has type %q", d.TypeURL)
		}
		got[d.Name] = d
	}
	if len(got) != 4 {
		t.Fatalf("dump has %d resources, want 4: %+v", len(got), got)
	}
	check := func(name string, status xdsclient.ResourceStatus, version string, raw proto.Message) {
		t.Helper()
		d := got[name]
		if d.Status != status || d.Version != version {
			t.Errorf("%s: status %v version %q, want %v %q", name, d.Status, d.Version, status, version)
		}
		if raw == nil {
			if d.Raw != nil {
				t.Errorf("%s: raw %v, want none", name, d.Raw)
			}
			return
		}
		l := &listenerpb.Listener{}
		if d.Raw == nil || d.Raw.UnmarshalTo(l) != nil || !proto.Equal(l, raw) {
			t.Errorf("%s: raw %v, want %v", name, d.Raw, raw)
		}
	}
	check("acked", xdsclient.StatusACKed, "2", acked)
	check("nacked", xdsclient.StatusNACKed, "1", nacked)
	check("deleted", xdsclient.StatusDoesNotExist, "", nil)
	check("requested", xdsclient.StatusRequested, "", nil)

	e := got["nacked"].Error
	if e == nil || e.Version != "2" || e.Reason == "" || e.Time.Before(before) {
		t.Errorf("nacked: error state %+v, want version 2, a reason and a recent time", e)
	}
	for _, name := range []string{"acked", "deleted", "requested"} {
		if got[name].Error != nil {
			t.Errorf("%s: error state %+v, want none", name, got[name].Error)
		}
	}
	if got["acked"].LastUpdated.Before(before) {
		t.Errorf("acked: last updated %v, want after %v", got["acked"].LastUpdated, before)
	}
	for s, want := range map[xdsclient.ResourceStatus]string{
		xdsclient.StatusRequested: "REQUESTED", xdsclient.StatusACKed: "ACKED",
		xdsclient.StatusNACKed: "NACKED", xdsclient.StatusDoesNotExist: "DOES_NOT_EXIST",
	} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}
