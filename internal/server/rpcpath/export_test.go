package rpcpath

import (
	"context"

	"google.golang.org/grpc/tap"
)

// ConnTap returns the tap handle ConnOptions gives one new connection of c.
func ConnTap(c *Chain) tap.ServerInHandle { return c.connHandle(nil) }

// UnaryAfter is the first interceptor of chains whose filters may return
// work for after the tap.
var UnaryAfter = unaryAfter

// Continues reports whether the tap left the rest of the RPC's sequence in
// ctx, for the first interceptor.
func Continues(ctx context.Context) bool { return resumeOf(ctx) != nil }
