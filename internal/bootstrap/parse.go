package bootstrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/proxyless-grpc/xds/internal/version"
)

// Values this library puts in the Node it sends (gRFC A27: these are set by
// the client, never taken from the bootstrap).
const (
	// UserAgentName is the Node's user_agent_name.
	UserAgentName = "proxyless-grpc-go"
	// ClientFeatureNoOverprovisioning is a Node client feature: the client
	// does not apply the EDS overprovisioning factor.
	ClientFeatureNoOverprovisioning = "envoy.lb.does_not_support_overprovisioning"
	// ClientFeatureResourceInSotW is a Node client feature: the client
	// accepts resources wrapped in envoy.service.discovery.v3.Resource in
	// state-of-the-world responses.
	ClientFeatureResourceInSotW = "xds.config.resource-in-sotw"
)

// Server features understood in a server's "server_features". Others are
// accepted and ignored.
const (
	// ServerFeatureIgnoreResourceDeletion sets
	// ServerConfig.IgnoreResourceDeletion (gRFC A53).
	ServerFeatureIgnoreResourceDeletion = "ignore_resource_deletion"
	// ServerFeatureXDSv3 is accepted for compatibility; v3 is the only
	// transport version this library speaks (gRFC A30).
	ServerFeatureXDSv3 = "xds_v3"
	// ServerFeatureTrustedXDSServer sets ServerConfig.Trusted (gRFC A81,
	// A102).
	ServerFeatureTrustedXDSServer = "trusted_xds_server"
)

// DefaultClientListenerResourceNameTemplate is the value of
// Config.ClientDefaultListenerResourceNameTemplate when the bootstrap has none.
const DefaultClientListenerResourceNameTemplate = "%s"

// Parse parses and validates a bootstrap document (gRFC A27, A47, A65, A71,
// the call_creds of A97, and the certificate_providers of A29 with A87's
// SPIFFE bundle maps) into a Config.
//
// Unknown fields are ignored, at the top level and in every object. A field
// whose value is null is treated as absent. On failure the error is an *Error
// whose Field names the JSON path of the problem.
//
// Parse does no I/O: file names in the bootstrap are checked for presence,
// not read. The returned Config shares no memory with data.
//
// Parse supports the built-in channel credential types only (CredsInsecure,
// CredsTLS, CredsGoogleDefault); ParseWith adds a caller's.
func Parse(data []byte) (*Config, error) {
	return ParseWith(data, ParseOptions{})
}

// ParseOptions adds to Parse the credential types a caller can build beyond
// the built-in ones. The zero value adds none.
type ParseOptions struct {
	// ChannelCreds reports whether a channel_creds type other than the
	// built-in ones is supported; nil supports none. config is the entry's
	// "config", nil when absent or null. For a supported type it also checks
	// config: a non-nil err fails ParseWith with an *Error naming the entry
	// and the type. It is called only for entries that the first-supported
	// rule (gRFC A27) reaches, and never for a built-in type name: the
	// built-in types win over a caller's of the same name.
	ChannelCreds func(typ string, config json.RawMessage) (supported bool, err error)

	// ChannelCredsHelp says, in the error of a channel_creds list without
	// a supported type, which types ChannelCreds supports (for example
	// "types registered with RegisterChannelCredentials"). Empty when it
	// has nothing to add to the built-in types.
	ChannelCredsHelp string

	// CallCreds reports whether a call_creds type other than the built-in
	// CallCredsJWTTokenFile is supported; nil supports none. config is the
	// entry's "config", nil when absent or null. For a supported type it
	// also checks config: a non-nil err fails ParseWith with an *Error
	// naming the entry and the type. Unsupported types are ignored (gRFC
	// A97). It is never called for CallCredsJWTTokenFile: the built-in type
	// wins.
	CallCreds func(typ string, config json.RawMessage) (supported bool, err error)
}

