// Pins the module's dependencies while the packages that use them are being written.
// Delete once every import below is used by real code.
package testutils

import (
	_ "github.com/cncf/xds/go/xds/type/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	_ "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	_ "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	_ "github.com/google/go-cmp/cmp"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/credentials/tls/certprovider/pemfile"
)
