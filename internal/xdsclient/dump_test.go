package xdsclient_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"google.golang.org/protobuf/proto"
)

// Dump reports REQUESTED, ACKED, NACKED (with the error state and the last
// good value) and DOES_NOT_EXIST (gRFC A40); the error state of a NACKed
// response is also on the valid resources it carried, and an accepted
// response clears it (A40 "continue after first error").
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

	for _, name := range []string{"nacked", "acked"} {
		e := got[name].Error
		if e == nil || e.Version != "2" || !strings.Contains(e.Reason, "nacked: listener_filters are not supported") || e.Time.Before(before) {
			t.Errorf("%s: error state %+v, want version 2, the reason of the NACK and a recent time", name, e)
		}
	}
	for _, name := range []string{"deleted", "requested"} {
		if got[name].Error != nil {
			t.Errorf("%s: error state %+v, want none", name, got[name].Error)
		}
	}
	if *got["acked"].Error != *got["nacked"].Error {
		t.Errorf("error states differ: acked %+v, nacked %+v; want the response's on both", got["acked"].Error, got["nacked"].Error)
	}
	if got["acked"].LastUpdated.Before(before) {
		t.Errorf("acked: last updated %v, want after %v", got["acked"].LastUpdated, before)
	}
	for s, want := range map[xdsclient.ResourceStatus]string{
		xdsclient.StatusRequested: "REQUESTED", xdsclient.StatusACKed: "ACKED",
		xdsclient.StatusNACKed: "NACKED", xdsclient.StatusDoesNotExist: "DOES_NOT_EXIST",
		xdsclient.StatusTimeout: "TIMEOUT", xdsclient.StatusReceivedError: "RECEIVED_ERROR",
	} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}

// An accepted response clears the error state of the resources it carries;
// a resource it does not carry keeps its NACK (gRFC A40's example).
func TestDumpErrorStateClearedByACK(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})
	a, b := testListener("a", 1), testListener("b", 2)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{a, b}})
	wa, wb := newTestWatcher(), newTestWatcher()
	defer c.WatchResource(listenerType, "a", wa)()
	defer c.WatchResource(listenerType, "b", wb)()
	wa.wantData(ctx, t, a)
	wb.wantData(ctx, t, b)

	a2 := testListener("a", 3)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{a2, badListener("b")}})
	wa.wantData(ctx, t, a2)
	wb.wantError(ctx, t, "ambient", xdsclient.KindNACK)
	b3 := testListener("b", 4)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{a2, b3}})
	wb.wantData(ctx, t, b3)

	for _, d := range c.Dump() {
		if d.Status != xdsclient.StatusACKed || d.Version != "3" || d.Error != nil {
			t.Errorf("%s: status %v version %q error %+v, want ACKED, version 3, no error state", d.Name, d.Status, d.Version, d.Error)
		}
	}
}

// Servers reports the ADS stream to the management server while it is up,
// and how it ended once the server went away, with the last good
// configuration still cached.
func TestServers(t *testing.T) {
	ctx := testContext(t)
	ms := e2e.StartManagementServer(t, e2e.ManagementServerOptions{})
	c := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{ms.Address}}, xdsclient.Options{})
	if got := c.Servers(); len(got) != 0 {
		t.Errorf("Servers() before any watch = %+v, want none (no channel yet)", got)
	}
	l := testListener("lis", 1)
	update(ctx, t, ms, e2e.Resources{Listeners: []*listenerpb.Listener{l}})
	w := newTestWatcher()
	defer c.WatchResource(listenerType, "lis", w)()
	w.wantData(ctx, t, l)
	got := c.Servers()
	if len(got) != 1 || got[0].URI != ms.Address || !got[0].Connected || !got[0].StreamUp || got[0].LastError != nil {
		t.Fatalf("Servers() while connected = %+v, want one connected server %q without error", got, ms.Address)
	}

	before := time.Now()
	ms.Stop()
	testutils.WaitFor(ctx, t, "Servers() to show a stream down with its error after the management server stopped", func() error {
		got = c.Servers()
		if len(got) == 1 && !got[0].StreamUp && got[0].LastError != nil {
			return nil
		}
		return fmt.Errorf("Servers() = %+v", got)
	})
	if got[0].LastErrorTime.Before(before) {
		t.Errorf("LastErrorTime %v is before the server stopped (%v)", got[0].LastErrorTime, before)
	}
}
