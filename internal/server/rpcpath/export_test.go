package rpcpath

import "google.golang.org/grpc/tap"

// ConnTap returns the tap handle ConnOptions gives one new connection of c.
func ConnTap(c *Chain) tap.ServerInHandle { return c.connHandle() }
