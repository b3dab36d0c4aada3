package testutils

import "go.uber.org/goleak"

// FindLeaks reports the goroutines still alive, but for VerifyNoLeaks's
// exceptions: for a TestMain that has work to do after m.Run (removing
// what it built), which VerifyNoLeaks, exiting, would skip.
func FindLeaks() error { return goleak.Find(ignores()...) }
