package testutils

import (
	"os/exec"
	"strings"
	"testing"
)

// ModulePath is the path of this module, for building package paths in tests.
const ModulePath = "github.com/proxyless-grpc/xds"

// CheckDeps fails t if package pkg (an import path) depends, directly or
// not, on any of forbidden: an entry matches a dependency equal to it or
// below it ("google.golang.org/grpc" also forbids
// "google.golang.org/grpc/codes"), or only equal to it when it ends in "$"
// (ModulePath+"$" forbids the root package alone). It keeps the import graph of ARCHITECTURE.md's
// package layout from drifting. Without a go tool on PATH the test is
// skipped.
func CheckDeps(t *testing.T, pkg string, forbidden ...string) {
	t.Helper()
	CheckDepsExcept(t, pkg, nil, forbidden...)
}

// CheckDepsExcept is CheckDeps for a package that may depend on the
// packages of except, and on what they depend on, even where forbidden
// matches them: internal/certprovider may use grpc-go's certificate
// provider registry (GRPCCertProvider) and no other part of gRPC.
func CheckDepsExcept(t *testing.T, pkg string, except []string, forbidden ...string) {
	t.Helper()
	allowed := make(map[string]bool)
	for _, e := range except {
		for _, dep := range listDeps(t, e) {
			allowed[dep] = true
		}
	}
	for _, dep := range listDeps(t, pkg) {
		if allowed[dep] {
			continue
		}
		for _, f := range forbidden {
			exact, ok := strings.CutSuffix(f, "$")
			if dep == exact || !ok && strings.HasPrefix(dep, f+"/") {
				t.Errorf("%s depends on %s, which it must not (forbidden: %s)", pkg, dep, f)
			}
		}
	}
}

// GRPCCertProvider is grpc-go's registry of certificate provider plugins.
const GRPCCertProvider = "google.golang.org/grpc/credentials/tls/certprovider"

// listDeps returns pkg and every package it depends on.
func listDeps(t *testing.T, pkg string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", pkg)
	}
	return deps
}

// PureForbidden lists what the pure packages (filterchain, internal/routing,
// internal/matcher, rbac) must not depend on: gRPC, the xDS client, the
// server, the test helpers and, outside tests, package testing.
var PureForbidden = []string{
	"testing",
	"google.golang.org/grpc",
	ModulePath + "/internal/xdsclient",
	ModulePath + "/internal/testutils",
}

// TestOnly lists what no non-test package may depend on: package testing
// and the test helpers.
var TestOnly = []string{
	"testing",
	ModulePath + "/internal/testutils",
}
