// Package grpcservice is the side channel of gRFC A102: the validation of
// an xDS GrpcService (ext_authz's authorization server, the global rate
// limit's rate limit service), the trust model that decides whose
// credentials reach it, the channels themselves, one per target and
// credentials in the process, shared by every filter chain that names them
// and closed with their last user (gRFC A83), and what a side call may not
// carry: a request the RPC made too large or unencodable is the client's
// doing, never a service that did not answer (ErrUnsendable).
//
// Trust: a GrpcService from a management server with the
// "trusted_xds_server" server feature is used as sent, credentials
// included (channel_credentials_plugin, call_credentials_plugin). From any
// other server its target must be a key of the bootstrap's
// allowed_grpc_services, and the credentials are that entry's; the
// resource's are ignored. Anything else fails validation, so the resource
// is NACKed: a compromised control plane cannot send RPC metadata, or a
// token, to a server of its choosing.
package grpcservice

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
)

// Env is where a resource holding a GrpcService came from: the bootstrap's
// allowed_grpc_services and whether the management server that sent it is
// trusted. The resource decoders give it to the filter parser
// (httpfilter.Parser.WithEnv). A nil *Env (a Listener checked offline, with
// no bootstrap) checks everything but the trust: such a config validates,
// but has no credentials to dial with.
type Env struct {
	Allowed map[string]*bootstrap.ServerConfig
	Trusted bool
	// Server names the management server, for errors.
	Server string
	// LocalCluster is the bootstrap node's cluster: Envoy's local service
	// cluster, which the global rate limit's source_cluster action reads.
	LocalCluster string
}

// EnvOf returns the Env of resources from server under cfg; nil when cfg
// is nil (a decoder tested alone).
func EnvOf(cfg *bootstrap.Config, server *bootstrap.ServerConfig) *Env {
	if cfg == nil {
		return nil
	}
	e := &Env{Allowed: cfg.AllowedGRPCServices, LocalCluster: cfg.Node.GetCluster()}
	if server != nil {
		e.Trusted, e.Server = server.Trusted, server.ServerURI
	}
	return e
}

// Key identifies e to caches of parsed configs (httpfilter.Parser.WithEnv):
// its trust. Every Env of one bootstrap with the same Key parses a
// GrpcService to the same Service (only errors name the server), and Envs
// with different Keys do not: a config that a trusted server sent and an
// untrusted one sends again must be parsed again. "" for a nil Env.
func (e *Env) Key() string {
	switch {
	case e == nil:
		return ""
	case e.Trusted:
		return "trusted"
	default:
		return "untrusted"
	}
}

// Limits of gRFC A102 on initial_metadata (and of its header mutations).
const maxHeaderBytes = 16384

// Service is a validated GrpcService. Immutable.
type Service struct {
	// Target is google_grpc.target_uri.
	Target string
	// Timeout bounds each call; 0 when the GrpcService has none (the
	// caller's deadline alone applies).
	Timeout time.Duration
	// Metadata is initial_metadata, sent on each call; nil when empty.
	Metadata metadata.MD
	// CredsSource says where the credentials come from, for the status
	// page and logs.
	CredsSource string

	creds creds  // nil for a Service parsed without an Env
	key   string // the channel's key in the pool: target and credentials
}

// Parse validates gs (gRFC A102) as sent by the server env describes.
func Parse(env *Env, gs *corepb.GrpcService) (*Service, error) {
	if gs.GetEnvoyGrpc() != nil {
		return nil, errors.New("envoy_grpc: not supported (gRFC A102), want google_grpc")
	}
	gg := gs.GetGoogleGrpc()
	if gg == nil {
		return nil, errors.New("google_grpc: missing")
	}
	s := &Service{Target: gg.GetTargetUri()}
	if err := checkTarget(s.Target); err != nil {
		return nil, fmt.Errorf("google_grpc.target_uri: %w", err)
	}
	if t := gs.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return nil, fmt.Errorf("timeout: %w", err)
		}
		if s.Timeout = t.AsDuration(); s.Timeout <= 0 {
			return nil, fmt.Errorf("timeout: %v, want a positive duration", s.Timeout)
		}
	}
	for i, hv := range gs.GetInitialMetadata() {
		key, value, err := HeaderValue(hv)
		if err != nil {
			return nil, fmt.Errorf("initial_metadata[%d]: %w", i, err)
		}
		if s.Metadata == nil {
			s.Metadata = metadata.MD{}
		}
		s.Metadata.Append(key, value)
	}
	switch {
	case env == nil:
		s.CredsSource = "unchecked (no bootstrap)"
		s.key = "unchecked\x00" + s.Target
	case env.Trusted:
		c, err := pluginCreds(gg)
		if err != nil {
			return nil, err
		}
		s.creds, s.CredsSource = c, "the trusted management server's (channel_credentials_plugin)"
		// The key is the target and the plugins' bytes: an update that
		// sends the same credentials keeps the channel.
		var b strings.Builder
		b.WriteString("resource\x00" + s.Target)
		for _, a := range append(append([]*anypb.Any(nil), gg.GetChannelCredentialsPlugin()...), gg.GetCallCredentialsPlugin()...) {
			v, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
			b.WriteString("\x00")
			b.Write(v)
		}
		s.key = b.String()
	default:
		entry, ok := env.Allowed[s.Target]
		if !ok {
			return nil, fmt.Errorf("google_grpc.target_uri: %q is not in the bootstrap's allowed_grpc_services, and management server %q is not trusted (its server_features have no %q): gRFC A102 refuses a side channel the bootstrap does not allow",
				s.Target, env.Server, bootstrap.ServerFeatureTrustedXDSServer)
		}
		s.creds, s.CredsSource = bootstrapCreds{entry}, "the bootstrap's allowed_grpc_services"
		// The entry belongs to one parsed bootstrap, which lives as long
		// as the xDS client that decodes with it: its address names it.
		s.key = fmt.Sprintf("bootstrap\x00%s\x00%p", s.Target, entry)
	}
	return s, nil
}

