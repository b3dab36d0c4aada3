package grpcservice

import (
	"context"
	"errors"
	"fmt"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesstokenpb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/call_credentials/access_token/v3"
	googledefaultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/google_default/v3"
	insecurepb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/insecure/v3"
	localpb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/local/v3"
	xdscredspb "github.com/envoyproxy/go-control-plane/envoy/extensions/grpc_service/channel_credentials/xds/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/google"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/bootstrap"
	"github.com/proxyless-grpc/xds/internal/typedconfig"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
)

// creds builds the dial options of a side channel. cleanup is never nil
// when err is nil; it runs once the channel is closed.
type creds interface {
	dialOptions() (opts []grpc.DialOption, cleanup func(), err error)
}

// bootstrapCreds are an allowed_grpc_services entry's, built as a
// management server's are (channel_creds, call_creds).
type bootstrapCreds struct{ entry *bootstrap.ServerConfig }

func (c bootstrapCreds) dialOptions() ([]grpc.DialOption, func(), error) {
	return xdsclient.CredentialOptions(c.entry)
}

// resourceCreds are a trusted server's channel_credentials_plugin (the
// first supported entry) and call_credentials_plugin (every supported
// entry).
type resourceCreds struct {
	channel credentials.TransportCredentials // or bundle
	bundle  func() credentials.Bundle
	calls   []credentials.PerRPCCredentials
}

func (c *resourceCreds) dialOptions() ([]grpc.DialOption, func(), error) {
	var opts []grpc.DialOption
	if c.bundle != nil {
		opts = append(opts, grpc.WithCredentialsBundle(c.bundle()))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(c.channel))
	}
	for _, pc := range c.calls {
		opts = append(opts, grpc.WithPerRPCCredentials(pc))
	}
	return opts, func() {}, nil
}

// Type names of the credential plugins of gRFC A102.
const (
	insecureType      = "envoy.extensions.grpc_service.channel_credentials.insecure.v3.InsecureCredentials"
	localType         = "envoy.extensions.grpc_service.channel_credentials.local.v3.LocalCredentials"
	googleDefaultType = "envoy.extensions.grpc_service.channel_credentials.google_default.v3.GoogleDefaultCredentials"
	xdsType           = "envoy.extensions.grpc_service.channel_credentials.xds.v3.XdsCredentials"
	accessTokenType   = "envoy.extensions.grpc_service.call_credentials.access_token.v3.AccessTokenCredentials"
)

// pluginCreds validates a trusted server's credential plugins (gRFC A102):
// the first channel credentials type this library supports (none is an
// error), and every supported call credentials type (others are ignored).
// A supported type with a bad config is an error.
func pluginCreds(gg *corepb.GrpcService_GoogleGrpc) (*resourceCreds, error) {
	c := &resourceCreds{}
	found := false
	for i, a := range gg.GetChannelCredentialsPlugin() {
		ok, err := c.channelPlugin(a)
		if err != nil {
			return nil, fmt.Errorf("google_grpc.channel_credentials_plugin[%d]: %w", i, err)
		}
		if ok {
			found = true
			break
		}
	}
	if !found {
		return nil, errors.New("google_grpc.channel_credentials_plugin: no supported type (want InsecureCredentials, LocalCredentials, GoogleDefaultCredentials or XdsCredentials with one of those as fallback)")
	}
	for i, a := range gg.GetCallCredentialsPlugin() {
		if typedconfig.Name(a.GetTypeUrl()) != accessTokenType {
			continue
		}
		m := &accesstokenpb.AccessTokenCredentials{}
		if err := proto.Unmarshal(a.GetValue(), m); err != nil {
			return nil, fmt.Errorf("google_grpc.call_credentials_plugin[%d]: malformed AccessTokenCredentials: %w", i, err)
		}
		if m.GetToken() == "" {
			return nil, fmt.Errorf("google_grpc.call_credentials_plugin[%d]: AccessTokenCredentials.token is empty", i)
		}
		c.calls = append(c.calls, accessToken(m.GetToken()))
	}
	return c, nil
}

// channelPlugin sets c's channel credentials from a if its type is
// supported.
func (c *resourceCreds) channelPlugin(a *anypb.Any) (bool, error) {
	var m proto.Message
	switch typedconfig.Name(a.GetTypeUrl()) {
	case insecureType:
		m, c.channel = &insecurepb.InsecureCredentials{}, insecure.NewCredentials()
	case localType:
		m, c.channel = &localpb.LocalCredentials{}, local.NewCredentials()
	case googleDefaultType:
		m, c.bundle = &googledefaultpb.GoogleDefaultCredentials{}, func() credentials.Bundle { return google.NewDefaultCredentials() }
	case xdsType:
		// Without xDS security on a channel that has no xDS cluster,
		// gRPC's xDS credentials are their fallback.
		x := &xdscredspb.XdsCredentials{}
		if err := proto.Unmarshal(a.GetValue(), x); err != nil {
			return false, fmt.Errorf("malformed XdsCredentials: %w", err)
		}
		if x.GetFallbackCredentials() == nil {
			return false, errors.New("XdsCredentials.fallback_credentials: missing")
		}
		ok, err := c.channelPlugin(x.GetFallbackCredentials())
		if err != nil {
			return false, fmt.Errorf("XdsCredentials.fallback_credentials: %w", err)
		}
		if !ok {
			return false, fmt.Errorf("XdsCredentials.fallback_credentials: unsupported type %q", x.GetFallbackCredentials().GetTypeUrl())
		}
		return true, nil
	default:
		return false, nil
	}
	if err := proto.Unmarshal(a.GetValue(), m); err != nil {
		return false, fmt.Errorf("malformed %s: %w", typedconfig.Name(a.GetTypeUrl()), err)
	}
	return true, nil
}

// accessToken sends "authorization: Bearer <token>" (gRFC A102), and only
// on a connection with privacy and integrity: on another, nothing (the
// call is not failed, the token is not leaked).
type accessToken string

func (t accessToken) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	ri, _ := credentials.RequestInfoFromContext(ctx)
	if credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity) != nil {
		return nil, nil
	}
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (accessToken) RequireTransportSecurity() bool { return false }
