// Package ratelimit is an interop test of the global rate limit filter
// (issue 35): envoyproxy/ratelimit, the reference Rate Limit Service, built
// from the Go module proxy and run as a process with a YAML config and its
// counters in Debian's redis-server, limits the RPCs of three xDS servers of
// this library configured by one management server (go-control-plane).
// Everything listens on 127.0.0.1. It is a module of its own, so that the
// library's go.mod gains nothing from the tests. See README.md.
package ratelimit
