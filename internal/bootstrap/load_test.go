package bootstrap

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// doc returns a valid bootstrap whose only server is uri.
func doc(uri string) string {
	return `{"xds_servers": [{"server_uri": "` + uri + `", "channel_creds": [{"type": "insecure"}]}]}`
}

// writeFile writes contents to a new file in a temporary directory.
func writeFile(t *testing.T, contents string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoad_Precedence checks the order of every gRPC implementation: the
// option, else the file named by GRPC_XDS_BOOTSTRAP, else
// GRPC_XDS_BOOTSTRAP_CONFIG; and that Source names the one used.
func TestLoad_Precedence(t *testing.T) {
	file := writeFile(t, doc("from-file"))
	fileSource := `file "` + file + `" (GRPC_XDS_BOOTSTRAP)`
	tests := []struct {
		desc       string
		contents   []byte
		configEnv  string
		fileEnv    string
		wantServer string
		wantSource string
	}{
		{desc: "option over both env vars", contents: []byte(doc("from-option")), configEnv: doc("from-env"), fileEnv: file,
			wantServer: "from-option", wantSource: SourceOption},
		{desc: "file env over config env", configEnv: doc("from-env"), fileEnv: file, wantServer: "from-file",
			wantSource: fileSource},
		{desc: "file env alone", fileEnv: file, wantServer: "from-file", wantSource: fileSource},
		{desc: "config env alone", configEnv: doc("from-env"), wantServer: "from-env", wantSource: EnvBootstrapConfig},
		{desc: "option alone", contents: []byte(doc("from-option")), wantServer: "from-option", wantSource: SourceOption},
		{desc: "option with a bad file env", contents: []byte(doc("from-option")), fileEnv: "/does/not/exist",
			wantServer: "from-option", wantSource: SourceOption},
		{desc: "file env with a bad config env", configEnv: `{"xds_servers": 1}`, fileEnv: file,
			wantServer: "from-file", wantSource: fileSource},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Setenv(EnvBootstrapConfig, tc.configEnv)
			t.Setenv(EnvBootstrapFile, tc.fileEnv)
			c, err := Load(tc.contents)
			if err != nil {
				t.Fatalf("Load() failed: %v", err)
			}
			if got := c.XDSServers[0].ServerURI; got != tc.wantServer {
				t.Errorf("Load() server = %q, want %q", got, tc.wantServer)
			}
			if got := c.Source(); got != tc.wantSource {
				t.Errorf("Load().Source() = %q, want %q", got, tc.wantSource)
			}
		})
	}
}

// TestLoad_SourceNotInKey: the same bootstrap from two sources shares one
// xDS client, so Source must not change Key; Parse knows no source.
func TestLoad_SourceNotInKey(t *testing.T) {
	t.Setenv(EnvBootstrapFile, "")
	t.Setenv(EnvBootstrapConfig, doc("s"))
	fromEnv, err := Load(nil)
	if err != nil {
		t.Fatalf("Load() failed: %v", err)
	}
	fromOption, err := Load([]byte(doc("s")))
	if err != nil {
		t.Fatalf("Load() failed: %v", err)
	}
	if fromEnv.Source() == fromOption.Source() {
		t.Errorf("Source() = %q for both the env var and the option, want them to differ", fromEnv.Source())
	}
	if fromEnv.Key() != fromOption.Key() {
		t.Errorf("Key() differs between sources: %q vs %q", fromEnv.Key(), fromOption.Key())
	}
	parsed, err := Parse([]byte(doc("s")))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	if got := parsed.Source(); got != "" {
		t.Errorf("Parse().Source() = %q, want empty", got)
	}
}

func TestLoad_Errors(t *testing.T) {
	badFile := writeFile(t, `{"xds_servers": []}`)
	missingFile := filepath.Join(t.TempDir(), "missing.json")
	tests := []struct {
		desc       string
		contents   []byte
		configEnv  string
		fileEnv    string
		wantSource string
		wantField  string
		wantErr    error
	}{
		{desc: "nothing set", wantErr: ErrNoBootstrap},
		{desc: "empty option is parsed, not skipped", contents: []byte{}, configEnv: doc("from-env"),
			wantSource: SourceOption},
		{desc: "invalid option", contents: []byte(`{}`), wantSource: SourceOption, wantField: "xds_servers",
			wantErr: ErrMissingField},
		{desc: "invalid config env", configEnv: `{"xds_servers": [1]}`, wantSource: EnvBootstrapConfig,
			wantField: "xds_servers[0]", wantErr: ErrWrongType},
		{desc: "invalid file", fileEnv: badFile, wantSource: `file "` + badFile + `" (GRPC_XDS_BOOTSTRAP)`,
			wantField: "xds_servers", wantErr: ErrMissingField},
		{desc: "missing file", fileEnv: missingFile, wantSource: `file "` + missingFile + `" (GRPC_XDS_BOOTSTRAP)`,
			wantErr: fs.ErrNotExist},
		{desc: "missing file is not skipped for the config env", fileEnv: missingFile, configEnv: doc("from-env"),
			wantSource: `file "` + missingFile + `" (GRPC_XDS_BOOTSTRAP)`, wantErr: fs.ErrNotExist},
		{desc: "invalid file is not skipped for the config env", fileEnv: badFile, configEnv: doc("from-env"),
			wantSource: `file "` + badFile + `" (GRPC_XDS_BOOTSTRAP)`, wantField: "xds_servers", wantErr: ErrMissingField},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Setenv(EnvBootstrapConfig, tc.configEnv)
			t.Setenv(EnvBootstrapFile, tc.fileEnv)
			c, err := Load(tc.contents)
			if err == nil {
				t.Fatalf("Load() = %+v, want error", c)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Load() error %v (%T) is not an *Error", err, err)
			}
			if e.Source != tc.wantSource || e.Field != tc.wantField {
				t.Errorf("Load() error Source, Field = %q, %q; want %q, %q", e.Source, e.Field, tc.wantSource, tc.wantField)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Load() error %v does not wrap %v", err, tc.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "bootstrap: "+tc.wantSource) {
				t.Errorf("Load() error %q does not start with %q", err, "bootstrap: "+tc.wantSource)
			}
		})
	}
}

// TestLoad_ReadsEnvEachCall checks that the environment is not cached.
func TestLoad_ReadsEnvEachCall(t *testing.T) {
	t.Setenv(EnvBootstrapFile, "")
	for _, uri := range []string{"first", "second"} {
		t.Setenv(EnvBootstrapConfig, doc(uri))
		c, err := Load(nil)
		if err != nil {
			t.Fatalf("Load() failed: %v", err)
		}
		if got := c.XDSServers[0].ServerURI; got != uri {
			t.Errorf("Load() server = %q, want %q", got, uri)
		}
	}
	t.Setenv(EnvBootstrapConfig, "")
	if _, err := Load(nil); !errors.Is(err, ErrNoBootstrap) {
		t.Errorf("Load() with the env cleared = %v, want ErrNoBootstrap", err)
	}
}

func TestLoad_NoBootstrapMessage(t *testing.T) {
	t.Setenv(EnvBootstrapConfig, "")
	t.Setenv(EnvBootstrapFile, "")
	_, err := Load(nil)
	const want = "bootstrap: no xDS bootstrap: set GRPC_XDS_BOOTSTRAP or GRPC_XDS_BOOTSTRAP_CONFIG, or pass bootstrap contents"
	if err == nil || err.Error() != want {
		t.Errorf("Load() error = %v, want %s", err, want)
	}
}
