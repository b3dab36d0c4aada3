package xdsclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/proxyless-grpc/xds/bootstrap"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// transportCredentials builds the channel credentials of a management server
// from its bootstrap entry: "insecure", or "tls" as gRFC A65 describes (CA
// file, else the system roots; optional client certificate and key). The
// files are read once, when the channel is created; their refresh interval
// is not honoured (a new client picks up new files).
func transportCredentials(s *bootstrap.ServerConfig) (credentials.TransportCredentials, error) {
	switch s.ChannelCreds.Type {
	case bootstrap.CredsInsecure:
		return insecure.NewCredentials(), nil
	case bootstrap.CredsTLS:
		cfg, err := tlsConfig(s.ChannelCreds.TLS)
		if err != nil {
			return nil, fmt.Errorf("xdsclient: tls credentials of management server %q: %w", s.ServerURI, err)
		}
		return credentials.NewTLS(cfg), nil
	default:
		return nil, fmt.Errorf("xdsclient: management server %q: unsupported channel credentials %q", s.ServerURI, s.ChannelCreds.Type)
	}
}

func tlsConfig(t *bootstrap.TLSCreds) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t == nil {
		return cfg, nil
	}
	if t.CACertificateFile != "" {
		pem, err := os.ReadFile(t.CACertificateFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in CA file %q", t.CACertificateFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertificateFile != "" || t.PrivateKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertificateFile, t.PrivateKeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
