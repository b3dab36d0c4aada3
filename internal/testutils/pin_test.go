// Pins dependencies that work in progress (server credentials, RBAC, CSDS
// and metrics) needs, so that parallel work does not edit go.mod. Delete an
// import once real code uses it.
package testutils

import (
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/rbac/audit_loggers/stream/v3"
)
