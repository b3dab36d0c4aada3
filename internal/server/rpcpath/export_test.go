package rpcpath

import "google.golang.org/grpc/tap"

// ConnTap returns the tap handle ConnOptions gives one new connection of c.
func ConnTap(c *Chain) tap.ServerInHandle { return c.connHandle() }

// UnaryAfter is the first interceptor of chains whose filters leave work
// for after the tap.
var UnaryAfter = unaryAfter
