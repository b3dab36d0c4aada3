package pipelinemodel

import (
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestDeps: the model is independent of what it checks. It imports none of
// the library's packages (its filters, routing, matchers, rate limit
// descriptors, RBAC engine, server) and nothing of gRPC but its codes.
func TestDeps(t *testing.T) {
	testutils.CheckDepsExcept(t, testutils.ModulePath+"/internal/testutils/pipelinemodel",
		[]string{"google.golang.org/grpc/codes"},
		testutils.ModulePath+"$",
		testutils.ModulePath+"/internal/httpfilter",
		testutils.ModulePath+"/httpfilter",
		testutils.ModulePath+"/rbac",
		testutils.ModulePath+"/internal/ratelimitdesc",
		testutils.ModulePath+"/internal/matcher",
		testutils.ModulePath+"/internal/routing",
		testutils.ModulePath+"/internal/server",
		testutils.ModulePath+"/internal/grpcservice",
		"google.golang.org/grpc",
		"github.com/envoyproxy/go-control-plane",
	)
}
