package bootstrap

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// DefaultRefreshInterval is how often certificate files are re-read when the
// bootstrap gives no refresh_interval (gRFC A65 "600s"; the same default is
// used for the file_watcher certificate provider).
const DefaultRefreshInterval = 10 * time.Minute

// PluginFileWatcher is the plugin_name of the file_watcher certificate
// provider (gRFC A29), which this library runs itself (see CertProviderConfig).
const PluginFileWatcher = "file_watcher"

// parseChannelCreds selects the first supported entry of the channel_creds
// list at path (gRFC A27: the client stops at the first type it supports):
// a built-in type, else one that opts.ChannelCreds supports, whose config it
// checks. Entries after the selected one are not examined.
func parseChannelCreds(opts *ParseOptions, path string, server object) (ChannelCreds, error) {
	raw, ok := server.get("channel_creds")
	if !ok {
		return ChannelCreds{}, missing(path)
	}
	list, err := decodeArray(path, raw)
	if err != nil {
		return ChannelCreds{}, err
	}
	if len(list) == 0 {
		return ChannelCreds{}, fieldError(path, fmt.Errorf("%w: the list is empty", ErrMissingField))
	}
	var seen []string
	for i, raw := range list {
		entryPath := index(path, i)
		entry, err := decodeObject(entryPath, raw)
		if err != nil {
			return ChannelCreds{}, err
		}
		typ, err := entry.str(entryPath, "type")
		if err != nil {
			return ChannelCreds{}, err
		}
		if typ == "" {
			return ChannelCreds{}, missing(join(entryPath, "type"))
		}
		if isBuiltinCreds(typ) {
			return buildChannelCreds(entryPath, typ, entry)
		}
		if opts.ChannelCreds != nil {
			if c, ok, err := callerChannelCreds(opts, entryPath, typ, entry); ok || err != nil {
				return c, err
			}
		}
		seen = append(seen, typ)
	}
	supported := strings.Join(builtinCreds[:], ", ")
	if opts.ChannelCredsHelp != "" {
		supported += "; " + opts.ChannelCredsHelp
	}
	return ChannelCreds{}, fieldError(path, fmt.Errorf("%w in %s (supported: %s)",
		ErrNoSupportedCreds, quoteList(seen), supported))
}

// builtinCreds are the channel credential types Parse supports by itself,
// sorted.
var builtinCreds = [...]string{CredsGoogleDefault, CredsInsecure, CredsTLS}

// isBuiltinCreds reports whether typ is one of builtinCreds.
func isBuiltinCreds(typ string) bool {
	return typ == CredsInsecure || typ == CredsTLS || typ == CredsGoogleDefault
}

// callerChannelCreds asks opts.ChannelCreds about the entry of type typ at
// path. ok is false when the type is not supported.
func callerChannelCreds(opts *ParseOptions, path, typ string, entry object) (c ChannelCreds, ok bool, err error) {
	cfg, _ := entry.get("config")
	supported, err := opts.ChannelCreds(typ, cfg)
	switch {
	case !supported:
		return ChannelCreds{}, false, nil
	case err != nil:
		return ChannelCreds{}, true, fieldError(path, fmt.Errorf("%w: %q channel credentials: %w", ErrInvalidValue, typ, err))
	}
	return ChannelCreds{Type: typ, Config: cfg}, true, nil
}

// buildChannelCreds builds the selected channel_creds entry at path.
func buildChannelCreds(path, typ string, entry object) (ChannelCreds, error) {
	cfg, err := entry.obj(path, "config")
	if err != nil {
		return ChannelCreds{}, err
	}
	c := ChannelCreds{Type: typ}
	if raw, ok := entry.get("config"); ok {
		c.Config = raw
	}
	if typ != CredsTLS {
		return c, nil
	}
	cfgPath := join(path, "config")
	files, err := parseCertFiles(cfgPath, cfg)
	if err != nil {
		return ChannelCreds{}, err
	}
	if _, ok := cfg.get(fieldSPIFFEMap); ok {
		// Verifying the management server with the CA file (or the system
		// roots) when the bootstrap asks for SPIFFE verification would
		// trust servers the map would refuse: refuse it instead.
		return ChannelCreds{}, fieldError(join(cfgPath, fieldSPIFFEMap),
			fmt.Errorf("%w: not supported in channel_creds (only in a file_watcher of certificate_providers)", ErrInvalidValue))
	}
	c.TLS = &TLSCreds{
		CACertificateFile: files.CACertificateFile,
		CertificateFile:   files.CertificateFile,
		PrivateKeyFile:    files.PrivateKeyFile,
		RefreshInterval:   files.RefreshInterval,
	}
	return c, nil
}

