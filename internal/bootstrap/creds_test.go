package bootstrap

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// fakeRegistry supports the channel_creds type "registered", whose config
// is valid unless it has a member "bad", and records every call.
type fakeRegistry struct {
	calls []string // the types asked about, in order
}

func (r *fakeRegistry) opts() ParseOptions {
	return ParseOptions{
		ChannelCreds: func(typ string, config json.RawMessage) (bool, error) {
			r.calls = append(r.calls, typ)
			if typ != "registered" {
				return false, nil
			}
			var cfg map[string]any
			if len(config) > 0 {
				if err := json.Unmarshal(config, &cfg); err != nil {
					return true, err
				}
			}
			if _, bad := cfg["bad"]; bad {
				return true, errors.New(`"bad" is not allowed`)
			}
			return true, nil
		},
		ChannelCredsHelp: "or a registered type",
	}
}

// TestParseWith_ChannelCreds checks the first-supported rule of gRFC A27
// over the built-in types and a caller's.
func TestParseWith_ChannelCreds(t *testing.T) {
	tests := []struct {
		desc      string
		creds     string
		want      ChannelCreds
		wantCalls []string
	}{
		{
			desc:      "google_default alone",
			creds:     `[{"type": "google_default"}]`,
			want:      ChannelCreds{Type: CredsGoogleDefault},
			wantCalls: nil,
		},
		{
			desc:      "registered first wins over a built-in",
			creds:     `[{"type": "registered", "config": {"k": 1}}, {"type": "insecure"}]`,
			want:      ChannelCreds{Type: "registered", Config: json.RawMessage(`{"k": 1}`)},
			wantCalls: []string{"registered"},
		},
		{
			desc:      "unknown skipped, registered selected, later entries not examined",
			creds:     `[{"type": "unknown_creds"}, {"type": "registered"}, {"type": "registered", "config": {"bad": 1}}, {"type": 7}]`,
			want:      ChannelCreds{Type: "registered"},
			wantCalls: []string{"unknown_creds", "registered"},
		},
		{
			desc:      "built-in first: the caller is not asked",
			creds:     `[{"type": "tls"}, {"type": "registered"}]`,
			want:      ChannelCreds{Type: CredsTLS, TLS: &TLSCreds{RefreshInterval: DefaultRefreshInterval}},
			wantCalls: nil,
		},
		{
			desc:      "built-in names are never asked about",
			creds:     `[{"type": "unknown_creds"}, {"type": "insecure"}]`,
			want:      ChannelCreds{Type: CredsInsecure},
			wantCalls: []string{"unknown_creds"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r := &fakeRegistry{}
			c, err := ParseWith([]byte(srv(tc.creds)), r.opts())
			if err != nil {
				t.Fatalf("ParseWith() failed: %v", err)
			}
			if got := c.XDSServers[0].ChannelCreds; !got.equal(tc.want) || string(got.Config) != string(tc.want.Config) {
				t.Errorf("ParseWith() creds = %+v, want %+v", got, tc.want)
			}
			if strings.Join(r.calls, ",") != strings.Join(tc.wantCalls, ",") {
				t.Errorf("ChannelCreds called for %q, want %q", r.calls, tc.wantCalls)
			}
		})
	}
}

// TestParse_GoogleDefault: Traffic Director's channel credentials parse
// without any option, and allow jwt_token_file call credentials (the
// channel is secure).
func TestParse_GoogleDefault(t *testing.T) {
	c, err := Parse([]byte(`{"xds_servers": [{"server_uri": "trafficdirector.googleapis.com:443",
		"channel_creds": [{"type": "google_default"}],
		"call_creds": [{"type": "jwt_token_file", "config": {"jwt_token_file": "/t.jwt"}}],
		"server_features": ["xds_v3", "ignore_resource_deletion"]}]}`))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	s := c.XDSServers[0]
	if s.ChannelCreds.Type != CredsGoogleDefault || len(s.CallCreds) != 1 || !s.IgnoreResourceDeletion {
		t.Errorf("Parse() server = %+v, want google_default with one call credential and ignore_resource_deletion", s)
	}
}

