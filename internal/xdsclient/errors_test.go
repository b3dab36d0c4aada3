package xdsclient_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

func TestNewErrors(t *testing.T) {
	if _, err := xdsclient.New(nil, xdsclient.Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, _, err := xdsclient.NewPool(xdsclient.Options{}).Get(nil); err == nil {
		t.Error("Pool.Get(nil) succeeded")
	}
	clone := *listenerType
	cfg := newClient(t, e2e.BootstrapOptions{ServerURIs: []string{"127.0.0.1:1"}}, xdsclient.Options{}).BootstrapConfig()
	if _, err := xdsclient.New(cfg, xdsclient.Options{ResourceTypes: []*xdsclient.ResourceType{listenerType, &clone}}); err == nil {
		t.Error("New with two resource types of one type URL succeeded")
	}
	if _, err := xdsclient.New(cfg, xdsclient.Options{ResourceTypes: []*xdsclient.ResourceType{{TypeURL: "x"}}}); err == nil {
		t.Error("New with a resource type without Decode succeeded")
	}
}

func TestErrorKinds(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		desc     string
		err      *xdsclient.Error
		wantDNE  bool
		wantText []string
	}{
		{
			desc:     "does not exist",
			err:      &xdsclient.Error{Kind: xdsclient.KindDoesNotExist, TypeName: "Listener", Name: "l", NodeID: "n"},
			wantDNE:  true,
			wantText: []string{"xdsclient: ", `"l"`, "does not exist", `"n"`},
		},
		{
			desc:     "nack",
			err:      &xdsclient.Error{Kind: xdsclient.KindNACK, TypeName: "Listener", Name: "l", Server: "s", NodeID: "n", Err: cause},
			wantText: []string{"rejected", `"s"`, ": cause"},
		},
		{
			desc:     "connection",
			err:      &xdsclient.Error{Kind: xdsclient.KindConnection, Server: "s", NodeID: "n", Err: cause},
			wantText: []string{"connection", `"s"`, ": cause"},
		},
		{
			desc:     "timeout (gRFC A88)",
			err:      &xdsclient.Error{Kind: xdsclient.KindTimeout, TypeName: "Listener", Name: "l", Server: "s", NodeID: "n", Err: cause},
			wantText: []string{"not received in time", `"l"`, `"s"`, ": cause"},
		},
		{
			desc:     "received error (xRFC TP3)",
			err:      &xdsclient.Error{Kind: xdsclient.KindReceivedError, TypeName: "Listener", Name: "l", Server: "s", NodeID: "n", Err: cause},
			wantText: []string{"reported an error", `"l"`, ": cause"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := errors.Is(tc.err, xdsclient.ErrResourceDoesNotExist); got != tc.wantDNE {
				t.Errorf("errors.Is(ErrResourceDoesNotExist) = %v, want %v", got, tc.wantDNE)
			}
			if tc.err.Err != nil && !errors.Is(tc.err, tc.err.Err) {
				t.Error("the cause is not unwrapped")
			}
			msg := tc.err.Error()
			for _, w := range tc.wantText {
				if !strings.Contains(msg, w) {
					t.Errorf("Error() = %q, does not contain %q", msg, w)
				}
			}
		})
	}
}
