package xds

import (
	"errors"

	"google.golang.org/grpc/credentials"

	"github.com/proxyless-grpc/xds/internal/server/security"
)

// ServerOptions configures NewServerCredentials. The names mirror
// google.golang.org/grpc/credentials/xds.
type ServerOptions struct {
	// FallbackCreds are the credentials used for a connection whose filter
	// chain has no transport_socket, and for connections not accepted by an
	// xDS server (gRFC A29). Required; insecure.NewCredentials() gives
	// plaintext, as Envoy does without a transport socket.
	FallbackCreds credentials.TransportCredentials
}

// NewServerCredentials returns transport credentials that let the control
// plane decide the security of each connection of an xDS server (gRFC A29).
// Pass them to NewGRPCServer with grpc.Creds.
//
// A connection whose filter chain has a DownstreamTlsContext gets TLS with
// the identity certificate of the chain's tls_certificate_provider_instance;
// with a validation context it is mutual TLS: the client's certificate must
// chain to the roots of its ca_certificate_provider_instance, and is
// required when require_client_certificate is true. The instances are
// certificate_providers of the bootstrap, started on the first handshake
// that needs them, shared by every filter chain (and server) that names the
// same configuration, and stopped (closed) when no filter chain uses them.
// Their plugin is this library's file_watcher (with SPIFFE trust bundle
// maps, gRFC A87), whose files are re-read every refresh_interval, or any
// plugin registered with google.golang.org/grpc/credentials/tls/certprovider.Register,
// built with the instance's certificate_name and asked for its key material
// on each handshake (until gRPC's handshake deadline for the first). Either
// way new handshakes see rotated certificates and existing connections are
// not touched. A Listener naming an instance of a plugin that is not
// registered is NACKed. A chain without transport_socket, and a connection
// not accepted by an xDS server, use FallbackCreds.
//
// A failed TLS handshake closes that connection only and is logged with its
// reason; it never falls back to FallbackCreds and does not change the
// serving mode. The AuthInfo of a TLS connection is a credentials.TLSInfo
// with SecurityLevel PrivacyAndIntegrity, so handlers (peer.FromContext) and
// RBAC see the client certificate.
//
// The returned credentials are server credentials: ClientHandshake fails.
func NewServerCredentials(opts ServerOptions) (credentials.TransportCredentials, error) {
	if opts.FallbackCreds == nil {
		return nil, errors.New("xds: NewServerCredentials: ServerOptions.FallbackCreds is nil, want the credentials to use without xDS security (e.g. insecure.NewCredentials())")
	}
	return security.NewCredentials(opts.FallbackCreds), nil
}