// TestParseWith_ChannelCredsErrors checks the errors of a caller's type and
// of a list without a supported type.
func TestParseWith_ChannelCredsErrors(t *testing.T) {
	tests := []struct {
		desc      string
		in        string
		opts      bool // use the fake registry
		wantField string
		wantErr   error
		wantMsg   string
	}{
		{
			desc:      "registered type with a bad config",
			in:        srv(`[{"type": "registered", "config": {"bad": true}}, {"type": "insecure"}]`),
			opts:      true,
			wantField: "xds_servers[0].channel_creds[0]",
			wantErr:   ErrInvalidValue,
			wantMsg:   `bootstrap: xds_servers[0].channel_creds[0]: invalid value: "registered" channel credentials: "bad" is not allowed`,
		},
		{
			desc: "registered type with a bad config in an authority",
			in: withServers(`"authorities": {"a": {"xds_servers": [{"server_uri": "s",
				"channel_creds": [{"type": "registered", "config": "x"}]}]}}`),
			opts:      true,
			wantField: `authorities["a"].xds_servers[0].channel_creds[0]`,
			wantErr:   ErrInvalidValue,
		},
		{
			desc:      "unknown types only, with a registry",
			in:        srv(`[{"type": "unknown_creds"}, {"type": "other"}]`),
			opts:      true,
			wantField: "xds_servers[0].channel_creds",
			wantErr:   ErrNoSupportedCreds,
			wantMsg:   `bootstrap: xds_servers[0].channel_creds: no supported type in ["unknown_creds", "other"] (supported: google_default, insecure, tls; or a registered type)`,
		},
		{
			desc:      "registered type without the registry",
			in:        srv(`[{"type": "registered"}]`),
			wantField: "xds_servers[0].channel_creds",
			wantErr:   ErrNoSupportedCreds,
			wantMsg:   `bootstrap: xds_servers[0].channel_creds: no supported type in ["registered"] (supported: google_default, insecure, tls)`,
		},
		{
			desc: "jwt_token_file over insecure is still refused",
			in: `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}],
				"call_creds": [{"type": "jwt_token_file", "config": {"jwt_token_file": "/t"}}]}]}`,
			wantField: "xds_servers[0].call_creds[0]",
			wantErr:   ErrInvalidValue,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var opts ParseOptions
			if tc.opts {
				opts = (&fakeRegistry{}).opts()
			}
			c, err := ParseWith([]byte(tc.in), opts)
			if err == nil {
				t.Fatalf("ParseWith() = %+v, want error", c)
			}
			var e *Error
			if !errors.As(err, &e) || e.Field != tc.wantField || !errors.Is(err, tc.wantErr) {
				t.Errorf("ParseWith() error = %v; want an *Error at %q wrapping %v", err, tc.wantField, tc.wantErr)
			}
			if tc.wantMsg != "" && err.Error() != tc.wantMsg {
				t.Errorf("ParseWith() error = %s\nwant %s", err, tc.wantMsg)
			}
		})
	}
}

// TestChannelCreds_KeyAndEqual: a caller's type is told apart by its config
// (in canonical form), built-in types by their parsed fields only.
func TestChannelCreds_KeyAndEqual(t *testing.T) {
	opts := (&fakeRegistry{}).opts()
	server := func(t *testing.T, creds string) (*Config, *ServerConfig) {
		t.Helper()
		c, err := ParseWith([]byte(srv(creds)), opts)
		if err != nil {
			t.Fatalf("ParseWith() failed: %v", err)
		}
		return c, c.XDSServers[0]
	}
	tests := []struct {
		desc      string
		a, b      string
		wantEqual bool
	}{
		{desc: "same registered config, other spelling",
			a: `[{"type": "registered", "config": {"x": 1, "y": "z"}}]`, b: `[{"config": { "y" : "z", "x": 1 }, "type": "registered"}]`,
			wantEqual: true},
		{desc: "registered configs differ",
			a: `[{"type": "registered", "config": {"x": 1}}]`, b: `[{"type": "registered", "config": {"x": 2}}]`},
		{desc: "registered config absent vs empty",
			a: `[{"type": "registered"}]`, b: `[{"type": "registered", "config": {}}]`},
		{desc: "registered vs insecure",
			a: `[{"type": "registered"}]`, b: `[{"type": "insecure"}]`},
		{desc: "google_default vs insecure",
			a: `[{"type": "google_default"}]`, b: `[{"type": "insecure"}]`},
		{desc: "google_default config is ignored",
			a: `[{"type": "google_default"}]`, b: `[{"type": "google_default", "config": {"x": 1}}]`, wantEqual: true},
		{desc: "same type selected after different unsupported entries",
			a: `[{"type": "unknown_creds"}, {"type": "registered", "config": {"x": 1}}]`, b: `[{"type": "registered", "config": {"x": 1}}]`,
			wantEqual: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ca, sa := server(t, tc.a)
			cb, sb := server(t, tc.b)
			if got := sa.Equal(sb); got != tc.wantEqual {
				t.Errorf("ServerConfig.Equal() = %v, want %v", got, tc.wantEqual)
			}
			if got := sa.Key() == sb.Key(); got != tc.wantEqual {
				t.Errorf("ServerConfig.Key() equal = %v, want %v (%s vs %s)", got, tc.wantEqual, sa.Key(), sb.Key())
			}
			if got := ca.Key() == cb.Key(); got != tc.wantEqual {
				t.Errorf("Config.Key() equal = %v, want %v", got, tc.wantEqual)
			}
		})
	}
}

// TestParseWith_CallCreds: a caller's call_creds types apply with the
// built-in jwt_token_file, in order; unsupported ones are ignored (gRFC
// A97); a refused config fails, naming the entry and the type.
func TestParseWith_CallCreds(t *testing.T) {
	var asked []string
	opts := ParseOptions{CallCreds: func(typ string, config json.RawMessage) (bool, error) {
		asked = append(asked, typ)
		if typ != "registered" {
			return false, nil
		}
		if strings.Contains(string(config), "bad") {
			return true, errors.New("bad config")
		}
		return true, nil
	}}
	in := `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "tls"}], "call_creds": [
		{"type": "registered", "config": {"a": 1}}, {"type": "other"},
		{"type": "jwt_token_file", "config": {"jwt_token_file": "/t.jwt"}}]}]}`
	c, err := ParseWith([]byte(in), opts)
	if err != nil {
		t.Fatalf("ParseWith() failed: %v", err)
	}
	got := c.XDSServers[0].CallCreds
	if len(got) != 2 || got[0].Type != "registered" || string(got[0].Config) != `{"a": 1}` || got[1].Type != CallCredsJWTTokenFile {
		t.Errorf("ParseWith() call creds = %+v, want the registered type then jwt_token_file", got)
	}
	if strings.Join(asked, ",") != "registered,other" {
		t.Errorf("CallCreds asked about %q, want [registered other] (never the built-in jwt_token_file)", asked)
	}
	if _, err := Parse([]byte(in)); err != nil {
		t.Errorf("Parse() without options failed: %v; want the unknown types ignored", err)
	}

	bad := `{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}], "call_creds": [
		{"type": "other"}, {"type": "registered", "config": {"bad": 1}}]}]}`
	_, err = ParseWith([]byte(bad), opts)
	var e *Error
	if !errors.As(err, &e) || e.Field != "xds_servers[0].call_creds[1]" || !errors.Is(err, ErrInvalidValue) ||
		!strings.Contains(err.Error(), `"registered" call credentials`) {
		t.Errorf("ParseWith() error = %v; want an *Error at xds_servers[0].call_creds[1] naming the type", err)
	}

	key := func(config string) (string, *ServerConfig) {
		c, err := ParseWith([]byte(`{"xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "insecure"}],
			"call_creds": [{"type": "registered", "config": `+config+`}]}]}`), opts)
		if err != nil {
			t.Fatalf("ParseWith() failed: %v", err)
		}
		return c.Key(), c.XDSServers[0]
	}
	k1, s1 := key(`{"x": 1, "y": 2}`)
	k2, s2 := key(`{"y": 2, "x": 1}`)
	k3, s3 := key(`{"x": 2}`)
	if k1 != k2 || !s1.Equal(s2) || s1.Key() != s2.Key() {
		t.Errorf("the same call credentials config spelled differently gives different keys or servers")
	}
	if k1 == k3 || s1.Equal(s3) || s1.Key() == s3.Key() {
		t.Errorf("different call credentials configs give the same key or server")
	}
}
