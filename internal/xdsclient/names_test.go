package xdsclient

import "testing"

func TestParseName(t *testing.T) {
	tests := []struct {
		desc, name              string
		wantXDSTP               bool
		wantAuthority, wantType string
		wantCanonical           string
		wantErr                 bool
	}{
		{desc: "old style", name: "server.example.com:443", wantCanonical: "server.example.com:443"},
		{desc: "old style with query", name: "grpc/server?xds.resource.listening_address=1.2.3.4:5", wantCanonical: "grpc/server?xds.resource.listening_address=1.2.3.4:5"},
		{
			desc: "xdstp sorted params", name: "xdstp://auth.example.com/envoy.config.listener.v3.Listener/a/b?z=1&a=2",
			wantXDSTP: true, wantAuthority: "auth.example.com", wantType: "envoy.config.listener.v3.Listener",
			wantCanonical: "xdstp://auth.example.com/envoy.config.listener.v3.Listener/a/b?a=2&z=1",
		},
		{
			desc: "xdstp repeated param keeps the last", name: "xdstp://a/T/id?k=1&k=2",
			wantXDSTP: true, wantAuthority: "a", wantType: "T", wantCanonical: "xdstp://a/T/id?k=2",
		},
		{
			desc: "xdstp empty authority", name: "xdstp:///T/id",
			wantXDSTP: true, wantAuthority: "", wantType: "T", wantCanonical: "xdstp:///T/id",
		},
		{
			desc: "xdstp percent-encoded id kept", name: "xdstp://a/T/grpc/server/0.0.0.0%3A8080",
			wantXDSTP: true, wantAuthority: "a", wantType: "T", wantCanonical: "xdstp://a/T/grpc/server/0.0.0.0%3A8080",
		},
		{desc: "xdstp without id", name: "xdstp://a/T", wantErr: true},
		{desc: "xdstp bad escape", name: "xdstp://a/T/%zz", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := parseName(tc.name)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseName(%q) error = %v, want error %v", tc.name, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got.xdstp != tc.wantXDSTP || got.authority != tc.wantAuthority || got.typ != tc.wantType || got.canonical != tc.wantCanonical {
				t.Errorf("parseName(%q) = %+v, want {xdstp %v, authority %q, type %q, canonical %q}",
					tc.name, got, tc.wantXDSTP, tc.wantAuthority, tc.wantType, tc.wantCanonical)
			}
		})
	}
}
