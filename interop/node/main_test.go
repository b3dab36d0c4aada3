// Package node holds interop tests in which a client this project did not
// write and that is not written in Go, Node's @grpc/grpc-js with the
// @grpc/grpc-js-xds plugin (client.js), calls this library's xDS server. Both
// get their configuration, including TLS, from one in-process management
// server. It is a module of its own so that the library's module does not
// need Node; every test is skipped when node or node_modules is missing.
package node

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }
