package bootstrap

import (
	"errors"
	"testing"
)

// FuzzParse checks that Parse never panics, that every failure is an *Error,
// and that every success satisfies the Config invariants.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		keyBase,
		withServers(""),
		srv(`[{"type": "unknown_creds"}, {"type": "tls", "config": {"refresh_interval": "1.5s"}}]`),
		watcher(`{"certificate_file": "c", "private_key_file": "k"}`),
		authority(`{"client_listener_resource_name_template": "xdstp://a/%s"}`),
		withServers(`"node": {"id": "x", "metadata": {"k": [1, null, {"a": "b"}]}}`),
		`{"xds_servers": [{}]}`,
		`[]`,
		`{`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse() error %v (%T) is not an *Error", err, err)
			}
			if c != nil {
				t.Fatalf("Parse() returned a Config with the error %v", err)
			}
			return
		}
		if len(c.XDSServers) == 0 {
			t.Fatalf("Parse() succeeded with no XDSServers")
		}
		for _, s := range c.XDSServers {
			if s.ServerURI == "" || !isBuiltinCreds(s.ChannelCreds.Type) {
				t.Fatalf("Parse() succeeded with an invalid server %+v", s)
			}
		}
		if c.Node == nil {
			t.Fatalf("Parse() succeeded with a nil Node")
		}
		if c.Key() == "" {
			t.Fatalf("Parse() succeeded with an empty Key")
		}
		again, err := Parse(data)
		if err != nil || again.Key() != c.Key() {
			t.Fatalf("second Parse() = %v, key equal %v; want the same Config", err, err == nil && again.Key() == c.Key())
		}
	})
}