// checkTarget accepts a URI whose scheme has a registered resolver (gRFC
// A102) or, as grpc.NewClient does, a target that is no URI and becomes one
// with the default scheme in front ("127.0.0.1:9191", "authz:9191"). A
// "scheme://" whose scheme has no resolver is refused.
func checkTarget(t string) error {
	if t == "" {
		return errors.New("empty, want a target URI")
	}
	if u, err := url.Parse(t); err == nil && u.Scheme != "" {
		if resolver.Get(u.Scheme) != nil {
			return nil
		}
		if strings.Contains(t, "://") {
			// A URI whose scheme gRPC has no resolver for.
			return fmt.Errorf("%q: no resolver is registered for scheme %q", t, u.Scheme)
		}
	}
	if _, err := url.Parse("dns:///" + t); err == nil && resolver.Get("dns") != nil {
		return nil
	}
	return fmt.Errorf("%q is not a target gRPC can resolve", t)
}

// HeaderValue validates a HeaderValue of initial_metadata or of a header
// mutation (gRFC A102): a lower-case gRPC header name, not reserved, and a
// value. The value is raw_value when it is set ("the raw_value field will
// always be used"), else value, which Envoy-era servers such as OPA send;
// a value that is not binary ("-bin") must be printable ASCII.
func HeaderValue(hv *corepb.HeaderValue) (key, value string, err error) {
	return headerValue(hv.GetKey(), hv)
}

// AnswerHeader validates a header a side channel's answer asks to send or
// set (gRFC A92, A102, with Envoy's rules): its key lower-cased, as Envoy
// does, then as HeaderValue. keep is false for a Reserved header, which is
// ignored, not an error; err says why an invalid one cannot be used.
func AnswerHeader(hv *corepb.HeaderValue) (key, value string, keep bool, err error) {
	key = strings.ToLower(hv.GetKey())
	if Reserved(key) {
		return "", "", false, nil
	}
	if key, value, err = headerValue(key, hv); err != nil {
		return "", "", false, err
	}
	return key, value, true, nil
}

// headerValue is HeaderValue with key in place of hv's.
func headerValue(key string, hv *corepb.HeaderValue) (string, string, error) {
	if err := CheckHeaderName(key); err != nil {
		return "", "", err
	}
	value := hv.GetValue()
	if raw := hv.GetRawValue(); len(raw) > 0 {
		value = string(raw)
	}
	if !strings.HasSuffix(key, "-bin") {
		if err := checkHeaderValue(value); err != nil {
			return "", "", fmt.Errorf("header %q: %w", key, err)
		}
	}
	if len(value) >= maxHeaderBytes {
		return "", "", fmt.Errorf("header %q: value of %d bytes, want less than %d", key, len(value), maxHeaderBytes)
	}
	return key, value, nil
}

// Reserved reports whether key is a header no side channel may change,
// whatever the configuration says (gRFC A92: ":scheme", ":method",
// ":path", ":authority" and "host"; gRPC's own "grpc-" headers): a
// mutation of one is ignored, not an error.
func Reserved(key string) bool {
	return strings.HasPrefix(key, ":") || key == "host" || strings.HasPrefix(key, "grpc-")
}

// CheckHeaderName reports why key cannot be a header gRPC sends or that a
// side channel may set: empty or too long, not a lower-case gRPC header
// name, a pseudo-header, "host", or in the reserved "grpc-" space.
func CheckHeaderName(key string) error {
	switch {
	case key == "":
		return errors.New("empty header name")
	case len(key) >= maxHeaderBytes:
		return fmt.Errorf("header name of %d bytes, want less than %d", len(key), maxHeaderBytes)
	case key[0] == ':':
		return fmt.Errorf("header %q is a pseudo-header", key)
	case key == "host":
		return fmt.Errorf("header %q is reserved", key)
	case strings.HasPrefix(key, "grpc-"):
		return fmt.Errorf("header %q is in gRPC's reserved grpc- space", key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("header name %q: character %q not allowed (want lower-case letters, digits, '-', '_' and '.')", key, c)
		}
	}
	return nil
}

// checkHeaderValue: printable ASCII, as gRPC sends non-binary values.
func checkHeaderValue(v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("value has byte %#x at %d, want printable ASCII", c, i)
		}
	}
	return nil
}

// HeaderMapValue is the raw_value of header key's value v in a HeaderMap a
// side call sends: v itself or, for a binary ("-bin") header, its base64
// (gRFC A102: "When writing a HeaderValue proto for a header whose name
// ends in -bin, the value must be base64-encoded"). With padding, as RFC
// 4648 has it and as grpc-go writes A102's HeaderValues, so that a service
// sees the same bytes from either and any base64 decoder, strict or not,
// reads them. (Matchers of request headers see the unpadded wire form
// instead: matcher.WireBinary.)
func HeaderMapValue(key, v string) []byte {
	if !strings.HasSuffix(key, "-bin") {
		return []byte(v)
	}
	return []byte(base64.StdEncoding.EncodeToString([]byte(v)))
}
