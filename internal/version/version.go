// Package version holds the version of this module, reported to control planes
// in the xDS Node's user_agent_version.
package version

import "runtime/debug"

// fallback is used when the binary carries no module version for this module
// (tests, `go run` inside the module, a replace directive).
const fallback = "v0.1.0-dev"

// ModulePath is the import path of this module.
const ModulePath = "github.com/proxyless-grpc/xds"

// Version returns the version of github.com/proxyless-grpc/xds linked into the
// running binary, as recorded by the Go toolchain, or a development version
// when none is recorded.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fallback
	}
	if info.Main.Path == ModulePath && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	for _, d := range info.Deps {
		if d.Path == ModulePath && d.Version != "" {
			return d.Version
		}
	}
	return fallback
}
