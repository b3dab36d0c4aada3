package grpcservice

import (
	"context"
	"time"
)

// CallerEnded returns why the RPC whose context is ctx ended (its
// cancellation or deadline), or nil while it goes on. A side channel's call
// bounded only by the RPC's deadline can fail with the service's
// DEADLINE_EXCEEDED before ctx's own timer fires; a deadline that has
// passed counts as ended then too, so that such an RPC fails with
// DEADLINE_EXCEEDED instead of being taken for an unanswered call that a
// failure mode may let through.
func CallerEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
