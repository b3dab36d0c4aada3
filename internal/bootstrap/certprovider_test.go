package bootstrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials/tls/certprovider"
)

// testPlugin is a real certificate provider plugin, registered with
// grpc-go's registry under testPluginName, whose config must be an object
// with a non-empty "name". Its providers are never built here.
type testPlugin struct{}

const testPluginName = "bootstrap-test-plugin"

func init() { certprovider.Register(testPlugin{}) }

func (testPlugin) Name() string { return testPluginName }

func (testPlugin) ParseConfig(c any) (*certprovider.BuildableConfig, error) {
	raw, ok := c.(json.RawMessage)
	if !ok {
		return nil, fmt.Errorf("config of type %T, want json.RawMessage", c)
	}
	var cfg struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		return nil, errors.New(`"name" is required`)
	}
	return certprovider.NewBuildableConfig(testPluginName, []byte(cfg.Name), func(certprovider.BuildOptions) certprovider.Provider { return nil }), nil
}

// TestParse_RegisteredPlugin: the config of a registered plugin is parsed
// by the plugin and kept for Buildable.
func TestParse_RegisteredPlugin(t *testing.T) {
	c, err := Parse([]byte(withServers(`"certificate_providers": {"p": {"plugin_name": "` + testPluginName + `", "config": {"name": "n1"}}}`)))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	p := c.CertProviders["p"]
	if p.FileWatcher != nil {
		t.Errorf("FileWatcher = %+v, want nil for a plugin of grpc-go's registry", p.FileWatcher)
	}
	bc := p.Buildable()
	if bc == nil {
		t.Fatal("Buildable() = nil, want the config the plugin parsed")
	}
	if got, want := bc.String(), testPluginName+":n1"; got != want {
		t.Errorf("Buildable().String() = %q, want %q", got, want)
	}
}

// TestParse_RegisteredPluginBadConfig: a config the registered plugin
// refuses fails Parse, naming the field.
func TestParse_RegisteredPluginBadConfig(t *testing.T) {
	tests := []struct {
		desc   string
		config string
	}{
		{desc: "plugin refuses the config", config: `, "config": {"name": ""}`},
		{desc: "wrong type inside the config", config: `, "config": {"name": 1}`},
		{desc: "no config", config: ``},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := Parse([]byte(withServers(`"certificate_providers": {"p": {"plugin_name": "` + testPluginName + `"` + tc.config + `}}`)))
			if !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("Parse() = %v, want an error wrapping ErrInvalidValue", err)
			}
			var be *Error
			if !errors.As(err, &be) {
				t.Fatalf("Parse() = %v (%T), want a *bootstrap.Error", err, err)
			}
			if got, want := be.Field, `certificate_providers["p"].config`; got != want {
				t.Errorf("Error.Field = %q, want %q", got, want)
			}
		})
	}
}

// TestParse_UnregisteredPlugin: an instance of a plugin nobody registered
// is kept as written, without a parsed config.
func TestParse_UnregisteredPlugin(t *testing.T) {
	c, err := Parse([]byte(withServers(`"certificate_providers": {"p": {"plugin_name": "bootstrap-test-nobody", "config": {"x": 1}}}`)))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	p := c.CertProviders["p"]
	if p.Buildable() != nil || p.FileWatcher != nil {
		t.Errorf("Buildable() = %v, FileWatcher = %v, want both nil", p.Buildable(), p.FileWatcher)
	}
	if got, want := string(p.Config), `{"x": 1}`; got != want {
		t.Errorf("Config = %s, want %s", got, want)
	}
}

// TestParse_FileWatcherNotFromRegistry: file_watcher is this library's own,
// never the plugin registered under that name (grpc-go's pemfile package
// registers one when it is linked in).
func TestParse_FileWatcherNotFromRegistry(t *testing.T) {
	c, err := Parse([]byte(withServers(`"certificate_providers": {"p": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": "ca"}}}`)))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	if p := c.CertProviders["p"]; p.Buildable() != nil || p.FileWatcher == nil {
		t.Errorf("Buildable() = %v, FileWatcher = %v, want nil and this package's config", p.Buildable(), p.FileWatcher)
	}
}

// TestNotRegisteredCanary fails when grpc-go changes the error of
// certprovider.ParseConfig for a plugin nobody registered, which
// notRegistered reads: bootstraps naming such plugins would then fail to
// parse.
func TestNotRegisteredCanary(t *testing.T) {
	const name = "bootstrap-test-canary"
	_, err := certprovider.ParseConfig(name, json.RawMessage(`{}`))
	if err == nil || !notRegistered(name, err) {
		t.Fatalf("certprovider.ParseConfig(%q) = %v; notRegistered does not recognise it: update notRegistered for this grpc-go version", name, err)
	}
	if notRegistered(name, errors.New(strings.ToUpper(err.Error()))) {
		t.Error("notRegistered accepts another message")
	}
}

// TestKey_RegisteredPlugin: a config a registered plugin parsed does not
// share its key with the same text parsed when nobody had registered it.
func TestKey_RegisteredPlugin(t *testing.T) {
	in := withServers(`"certificate_providers": {"p": {"plugin_name": "` + testPluginName + `", "config": {"name": "n1"}}}`)
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	unparsed := *c
	unparsed.key = ""
	unparsed.CertProviders = map[string]*CertProviderConfig{"p": {PluginName: testPluginName, Config: c.CertProviders["p"].Config}}
	if c.Key() == unparsed.Key() {
		t.Errorf("Key() is the same with and without the plugin's parsed config: %s", c.Key())
	}
	if c2, err := Parse([]byte(in)); err != nil || c2.Key() != c.Key() {
		t.Errorf("Key() of the same bootstrap parsed again differs (err %v)", err)
	}
}