// fieldSPIFFEMap is the file_watcher field of gRFC A87.
const fieldSPIFFEMap = "spiffe_trust_bundle_map_file"

// parseCallCreds parses the optional call_creds list of the server at path
// (gRFC A97): every entry is checked for shape, and the supported ones (the
// built-in jwt_token_file, and those opts.CallCreds supports, whose config
// it checks) are returned in order; unsupported types are skipped. creds is
// the server's selected channel credentials: a jwt_token_file token is never
// sent over insecure ones (over others, and for a caller's type, gRPC checks
// the connection's security level on every stream).
func parseCallCreds(opts *ParseOptions, path string, server object, creds ChannelCreds) ([]CallCreds, error) {
	raw, ok := server.get("call_creds")
	if !ok {
		return nil, nil
	}
	list, err := decodeArray(path, raw)
	if err != nil {
		return nil, err
	}
	var out []CallCreds
	for i, raw := range list {
		entryPath := index(path, i)
		entry, err := decodeObject(entryPath, raw)
		if err != nil {
			return nil, err
		}
		typ, err := entry.str(entryPath, "type")
		if err != nil {
			return nil, err
		}
		switch typ {
		case "":
			return nil, missing(join(entryPath, "type"))
		case CallCredsJWTTokenFile:
		default:
			c, ok, err := callerCallCreds(opts, entryPath, typ, entry)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, c)
			}
			continue // gRFC A97: unsupported call credentials are ignored
		}
		c, err := parseJWTTokenFile(entryPath, entry)
		if err != nil {
			return nil, err
		}
		if creds.Type == CredsInsecure {
			return nil, fieldError(entryPath, fmt.Errorf("%w: %s call credentials need secure channel_creds, not %q: the token would be sent in the clear",
				ErrInvalidValue, typ, creds.Type))
		}
		out = append(out, c)
	}
	return out, nil
}

// callerCallCreds asks opts.CallCreds about the call_creds entry of type
// typ at path. ok is false when the type is not supported.
func callerCallCreds(opts *ParseOptions, path, typ string, entry object) (c CallCreds, ok bool, err error) {
	if opts.CallCreds == nil {
		return CallCreds{}, false, nil
	}
	cfg, _ := entry.get("config")
	supported, err := opts.CallCreds(typ, cfg)
	switch {
	case !supported:
		return CallCreds{}, false, nil
	case err != nil:
		return CallCreds{}, true, fieldError(path, fmt.Errorf("%w: %q call credentials: %w", ErrInvalidValue, typ, err))
	}
	return CallCreds{Type: typ, Config: cfg}, true, nil
}

// parseJWTTokenFile parses the jwt_token_file call credentials entry at path.
func parseJWTTokenFile(path string, entry object) (CallCreds, error) {
	cfgPath := join(path, "config")
	cfg, err := entry.obj(path, "config")
	if err != nil {
		return CallCreds{}, err
	}
	c := CallCreds{Type: CallCredsJWTTokenFile}
	if raw, ok := entry.get("config"); ok {
		c.Config = raw
	}
	if c.JWTTokenFile, err = cfg.str(cfgPath, "jwt_token_file"); err != nil {
		return CallCreds{}, err
	}
	if c.JWTTokenFile == "" {
		return CallCreds{}, missing(join(cfgPath, "jwt_token_file"))
	}
	return c, nil
}

