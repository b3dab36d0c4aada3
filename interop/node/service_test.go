package node

// The service of interop.proto, registered with a hand-written
// grpc.ServiceDesc: its messages are well-known types, so no generated code
// is needed.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Full method names of interop.proto's service.
const (
	serviceName = "proxylessgrpc.interop.node.Interop"
	methodWho   = "/" + serviceName + "/Who"
	methodPing  = "/" + serviceName + "/Ping"
)

// interopHandlers is what interopServiceDesc calls.
type interopHandlers interface {
	who(ctx context.Context) (*structpb.Struct, error)
	ping(ctx context.Context) (*emptypb.Empty, error)
}

var interopServiceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*interopHandlers)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Who", Handler: unaryHandler(methodWho, func(h interopHandlers, ctx context.Context) (any, error) { return h.who(ctx) })},
		{MethodName: "Ping", Handler: unaryHandler(methodPing, func(h interopHandlers, ctx context.Context) (any, error) { return h.ping(ctx) })},
	},
	Metadata: "interop.proto",
}

// unaryHandler adapts call, for a method whose request is a
// google.protobuf.Empty, to a grpc.MethodDesc handler that runs the server's
// interceptor if there is one.
func unaryHandler(fullMethod string, call func(interopHandlers, context.Context) (any, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		req := new(emptypb.Empty)
		if err := dec(req); err != nil {
			return nil, err
		}
		h := srv.(interopHandlers)
		if interceptor == nil {
			return call(h, ctx)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
		return interceptor(ctx, req, info, func(ctx context.Context, _ any) (any, error) { return call(h, ctx) })
	}
}

// interopService implements the service and counts the RPCs that reached
// it, so that a test can tell a refusal by configuration (which must not
// reach it) from one by the handler.
type interopService struct {
	whoCalls, pingCalls atomic.Int64
}

// who answers with what the server saw of the caller (see interop.proto).
func (s *interopService) who(ctx context.Context) (*structpb.Struct, error) {
	s.whoCalls.Add(1)
	fields := map[string]any{"security": "insecure"}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return structpb.NewStruct(fields)
	}
	fields["peer"] = p.Addr.String()
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return structpb.NewStruct(fields)
	}
	fields["security"] = "tls"
	if certs := info.State.PeerCertificates; len(certs) > 0 {
		fields["client_cert_sha256"] = certSHA256(certs[0].Raw)
	}
	if info.SPIFFEID != nil {
		fields["client_spiffe_id"] = info.SPIFFEID.String()
	}
	return structpb.NewStruct(fields)
}

func (s *interopService) ping(context.Context) (*emptypb.Empty, error) {
	s.pingCalls.Add(1)
	return &emptypb.Empty{}, nil
}

// certSHA256 is the hex SHA-256 of a certificate's DER, as client.js
// reports it.
func certSHA256(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}