// ParseWith is Parse with the credential types of opts supported too. It
// does what the functions of opts do (checking a config may build
// credentials), nothing more.
func ParseWith(data []byte, opts ParseOptions) (*Config, error) {
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, &Error{Err: fmt.Errorf("invalid JSON: %w", err)}
	}
	top, err := decodeObject("", raw)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	serversRaw, ok := top.get("xds_servers")
	if !ok {
		return nil, missing("xds_servers")
	}
	if c.XDSServers, err = parseServers(&opts, "xds_servers", serversRaw, true); err != nil {
		return nil, err
	}
	if c.Node, err = parseNode(top); err != nil {
		return nil, err
	}
	if c.Authorities, err = parseAuthorities(&opts, top); err != nil {
		return nil, err
	}
	if c.ServerListenerResourceNameTemplate, err = top.str("", "server_listener_resource_name_template"); err != nil {
		return nil, err
	}
	if c.ClientDefaultListenerResourceNameTemplate, err = top.str("", "client_default_listener_resource_name_template"); err != nil {
		return nil, err
	}
	if c.ClientDefaultListenerResourceNameTemplate == "" {
		c.ClientDefaultListenerResourceNameTemplate = DefaultClientListenerResourceNameTemplate
	}
	if c.CertProviders, err = parseCertProviders(top); err != nil {
		return nil, err
	}
	if c.AllowedGRPCServices, err = parseAllowedGRPCServices(&opts, top); err != nil {
		return nil, err
	}
	c.key = c.canonicalKey()
	return c, nil
}

// parseServers parses a list of servers at path: the top-level xds_servers
// (required, so an empty list is an error) or an authority's (where an empty
// list means "use the top-level servers" and nil is returned).
func parseServers(opts *ParseOptions, path string, raw json.RawMessage, required bool) ([]*ServerConfig, error) {
	list, err := decodeArray(path, raw)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		if required {
			return nil, fieldError(path, fmt.Errorf("%w: the list is empty", ErrMissingField))
		}
		return nil, nil
	}
	servers := make([]*ServerConfig, len(list))
	for i, raw := range list {
		if servers[i], err = parseServer(opts, index(path, i), raw); err != nil {
			return nil, err
		}
	}
	return servers, nil
}

// parseServer parses one entry of an xds_servers list.
func parseServer(opts *ParseOptions, path string, raw json.RawMessage) (*ServerConfig, error) {
	o, err := decodeObject(path, raw)
	if err != nil {
		return nil, err
	}
	s := &ServerConfig{}
	if s.ServerURI, err = o.str(path, "server_uri"); err != nil {
		return nil, err
	}
	if s.ServerURI == "" {
		return nil, missing(join(path, "server_uri"))
	}
	if s.ChannelCreds, err = parseChannelCreds(opts, join(path, "channel_creds"), o); err != nil {
		return nil, err
	}
	if s.CallCreds, err = parseCallCreds(opts, join(path, "call_creds"), o, s.ChannelCreds); err != nil {
		return nil, err
	}
	featuresRaw, ok := o.get("server_features")
	if !ok {
		return s, nil
	}
	featuresPath := join(path, "server_features")
	list, err := decodeArray(featuresPath, featuresRaw)
	if err != nil {
		return nil, err
	}
	if len(list) > 0 {
		s.ServerFeatures = make([]string, len(list))
	}
	for i, raw := range list {
		if s.ServerFeatures[i], err = decodeString(index(featuresPath, i), raw); err != nil {
			return nil, err
		}
		switch s.ServerFeatures[i] {
		case ServerFeatureIgnoreResourceDeletion:
			s.IgnoreResourceDeletion = true
		case ServerFeatureTrustedXDSServer:
			s.Trusted = true
		}
	}
	return s, nil
}

// parseNode parses the optional "node": id, cluster, metadata and locality,
// under their proto or JSON names as protojson reads them; other members
// are ignored, and the fields gRFC A27 reserves to the client are set here.
// It reads JSON without protojson, which would build the descriptors of the
// whole base.proto file on the way, a first server's heap for nothing.
func parseNode(top object) (*corepb.Node, error) {
	n := &corepb.Node{}
	if raw, ok := top.get("node"); ok {
		const path = "node"
		o, err := decodeObject(path, raw)
		if err != nil {
			return nil, err
		}
		if n.Id, err = o.str(path, "id"); err != nil {
			return nil, err
		}
		if n.Cluster, err = o.str(path, "cluster"); err != nil {
			return nil, err
		}
		if raw, ok := o.get("metadata"); ok {
			if n.Metadata, err = jsonStruct(join(path, "metadata"), raw); err != nil {
				return nil, err
			}
		}
		loc, err := o.obj(path, "locality")
		if err != nil {
			return nil, err
		}
		if loc != nil {
			lpath := join(path, "locality")
			n.Locality = &corepb.Locality{}
			if n.Locality.Region, err = loc.str(lpath, "region"); err != nil {
				return nil, err
			}
			if n.Locality.Zone, err = loc.str(lpath, "zone"); err != nil {
				return nil, err
			}
			name := "sub_zone"
			if _, ok := loc["subZone"]; ok {
				name = "subZone"
			}
			if n.Locality.SubZone, err = loc.str(lpath, name); err != nil {
				return nil, err
			}
		}
	}
	n.UserAgentName = UserAgentName
	n.UserAgentVersionType = &corepb.Node_UserAgentVersion{UserAgentVersion: version.Version()}
	n.ClientFeatures = []string{ClientFeatureNoOverprovisioning, ClientFeatureResourceInSotW}
	return n, nil
}