// parseCertProviders parses the optional "certificate_providers" map (gRFC
// A29). An empty map is returned as nil, like an absent one.
func parseCertProviders(top object) (map[string]*CertProviderConfig, error) {
	const path = "certificate_providers"
	m, err := top.obj("", path)
	if err != nil || len(m) == 0 {
		return nil, err
	}
	out := make(map[string]*CertProviderConfig, len(m))
	for _, name := range m.sortedKeys() {
		if out[name], err = parseCertProvider(mapKey(path, name), m[name]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseCertProvider parses one certificate provider instance at path: the
// file_watcher plugin's config by this package, the config of a plugin
// registered with grpc-go by that plugin (parsePluginConfig); the config of
// any other plugin is kept as given.
func parseCertProvider(path string, raw []byte) (*CertProviderConfig, error) {
	o, err := decodeObject(path, raw)
	if err != nil {
		return nil, err
	}
	p := &CertProviderConfig{}
	if p.PluginName, err = o.str(path, "plugin_name"); err != nil {
		return nil, err
	}
	if p.PluginName == "" {
		return nil, missing(join(path, "plugin_name"))
	}
	cfg, err := o.obj(path, "config")
	if err != nil {
		return nil, err
	}
	if raw, ok := o.get("config"); ok {
		p.Config = raw
	}
	if p.PluginName != PluginFileWatcher {
		return p, parsePluginConfig(join(path, "config"), p)
	}
	cfgPath := join(path, "config")
	files, err := parseCertFiles(cfgPath, cfg)
	if err != nil {
		return nil, err
	}
	if files.SPIFFETrustBundleMapFile, err = cfg.str(cfgPath, fieldSPIFFEMap); err != nil {
		return nil, err
	}
	if files.CertificateFile == "" && files.CACertificateFile == "" && files.SPIFFETrustBundleMapFile == "" {
		return nil, fieldError(cfgPath, fmt.Errorf("%w: want certificate_file and private_key_file, or ca_certificate_file or %s, or both",
			ErrMissingField, fieldSPIFFEMap))
	}
	p.FileWatcher = &files
	return p, nil
}

// parseCertFiles parses the fields shared by "tls" channel credentials (gRFC
// A65) and the file_watcher plugin (gRFC A29) from the config object at path,
// which may be nil. certificate_file and private_key_file must be set
// together.
func parseCertFiles(path string, cfg object) (FileWatcherConfig, error) {
	var f FileWatcherConfig
	var err error
	if f.CertificateFile, err = cfg.str(path, "certificate_file"); err != nil {
		return f, err
	}
	if f.PrivateKeyFile, err = cfg.str(path, "private_key_file"); err != nil {
		return f, err
	}
	if f.CACertificateFile, err = cfg.str(path, "ca_certificate_file"); err != nil {
		return f, err
	}
	switch {
	case f.CertificateFile != "" && f.PrivateKeyFile == "":
		return f, fieldError(join(path, "private_key_file"), fmt.Errorf("%w: required with certificate_file", ErrMissingField))
	case f.CertificateFile == "" && f.PrivateKeyFile != "":
		return f, fieldError(join(path, "certificate_file"), fmt.Errorf("%w: required with private_key_file", ErrMissingField))
	}
	f.RefreshInterval = DefaultRefreshInterval
	s, err := cfg.str(path, "refresh_interval")
	if err != nil || s == "" {
		return f, err
	}
	d, err := parseDuration(s)
	if err == nil && d <= 0 {
		err = errors.New("must be positive")
	}
	if err != nil {
		return f, fieldError(join(path, "refresh_interval"), fmt.Errorf("%w %q: %w", ErrInvalidValue, s, err))
	}
	f.RefreshInterval = d
	return f, nil
}

// maxDurationSeconds is the largest number of seconds in a
// google.protobuf.Duration (10,000 years).
const maxDurationSeconds = 315_576_000_000

// parseDuration parses the JSON form of a google.protobuf.Duration: an
// optional '-', whole seconds, optionally '.' and one to nine digits of
// fraction, then 's'; for example "600s", "1.5s" or "-0.000000001s".
func parseDuration(s string) (time.Duration, error) {
	body, ok := strings.CutSuffix(s, "s")
	neg := strings.HasPrefix(body, "-")
	body = strings.TrimPrefix(body, "-")
	whole, frac, hasFrac := strings.Cut(body, ".")
	if !ok || !isDigits(whole) || hasFrac && (!isDigits(frac) || len(frac) > 9) {
		return 0, errors.New(`want a duration in seconds such as "600s" or "1.5s"`)
	}
	if len(whole) > 12 {
		return 0, errors.New("out of range")
	}
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || secs > maxDurationSeconds {
		return 0, errors.New("out of range")
	}
	var nanos int64
	if hasFrac {
		nanos, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	if secs > (math.MaxInt64-nanos)/int64(time.Second) {
		return 0, fmt.Errorf("too long: at most %v", time.Duration(math.MaxInt64))
	}
	d := time.Duration(secs)*time.Second + time.Duration(nanos)
	if neg {
		d = -d
	}
	return d, nil
}

// isDigits reports whether s is a non-empty string of ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
