package xds

import (
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/proxyless-grpc/xds/internal/grpccompat"
	"github.com/proxyless-grpc/xds/internal/server/security"
	"github.com/proxyless-grpc/xds/internal/server/serverlog"
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

// resolveCreds looks at the transport credentials of the user's options
// and decides how filter chains' transport_socket is served:
//
//   - this package's credentials apply it;
//   - grpc-go's google.golang.org/grpc/credentials/xds cannot read it from
//     this server's connections and would hand every connection to their
//     fallback, plaintext where a chain asks for mTLS: they are wrapped in
//     this package's credentials, with themselves as the fallback, so that
//     they behave exactly like NewServerCredentials with the same fallback;
//   - any other credentials (or none: plaintext) are used as they are, as
//     gRFC A29 says, and so.nonXDSCreds describes them, so that listeners
//     report every chain whose TLS they do not apply;
//   - credentials the options do not let it read (an option of the
//     program's that cannot be followed, or a grpc-go release that changed
//     its option types) could be any of those, grpc-go's xDS credentials,
//     with their plaintext fallback, included: so.unknownCreds says why,
//     and listeners refuse the connections of chains that ask for TLS
//     rather than risk serving them in plaintext.
//
// grpccompat.ServerCreds follows options wrapped in the program's own types
// (a struct embedding grpc.ServerOption), as gRPC applies them.
func (so *serverOptions) resolveCreds() {
	creds, err := grpccompat.ServerCreds(so.grpcOpts)
	switch {
	case err != nil:
		serverlog.Component.Warningf("xds: cannot tell which transport credentials the server options set (%v): "+
			"connections to filter chains whose transport_socket asks for TLS will be REFUSED, since they might be served in plaintext; "+
			"pass grpc.Creds(xds.NewServerCredentials(...)) to NewGRPCServer as an option of its own", err)
		so.unknownCreds = err.Error()
	case security.IsCredentials(creds):
	case usesXDS(creds):
		serverlog.Component.Infof("xds: the server credentials are google.golang.org/grpc/credentials/xds: filter chains' TLS is served by this library's xDS credentials, with them as the fallback")
		so.grpcOpts = append(so.grpcOpts, grpc.Creds(security.NewCredentials(creds)))
	case creds == nil:
		so.nonXDSCreds = "none (plaintext): no grpc.Creds option"
	default:
		so.nonXDSCreds = fmt.Sprintf("%T, security protocol %q", creds, creds.Info().SecurityProtocol)
	}
}

// usesXDS reports whether c are xDS credentials of another library, which
// say so as grpc-go's google.golang.org/grpc/credentials/xds do.
func usesXDS(c credentials.TransportCredentials) bool {
	u, ok := c.(interface{ UsesXDS() bool })
	return ok && u.UsesXDS()
}