// jsonStruct decodes raw, a JSON object, as a google.protobuf.Struct.
func jsonStruct(path string, raw json.RawMessage) (*structpb.Struct, error) {
	if jsonKind(raw) != kindObject {
		return nil, wrongType(path, kindObject, raw)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fieldError(path, err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fieldError(path, err)
	}
	return s, nil
}

// parseAuthorities parses the optional "authorities" map (gRFC A47). An empty
// map is returned as nil, like an absent one.
func parseAuthorities(opts *ParseOptions, top object) (map[string]*Authority, error) {
	const path = "authorities"
	m, err := top.obj("", path)
	if err != nil || len(m) == 0 {
		return nil, err
	}
	out := make(map[string]*Authority, len(m))
	for _, name := range m.sortedKeys() {
		if out[name], err = parseAuthority(opts, mapKey(path, name), name, m[name]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseAuthority parses the entry of the authority name at path.
func parseAuthority(opts *ParseOptions, path, name string, raw json.RawMessage) (*Authority, error) {
	o, err := decodeObject(path, raw)
	if err != nil {
		return nil, err
	}
	a := &Authority{}
	const tmplField = "client_listener_resource_name_template"
	if a.ClientListenerResourceNameTemplate, err = o.str(path, tmplField); err != nil {
		return nil, err
	}
	escaped := percentEncode(name, authorityChars)
	switch tmpl := a.ClientListenerResourceNameTemplate; {
	case tmpl == "":
		a.ClientListenerResourceNameTemplate = "xdstp://" + escaped + "/envoy.config.listener.v3.Listener/%s"
	case !strings.HasPrefix(tmpl, "xdstp://"+name+"/") && !strings.HasPrefix(tmpl, "xdstp://"+escaped+"/"):
		return nil, fieldError(join(path, tmplField),
			fmt.Errorf("%w %q: must start with %q", ErrInvalidValue, tmpl, "xdstp://"+escaped+"/"))
	}
	if raw, ok := o.get("xds_servers"); ok {
		if a.XDSServers, err = parseServers(opts, join(path, "xds_servers"), raw, false); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// parseAllowedGRPCServices parses the optional "allowed_grpc_services"
// (gRFC A102): a map from target URI to the credentials of the side
// channel to it, each in the format of an xds_servers entry without
// server_uri: channel_creds (required, at least one supported type) and
// call_creds (optional).
func parseAllowedGRPCServices(opts *ParseOptions, top object) (map[string]*ServerConfig, error) {
	const path = "allowed_grpc_services"
	raw, ok := top.get(path)
	if !ok || jsonKind(raw) == kindNull {
		return nil, nil
	}
	m, err := decodeObject(path, raw)
	if err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]*ServerConfig, len(m))
	for target, raw := range m {
		entryPath := mapKey(path, target)
		if target == "" {
			return nil, fieldError(entryPath, errors.New("empty target URI"))
		}
		o, err := decodeObject(entryPath, raw)
		if err != nil {
			return nil, err
		}
		s := &ServerConfig{ServerURI: target}
		if s.ChannelCreds, err = parseChannelCreds(opts, join(entryPath, "channel_creds"), o); err != nil {
			return nil, err
		}
		if s.CallCreds, err = parseCallCreds(opts, join(entryPath, "call_creds"), o, s.ChannelCreds); err != nil {
			return nil, err
		}
		out[target] = s
	}
	return out, nil
}
